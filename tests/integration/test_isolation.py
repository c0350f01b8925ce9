"""One failing subscriber must not slow any other subscription.

A healthy subscription's delivery latency (publish to arrival) and rate are measured alone and beside two
subscriptions of the same topic whose endpoints always time out (short requestTimeout) or always answer 500.
Phases come in pairs (beside, then alone) so that the machine's changing load falls on both sides alike; each
pair gives the ratios beside/alone of the figures, and their medians must stay within 10 %. "Beside" is the
failing subscribers' steady state: each phase starts once their rate limiters slowed them down, about a second
after they start failing (the first second's attempts are bounded by their rate and inflightSize, and not
measured here). The failing endpoints' work is not Hermes': they run in a child process, and Hermes in another,
so that neither takes Hermes' interpreter lock.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hermes.broker.embedded import EmbeddedBroker
from tests.conftest import wait_until
from tests.support.failing import FailingEndpoint
from tests.support.hermes import HermesClient, HermesProcess
from tests.support.subscriber import SubscriberServer

pytestmark = pytest.mark.integration

RATE = 160  # messages per second published to the topic: 400 a phase, so that a phase's p50 varies by ~3%, not ~6%
PHASE = 2.5  # seconds of publishing per phase
PAIRS = 4  # of phases: beside the failing subscriptions, then alone
TOLERANCE = 0.10  # the bound; medians of 0.98-1.02 measured in three runs


@dataclass(frozen=True)
class Figures:
    p50: float  # seconds from publishing to arrival
    p90: float
    rate: float  # messages per second delivered


def publish(client: HermesClient, topic: str, seconds: float) -> dict[str, float]:
    """Publishes RATE messages a second on a fixed schedule; the send time of each message id."""
    sent: dict[str, float] = {}
    start = time.monotonic()
    for i in range(int(seconds * RATE)):
        delay = start + i / RATE - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        at = time.monotonic()
        response = client.publish(topic, f'{{"n": {i}}}')
        assert response.status_code in (201, 202), response.text
        sent[response.headers["Hermes-Message-Id"]] = at
    return sent


def measure(client: HermesClient, topic: str, subscriber: SubscriberServer) -> Figures:
    sent = publish(client, topic, PHASE)
    wait_until(lambda: set(sent) <= {r.message_id for r in subscriber.received}, timeout=20, interval=0.1)
    arrived = {r.message_id: r.at for r in subscriber.received if r.message_id in sent}
    latencies = [arrived[m] - t for m, t in sent.items()]
    cuts = statistics.quantiles(latencies, n=10)
    return Figures(cuts[4], cuts[8], len(sent) / (max(arrived.values()) - min(sent.values())))


@pytest.fixture
def hermes_process(kafka: EmbeddedBroker, tmp_path: Path) -> Iterator[HermesClient]:
    """Hermes in a process of its own: the test's publisher and subscriber do not take its interpreter lock."""
    process = HermesProcess(
        tmp_path,
        "--kafka-bootstrap-servers",
        kafka.bootstrap_servers,
        "--metadata-poll-interval",
        "0.05",
        "--consumer-commit-interval",
        "0.2",
    ).start()
    client = HermesClient(process.management_url, process.frontend_url)
    yield client
    client.close()
    assert process.stop() == 0, process.log()


@pytest.fixture
def failing() -> Iterator[tuple[FailingEndpoint, FailingEndpoint]]:
    endpoints = FailingEndpoint(200, delay=30.0), FailingEndpoint(500)
    yield endpoints
    for endpoint in endpoints:
        endpoint.stop()


def test_failing_subscribers_do_not_slow_a_healthy_one(
    hermes_process: HermesClient,
    subscriber: SubscriberServer,
    failing: tuple[FailingEndpoint, FailingEndpoint],
) -> None:
    client = hermes_process
    timing_out, answering_500 = failing
    topic = client.create_topic()
    client.create_subscription(topic, subscriber.url, subscriptionPolicy={"messageTtl": 60})
    bad = {
        client.create_subscription(topic, timing_out.url, subscriptionPolicy={"requestTimeout": 200}): timing_out,
        client.create_subscription(topic, answering_500.url): answering_500,
    }

    def attempts_within(seconds: float) -> list[int]:
        before = [e.received() for e in bad.values()]
        time.sleep(seconds)
        return [e.received() - n for e, n in zip(bad.values(), before, strict=True)]

    def quiet() -> bool:  # the failing consumers stopped: their endpoints hear nothing more
        return attempts_within(0.5) == [0, 0]

    def throttled() -> bool:  # their limiters slowed them down to the slow rate (1 attempt/s)
        return max(attempts_within(0.5)) <= 1

    def set_bad(state: str) -> None:
        for name in bad:
            path = f"/topics/{topic}/subscriptions/{name}/state"
            response = client.management.put(path, content=f'"{state}"', headers={"Content-Type": "application/json"})
            assert response.status_code == 200, response.text

    def failing_again() -> None:  # the failing consumers joined their groups, attempt, and were slowed down
        before = [e.received() for e in bad.values()]
        publish(client, topic, 0.5)
        wait_until(lambda: all(e.received() > n for e, n in zip(bad.values(), before, strict=True)), 30, 0.1)
        wait_until(throttled, timeout=10, interval=0)

    publish(client, topic, 0.5)
    subscriber.wait_for(1, timeout=30)
    ratios: dict[str, list[float]] = {"p50": [], "p90": [], "rate": []}  # beside / alone, per pair of phases
    for pair in range(PAIRS):
        if pair:
            set_bad("ACTIVE")
        failing_again()
        beside = measure(client, topic, subscriber)  # in their limiters' slow or heartbeat mode
        set_bad("SUSPENDED")
        wait_until(quiet, timeout=20)
        alone = measure(client, topic, subscriber)
        for name, values in ratios.items():
            values.append(getattr(beside, name) / getattr(alone, name))
    medians = {name: statistics.median(values) for name, values in ratios.items()}
    print(medians, ratios)
    assert medians["p50"] <= 1 + TOLERANCE, ratios
    assert medians["p90"] <= 1 + TOLERANCE, ratios
    assert medians["rate"] >= 1 - TOLERANCE, ratios
