"""Status rules, backoff jitter and the stop-retry header (``subscriptionPolicy`` extensions): their JSON, the
matcher and what they make of an answer."""

import pytest

from hermes.consumers.recipients import Recipients
from hermes.consumers.retry import Backoff
from hermes.consumers.sender.result import SendResult, judge
from hermes.domain import api_json
from hermes.domain.names import TopicName
from hermes.domain.retry_rules import BackoffJitter, RetryRules, RuleAction
from hermes.domain.subscription import Subscription, SubscriptionMode
from hermes.errors import ValidationError

pytestmark = pytest.mark.unit
TOPIC = TopicName.parse("pl.allegro.example.myTopic")


def subscription(**policy: object) -> Subscription:
    return api_json.subscription_from_json(
        {"name": "s", "endpoint": "http://service", "subscriptionPolicy": policy}, TOPIC
    )


def rules(*status_rules: dict[str, object], **policy: object) -> RetryRules:
    return subscription(statusRules=list(status_rules), **policy).retry_rules


def test_the_first_rule_that_matches_a_status_decides() -> None:
    table = rules(
        {"status": "409", "action": "RETRY"},
        {"status": "400-499", "action": "DISCARD"},
        {"status": "5XX", "action": "RETRY_AFTER", "delay": 250},
        {"status": 302, "action": "DEAD_LETTER"},
    )
    assert [(i, r.action) for i, r in (table.rule_for(s) or (None, None) for s in (409, 404, 599, 302))] == [
        (0, RuleAction.RETRY),
        (1, RuleAction.DISCARD),
        (2, RuleAction.RETRY_AFTER),
        (3, RuleAction.DEAD_LETTER),
    ]
    assert table.rule_for(408) == (1, table.status_rules[1])
    assert table.rule_for(301) is None and table.rule_for(600) is None
    assert [r.status for r in table.status_rules] == ["409", "400-499", "5xx", "302"]


@pytest.mark.parametrize(
    ("rule", "field", "said"),
    [
        ({"status": "600", "action": "RETRY"}, "subscriptionPolicy.statusRules[1].status", "from 100 to 599"),
        ({"status": "099", "action": "RETRY"}, "subscriptionPolicy.statusRules[1].status", "from 100 to 599"),
        ({"status": "4xx-5xx", "action": "RETRY"}, "subscriptionPolicy.statusRules[1].status", "a range"),
        ({"status": True, "action": "RETRY"}, "subscriptionPolicy.statusRules[1].status", "from 100 to 599"),
        ({"action": "RETRY"}, "subscriptionPolicy.statusRules[1].status", "from 100 to 599"),
        ({"status": "499-400", "action": "RETRY"}, "subscriptionPolicy.statusRules[1].status", "ends before"),
        ({"status": "2xx", "action": "DISCARD"}, "subscriptionPolicy.statusRules[1].status", "a 2xx answer"),
        ({"status": "409", "action": "DISCARD"}, "subscriptionPolicy.statusRules[1].status", "earlier rules"),
        ({"status": "410", "action": "RETRY_LATER"}, "subscriptionPolicy.statusRules[1].action", "must be one of"),
        ({"status": "410"}, "subscriptionPolicy.statusRules[1].action", "is required"),
        ({"status": "410", "action": "RETRY_AFTER"}, "subscriptionPolicy.statusRules[1].delay", "is required"),
        ({"status": "410", "action": "RETRY", "delay": 10}, "subscriptionPolicy.statusRules[1].delay", "only for"),
        (
            {"status": "410", "action": "RETRY_AFTER", "delay": 3_600_001},
            "subscriptionPolicy.statusRules[1].delay",
            "at most 3600000",
        ),
        ({"status": "410", "action": "RETRY_AFTER", "delay": -1}, "subscriptionPolicy.statusRules[1].delay", "least"),
        ("409", "subscriptionPolicy.statusRules[1]", "JSON object"),
        (None, "subscriptionPolicy.statusRules[1]", "JSON object"),
        ({"status": "410\n", "action": "RETRY"}, "subscriptionPolicy.statusRules[1].status", "from 100 to 599"),
    ],
)
def test_a_bad_status_rule_is_refused_naming_its_field(rule: object, field: str, said: str) -> None:
    with pytest.raises(ValidationError) as error:
        rules({"status": "400-409", "action": "RETRY"}, rule)  # type: ignore[arg-type]
    assert error.value.field == field and said in error.value.message, error.value


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"statusRules": [{"status": str(s), "action": "RETRY"} for s in range(400, 421)]}, "statusRules"),
        ({"statusRules": {"status": "409"}}, "statusRules"),
        ({"backoffJitter": "RANDOM"}, "backoffJitter"),
        ({"stopRetryHeaderAllowed": "yes"}, "stopRetryHeaderAllowed"),
    ],
)
def test_bad_retry_settings_are_refused_naming_their_field(policy: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as error:
        subscription(**policy)
    assert error.value.field == f"subscriptionPolicy.{field}"


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"statusRules": [{"status": "409", "action": "RETRY"}]}, "statusRules"),
        ({"stopRetryHeaderAllowed": True}, "stopRetryHeaderAllowed"),
    ],
)
def test_answers_rules_are_for_http_endpoints(policy: dict[str, object], field: str) -> None:
    body = {"name": "s", "endpoint": "jms://broker/q", "subscriptionPolicy": policy}
    with pytest.raises(ValidationError) as error:
        api_json.subscription_from_json(body, TOPIC)
    assert error.value.field == f"subscriptionPolicy.{field}"


