import asyncio
import time

import orjson
import pytest

from hermes.consumers.batch import Batch
from hermes.consumers.content import ContentConverter
from hermes.consumers.context import ConsumerContext
from hermes.consumers.delivery import Delivery
from hermes.consumers.rate import AdaptiveRateLimiter, RateMode, RateSettings
from hermes.consumers.retry import Backoff
from hermes.consumers.sender.result import SendResult, judge
from hermes.domain.avro import check_avro
from hermes.domain.endpoint import EndpointAddress
from hermes.domain.filters import MessageFilters
from hermes.domain.message import Message
from hermes.domain.names import TopicName
from hermes.domain.subscription import (
    CircuitBreakerPolicy,
    MatchingStrategy,
    MessageFilterSpecification,
    SerialSubscriptionPolicy,
    Subscription,
)
from hermes.errors import UndeliverableMessage, ValidationError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("status", "retry_client_errors", "retry_after", "retry", "slow_down"),
    [
        (200, False, None, False, False),
        (201, True, None, False, False),
        (400, False, None, False, False),
        (404, True, None, True, True),
        (429, False, None, False, True),
        (429, True, None, True, True),
        (429, True, 1.0, True, False),
        (500, False, None, True, True),
        (502, True, 1.0, True, True),
        (503, False, None, True, True),
        (503, False, 2.0, True, False),
        (None, False, None, True, True),
    ],
)
def test_the_status_table_of_the_subscribing_guide(
    status: int | None, retry_client_errors: bool, retry_after: float | None, retry: bool, slow_down: bool
) -> None:
    result = SendResult.of_status(status, retry_after) if status is not None else SendResult.timeout()
    verdict = judge(result, retry_client_errors)
    assert (verdict.retry, verdict.slow_down) == (retry, slow_down)


