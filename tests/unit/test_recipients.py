"""Endpoint address resolvers and how one message's attempts spread over the resolved addresses."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from hermes.consumers.recipients import Outcome, Recipients
from hermes.consumers.resolver import EndpointItself, StaticAddressList, load_resolver
from hermes.consumers.sender.result import SendResult
from hermes.domain.endpoint import EndpointAddress
from hermes.domain.subscription import SubscriptionMode
from hermes.errors import EndpointResolutionError, StartupError

pytestmark = pytest.mark.unit

ENDPOINT = EndpointAddress.parse("http://bob:pw@service/events")
A, B = "http://10.0.0.1:8080/events", "http://10.0.0.2:8080/events"


def test_the_default_resolver_is_the_endpoint_without_its_credentials() -> None:
    assert asyncio.run(EndpointItself().resolve(ENDPOINT, {"addresses": [A]})) == ["http://service/events"]


def test_the_static_resolver_lists_the_metadata_addresses_once_each() -> None:
    resolver = StaticAddressList()
    assert asyncio.run(resolver.resolve(ENDPOINT, {"addresses": [A, B, A]})) == [A, B]
    assert asyncio.run(resolver.resolve(ENDPOINT, {})) == ["http://service/events"]
    stripped = asyncio.run(resolver.resolve(ENDPOINT, {"addresses": ["http://eve:x@10.0.0.3/e"]}))
    assert stripped == ["http://10.0.0.3/e"]


@pytest.mark.parametrize(
    ("addresses", "names"),
    [
        ("http://a/", "must be a non-empty list"),
        ([], "must be a non-empty list"),
        ([A, "ftp://b/"], "addresses[1]: scheme 'ftp'"),
        ([42], "addresses[0]: must be a non-empty URI"),
    ],
)
def test_the_static_resolver_names_what_is_wrong_with_the_metadata(addresses: object, names: str) -> None:
    with pytest.raises(EndpointResolutionError, match=r"endpointAddressResolverMetadata\.") as error:
        asyncio.run(StaticAddressList().resolve(ENDPOINT, {"addresses": addresses}))
    assert names in error.value.message


def test_resolvers_are_loaded_by_name_with_clear_errors() -> None:
    assert isinstance(load_resolver("hermes.consumers.resolver:StaticAddressList"), StaticAddressList)
    for spec, says in [
        ("hermes.consumers.resolver", "module:Class"),
        ("hermes.nowhere:X", "cannot import hermes.nowhere"),
        ("hermes.consumers.resolver:Nothing", "has no class Nothing"),
        ("hermes.domain.endpoint:EndpointAddress", "cannot be built without arguments"),
        ("hermes.consumers.rate:RateSettings", "has no resolve"),
    ]:
        with pytest.raises(StartupError, match=says):
            load_resolver(spec)


def attempt(
    recipients: Recipients, addresses: list[str], send: Callable[[str, int], Awaitable[SendResult]]
) -> tuple[Outcome, dict[str, SendResult]]:
    """One attempt as ``Delivery.attempt`` makes it: to the recipients' targets, each with its retry count."""
    targets = recipients.targets(addresses)
    sent = asyncio.run(_gather([send(a, recipients.retries(a)) for a in targets]))
    results = dict(zip(targets, sent, strict=True))
    return recipients.record(results, False), results


async def _gather(sends: list[Awaitable[SendResult]]) -> list[SendResult]:
    return list(await asyncio.gather(*sends))


class Instances:
    """Scripted answers per address: a list of statuses consumed one per attempt (the last one repeats)."""

    def __init__(self, **answers: list[int]) -> None:
        self.answers = {f"http://{k}/": v for k, v in answers.items()}
        self.sent: list[tuple[str, int]] = []

    async def send(self, address: str, retries: int) -> SendResult:
        self.sent.append((address, retries))
        statuses = self.answers[address]
        return SendResult.of_status(statuses.pop(0) if len(statuses) > 1 else statuses[0])


def test_broadcast_retries_only_the_failed_instances_until_all_took_the_message() -> None:
    instances = Instances(a=[200], b=[500, 503, 200])
    recipients = Recipients(SubscriptionMode.BROADCAST)
    addresses = list(instances.answers)
    outcomes = [attempt(recipients, addresses, instances.send)[0] for _ in range(3)]
    assert instances.sent == [("http://a/", 0), ("http://b/", 0), ("http://b/", 1), ("http://b/", 2)]
    assert [o.retry for o in outcomes] == [True, True, False]
    assert outcomes[0].slow_down and outcomes[0].reason == (
        "Message sending failed for instances: http://b/ (Message sending failed with status code:500)"
    )
    assert not outcomes[2].slow_down


def test_broadcast_retry_after_only_when_every_failed_instance_asked_for_it() -> None:
    async def send(address: str, _retries: int) -> SendResult:
        return SendResult.of_status(503, 2.0 if "a" in address else (5.0 if "b" in address else None))

    outcome, _ = attempt(Recipients(SubscriptionMode.BROADCAST), ["http://a/", "http://b/"], send)
    assert outcome.retry_after == 5.0
    outcome, _ = attempt(Recipients(SubscriptionMode.BROADCAST), ["http://a/", "http://c/"], send)
    assert outcome.retry_after is None


def test_broadcast_does_not_wait_for_an_instance_that_is_no_longer_resolved() -> None:
    instances = Instances(a=[200], b=[500])
    recipients = Recipients(SubscriptionMode.BROADCAST)
    assert attempt(recipients, ["http://a/", "http://b/"], instances.send)[0].retry
    outcome, results = attempt(recipients, ["http://a/"], instances.send)
    assert not outcome.retry and results == {}


def test_anycast_sends_each_attempt_to_one_address_moving_on_after_a_failure() -> None:
    instances = Instances(a=[500], b=[200])
    recipients = Recipients(SubscriptionMode.ANYCAST)
    first, _ = attempt(recipients, list(instances.answers), instances.send)
    second, _ = attempt(recipients, list(instances.answers), instances.send)
    assert instances.sent == [("http://a/", 0), ("http://b/", 1)]
    assert first.reason == "Message sending failed with status code:500" and not second.retry


def test_no_address_is_a_retried_failure() -> None:
    recipients = Recipients(SubscriptionMode.BROADCAST)
    assert recipients.targets([]) == []
    outcome = recipients.unresolved("the endpoint address resolver returned no address")
    assert outcome.retry and outcome.slow_down
    assert "returned no address" in outcome.reason