def test_retry_settings_are_answered_only_when_set_and_survive_storage() -> None:
    plain = api_json.subscription_to_json(subscription())["subscriptionPolicy"]
    assert not {"statusRules", "backoffJitter", "stopRetryHeaderAllowed"} & set(plain)
    for delivery in ("SERIAL", "BATCH"):
        policy = {
            "statusRules": [
                {"status": "409", "action": "RETRY_AFTER", "delay": 50},
                {"status": "4xx", "action": "DEAD_LETTER"},
            ],
            "backoffJitter": "EQUAL",
            "stopRetryHeaderAllowed": True,
        }
        body = {"name": "s", "endpoint": "http://service", "deliveryType": delivery, "subscriptionPolicy": policy}
        sub = api_json.subscription_from_json(body, TOPIC)
        answered = api_json.subscription_to_json(sub, mask_secrets=False)
        assert {k: answered["subscriptionPolicy"][k] for k in policy} == policy
        assert api_json.subscription_from_json(answered, TOPIC) == sub


@pytest.mark.parametrize(
    ("status", "retry", "slow_down", "dead_letter", "delay"),
    [
        (409, True, True, True, None),  # RETRY a 4xx Hermes would not retry: with backoff, slowing down
        (400, False, False, True, None),  # no rule: Hermes' table
        (404, False, False, False, None),  # DISCARD: not a dead letter
        (500, False, True, True, None),  # DEAD_LETTER a 5xx: given up, still slowing down as a 5xx does
        (503, True, False, True, 0.25),  # RETRY_AFTER: the rule's delay, not the subscriber's Retry-After
    ],
)
def test_a_rule_decides_the_answers_it_matches(
    status: int, retry: bool, slow_down: bool, dead_letter: bool, delay: float | None
) -> None:
    table = rules(
        {"status": "409", "action": "RETRY"},
        {"status": "404", "action": "DISCARD"},
        {"status": "500", "action": "DEAD_LETTER"},
        {"status": "503", "action": "RETRY_AFTER", "delay": 250},
    )
    verdict = judge(SendResult.of_status(status, retry_after=30.0 if status == 503 else None), False, table)
    assert (verdict.retry, verdict.slow_down, verdict.dead_letter, verdict.delay) == (
        retry,
        slow_down,
        dead_letter,
        delay,
    )