def test_backoff_grows_by_the_multiplier_up_to_the_maximum_and_retry_after_wins() -> None:
    backoff = Backoff(initial=0.1, multiplier=2.0, maximum=0.5)
    assert [backoff.delay(n) for n in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    assert backoff.delay(3, retry_after=7.0) == 7.0
    assert Backoff(1.0, 1.0, 600).delay(10) == 1.0
    assert Backoff(0.5, 10.0, 600).delay(400) == 600  # 10**400 does not fit a float: still the maximum


def _message(body: bytes, **headers: str) -> Message:
    return Message("g.t", 0, 0, "id", body, 0, propagated_headers=headers)


def _filter(
    kind: str,
    matcher: str,
    path: str | None = None,
    header: str | None = None,
    strategy: MatchingStrategy = MatchingStrategy.ALL,
) -> MessageFilters:
    return MessageFilters([MessageFilterSpecification(kind, matcher, path, header, strategy)])


def test_jsonpath_matchers_must_match_the_whole_value() -> None:
    passes = _filter("jsonpath", "abc.*", "$.user.name").passes
    assert passes(_message(b'{"user": {"name": "abcdef"}}'))
    assert not passes(_message(b'{"user": {"name": "xabc"}}'))
    assert not passes(_message(b'{"user": {}}'))
    assert not passes(_message(b"not json"))


def test_matching_strategy_all_and_any_over_wildcards() -> None:
    body = b'{"addresses": [{"country": "GB"}, {"country": "PL"}]}'
    everyone = _filter("jsonpath", "GB", "$.addresses.*.country", strategy=MatchingStrategy.ALL)
    anyone = _filter("jsonpath", "GB", "$.addresses.*.country", strategy=MatchingStrategy.ANY)
    assert not everyone.passes(_message(body))
    assert anyone.passes(_message(body))
    assert everyone.passes(_message(b'{"addresses": [{"country": "GB"}]}'))


def test_avropath_and_header_filters() -> None:
    doc = b'{"user": {"addresses": [{"city": "abcity"}, {"city": "other"}]}}'
    assert _filter("avropath", "^abc.*", ".user.addresses[0].city").passes(_message(doc))
    assert not _filter("avropath", "^abc.*", ".user.addresses[*].city").passes(_message(doc))
    assert _filter("avropath", "^abc.*", ".user.addresses[*].city", strategy=MatchingStrategy.ANY).passes(_message(doc))
    assert _filter("header", "eu-.*", header="Region").passes(_message(b"{}", region="eu-west"))
    assert not _filter("header", "eu-.*", header="Region").passes(_message(b"{}", region="us-east"))


def test_the_rate_slows_down_on_failures_and_falls_to_slow_then_heartbeat() -> None:
    limiter = AdaptiveRateLimiter(100, RateSettings(period=0.0, slow_rate=1.0))
    for _ in range(5):
        for failed in (True, False, False, False):  # a minority of failures: 20 % less each period
            limiter.record(failed=failed)
        limiter._adjust(limiter._period_start + 1)
    assert limiter.mode is RateMode.NORMAL and limiter.rate == pytest.approx(100 * 0.8**5)
    for failed in (True, True, False):  # a majority: slow at once
        limiter.record(failed=failed)
    limiter._adjust(limiter._period_start + 1)
    assert limiter.mode is RateMode.SLOW and limiter.rate == 1.0
    limiter.record(failed=True)
    limiter._adjust(limiter._period_start + 1)
    assert limiter.mode is RateMode.HEARTBEAT
    limiter.record(failed=False)
    assert limiter.mode is RateMode.SLOW
    limiter.record(failed=False)
    limiter._adjust(limiter._period_start + 1)
    assert limiter.mode is RateMode.NORMAL
    for _ in range(40):
        limiter.record(failed=False)
        limiter._adjust(limiter._period_start + 1)
    assert limiter.rate == 100, "recovers to the maximum, never above it"


def test_waiters_queue_for_the_rate_and_each_slot_wakes_one() -> None:
    class CountingLimiter(AdaptiveRateLimiter):
        checks = 0

        def _adjust(self, now: float) -> None:  # runs once per wake-up of a waiter
            CountingLimiter.checks += 1
            super()._adjust(now)

    limiter = CountingLimiter(200)

    async def retries() -> float:
        start = time.monotonic()
        await asyncio.gather(*(limiter.acquire() for _ in range(40)))
        return time.monotonic() - start

    elapsed = asyncio.run(retries())
    assert elapsed >= 39 / 200 * 0.95, "the rate holds"
    assert CountingLimiter.checks < 3 * 40, f"{CountingLimiter.checks} wake-ups for 40 slots: a thundering herd"


def test_a_batch_keeps_only_its_pending_messages_with_their_generations_bodies_and_volume() -> None:
    batch = Batch(started=0.0)
    for offset, body in enumerate((b'{"a":1}', b'{"bb":22}', b'{"c":3}')):
        batch.add(Message("t", 0, offset, f"id{offset}", body, 0), offset + 10, body)
    assert [m.message_id for m in batch.keep([True, False, True])] == ["id1"]
    assert [m.message_id for m in batch.messages] == ["id0", "id2"]
    assert batch.generations == [10, 12]
    assert batch.body == b'[{"a":1},{"c":3}]'
    assert batch.volume == len(b'{"a":1}') + len(b'{"c":3}')


def test_an_avro_body_that_is_no_record_of_its_schema_is_undeliverable_with_the_reason_in_words() -> None:
    schema = orjson.dumps({"type": "record", "name": "R", "fields": [{"name": "city", "type": "string"}]}).decode()
    cut_short = b"\x14abc"  # a 10-byte string with 3 bytes: fastavro's EOFError('Expected 10 bytes, read 3')
    message = Message("g.t", 0, 7, "id", cut_short, 0, schema_version=1)
    subscription = Subscription(TopicName("g", "t"), "s", EndpointAddress("http://x"))
    with pytest.raises(UndeliverableMessage) as error:
        ContentConverter.body(subscription, message, schema)
    assert error.value.message == (
        "the message is not Avro binary of schema version 1 of g.t: the body ends before its record does "
        "(cut short, or written with another schema)"
    )
    with pytest.raises(ValidationError, match="the body ends before its record does") as refused:
        check_avro(schema, cut_short)
    assert "EOFError" not in refused.value.message


def test_an_attempt_goes_at_once_only_with_the_breaker_closed_and_a_slot_free() -> None:
    """``admitted_at_once``, the usual attempt's way past the breaker and the rate limiter without a coroutine: when
    it says no, ``admitted`` waits (for a slot, or for the breaker's probe)."""

    async def check() -> None:
        subscription = Subscription(
            TopicName.parse("g.t"),
            "s",
            EndpointAddress.parse("http://localhost/"),
            serial_policy=SerialSubscriptionPolicy(rate=1),
            circuit_breaker=CircuitBreakerPolicy(consecutive_failures=1),
        )
        context = ConsumerContext(None, None, None, None, "node", "cluster")  # type: ignore[arg-type]
        delivery = Delivery(subscription, context)
        assert delivery.admitted_at_once(paced=True), "the first slot is free"
        assert not delivery.admitted_at_once(paced=True), "the next one is a second away"
        assert delivery.admitted_at_once(paced=False), "an attempt that is not paced needs no slot"
        delivery.breaker.record(failed=True)
        assert not delivery.breaker.closed
        assert not delivery.admitted_at_once(paced=False), "an open breaker: admitted decides"

    asyncio.run(check())