def test_no_rule_overrides_a_delivery_a_network_error_or_an_oauth_reauthorization() -> None:
    table = rules({"status": "100-599", "action": "DISCARD"}, stopRetryHeaderAllowed=True)
    assert not judge(SendResult.of_status(204), False, table).retry
    assert judge(SendResult.of_status(204), False, table).counter is None
    assert judge(SendResult.timeout(), False, table).retry
    reauthorize = SendResult(status=401, reauthorize=True, stop_retry=True)
    assert judge(reauthorize, False, table).retry


def test_the_stop_retry_header_ends_retries_only_where_allowed_and_before_any_rule() -> None:
    stop = SendResult.of_status(503, stop_retry=True)
    retry = [{"status": "5xx", "action": "RETRY"}]
    assert judge(stop, False, rules(*retry)).retry
    verdict = judge(stop, False, rules(*retry, stopRetryHeaderAllowed=True))
    assert not verdict.retry and verdict.dead_letter and verdict.counter == "retriesStopped"
    assert not judge(SendResult.of_status(200, stop_retry=True), False, rules(stopRetryHeaderAllowed=True)).retry


def test_broadcast_keeps_a_dead_letter_unless_every_refusing_instance_discarded_by_rule() -> None:
    table = rules({"status": "404", "action": "DISCARD"}, {"status": "410", "action": "DEAD_LETTER"})

    def outcome(statuses: dict[str, int]) -> tuple[bool, bool, str, tuple[str, ...]]:
        recipients = Recipients(SubscriptionMode.BROADCAST)
        targets = recipients.targets(list(statuses))
        result = recipients.record({a: SendResult.of_status(statuses[a]) for a in targets}, False, table)
        return result.rejected, result.dead_letter, result.reason, result.counters

    rejected, dead_letter, reason, counters = outcome({"http://a/": 404, "http://b/": 404})
    assert rejected and not dead_letter and counters == ("ruleDiscard", "ruleDiscard")
    assert "http://a/ (Message sending failed with status code:404 (subscriptionPolicy.statusRules[0]: DISCARD))" in (
        reason
    )
    rejected, dead_letter, _, counters = outcome({"http://a/": 404, "http://b/": 410})
    assert rejected and dead_letter and counters == ("ruleDiscard", "ruleDeadLetter")
    rejected, dead_letter, _, _ = outcome({"http://a/": 404, "http://b/": 400})  # Hermes' own refusal of a 400
    assert rejected and dead_letter


@pytest.mark.parametrize(("jitter", "low", "high"), [("NONE", 1.0, 1.0), ("FULL", 0.0, 1.0), ("EQUAL", 0.5, 1.0)])
def test_jitter_draws_the_wait_uniformly_within_its_bounds_but_never_a_retry_after(
    jitter: str, low: float, high: float
) -> None:
    backoff = Backoff(0.25, 2.0, 1.0, BackoffJitter(jitter))  # the fourth attempt's backoff: 2 s, at most 1 s
    waits = [backoff.delay(3) for _ in range(2000)]
    assert low <= min(waits) and max(waits) <= high
    assert max(waits) - min(waits) >= 0.9 * (high - low)
    assert abs(sum(waits) / len(waits) - (low + high) / 2) < 0.05
    assert backoff.delay(3, retry_after=7.0) == 7.0


def test_a_subscriptions_backoff_takes_its_jitter_for_serial_and_batch() -> None:
    assert Backoff.of(subscription(backoffJitter="EQUAL")).jitter is BackoffJitter.EQUAL
    body = {"name": "s", "endpoint": "http://service", "deliveryType": "BATCH"}
    batch = api_json.subscription_from_json({**body, "subscriptionPolicy": {"backoffJitter": "FULL"}}, TOPIC)
    assert Backoff.of(batch) == Backoff(0.5, 1.0, 0.5, BackoffJitter.FULL)
