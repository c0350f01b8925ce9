"""Tracking analytics end to end: Hermes writes trace events, the Spark tracking job materializes them, the
management API reads them back (trace, undelivered, per-minute statistics)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from hermes.broker.embedded import EmbeddedBroker
from hermes.domain.trace import TRACKING_TOPIC, TraceEvent, TraceStatus
from hermes.pipeline.trace_retention import apply_trace_retention
from hermes.pipeline.traces import TRACES, TrackingStore, committed_files, compacted_blocks, tracking_root
from hermes.pipeline.tracking_job import TrackingJob, compact_traces, maintain_traces
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.pipeline import pipeline_context
from tests.support.subscriber import Reply, SubscriberServer

FAST = {"messageBackoff": 100, "messageTtl": 60, "requestTimeout": 10_000}


@pytest.fixture(scope="module")
def tracking_job(spark: Any, hermes: InProcessHermes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The pipeline's tracking job, as ``hermes pipeline`` runs it (statistics every 2 s here), warmed up: the
    first micro-batches of a cold query take many seconds (Python workers start), so a first tracked message
    goes all the way through before the tests measure anything."""
    job = TrackingJob(pipeline_context(spark, hermes, tmp_path_factory, pipeline_statistics_trigger=2.0))
    job.start()
    root = tracking_root(hermes.hermes.settings)
    api = HermesClient(hermes.management_url, hermes.frontend_url)
    try:
        topic = api.create_topic(trackingEnabled=True)
        message_id = api.publish(topic, "{}").headers["Hermes-Message-Id"]
        wait_until(lambda: len(TrackingStore(root).trace(topic, "any", message_id)) == 2, 180, 0.5)
        yield root
    finally:
        api.close()
        job.stop()


def scripted(script: Any) -> SubscriberServer:
    return SubscriberServer(script).start()


def test_the_trace_of_a_retried_message_is_served_within_ten_seconds(tracking_job: Path, client: HermesClient) -> None:
    subscriber = scripted(lambda n, _r: Reply(500 if n == 0 else 200))
    try:
        topic = client.create_topic(trackingEnabled=True)
        sub = client.create_subscription(topic, subscriber.url, trackingMode="trackingAll", subscriptionPolicy=FAST)
        message_id = client.publish(topic, '{"n": 1}').headers["Hermes-Message-Id"]
        subscriber.wait_for(2, timeout=30)
        delivered_at = time.monotonic()
        path = f"/topics/{topic}/subscriptions/{sub}/events/{message_id}/trace"

        def trace() -> list[dict[str, Any]]:
            response = client.management.get(path)
            assert response.status_code == 200, response.text
            return response.json()  # type: ignore[no-any-return]

        wait_until(lambda: [e["status"] for e in trace()][-1:] == ["SUCCESS"] and len(trace()) == 5, 10, 0.2)
        assert time.monotonic() - delivered_at <= 10
        events = trace()
        assert [(e.get("subscription"), e["status"]) for e in events] == [
            (None, "INFLIGHT"),
            (None, "SUCCESS"),
            (sub, "INFLIGHT"),
            (sub, "FAILED"),
            (sub, "SUCCESS"),
        ]
        assert all(e["messageId"] == message_id and e["topicName"] == topic for e in events)
        assert [e["timestamp"] for e in events] == sorted(e["timestamp"] for e in events)
        assert "500" in events[3]["reason"] and isinstance(events[4]["offset"], int)

        stats_path = f"/topics/{topic}/subscriptions/{sub}/statistics"
        # FAILED and SUCCESS may reach the statistics in different micro-batches: wait for the delivery
        wait_until(lambda: [m["delivered"] for m in client.management.get(stats_path).json()] == [1], 30, 0.5)
        (minute,) = client.management.get(stats_path).json()
        assert (minute["delivered"], minute["discarded"], minute["failedAttempts"]) == (1, 0, 1)
        assert 0 < minute["latency"]["p50"] == minute["latency"]["max"] < 30_000
        assert minute["minute"] % 60_000 == 0 and minute["minute"] <= events[4]["timestamp"] < minute["minute"] + 60_000
    finally:
        subscriber.stop()


def test_undelivered_lists_the_discarded_messages_newest_first(tracking_job: Path, client: HermesClient) -> None:
    subscriber = scripted(lambda _n, _r: Reply(500))
    try:
        topic = client.create_topic()
        policy = {**FAST, "messageTtl": 1}
        sub = client.create_subscription(topic, subscriber.url, trackingMode="discardedOnly", subscriptionPolicy=policy)
        path = f"/topics/{topic}/subscriptions/{sub}/undelivered"
        ids = []
        for n in range(2):
            ids.append(client.publish(topic, f'{{"n": {n}}}').headers["Hermes-Message-Id"])
            wait_until(lambda n=n: len(client.management.get(path).json()) == n + 1, 20, 0.2)
        undelivered = client.management.get(path).json()
        assert [e["messageId"] for e in undelivered] == ids[::-1]
        assert all(e["status"] == "DISCARDED" and e["subscription"] == sub for e in undelivered)
        assert all("500" in e["reason"] for e in undelivered)
        assert client.management.get(f"/topics/{topic}/subscriptions/{sub}/events/{ids[0]}/trace").json() == [
            undelivered[1]
        ], "discardedOnly: the trace holds just the discard"
    finally:
        subscriber.stop()


def test_the_trace_table_is_partitioned_by_topic_and_date(tracking_job: Path) -> None:
    files = committed_files(tracking_job / TRACES)
    assert files and all(f.parent.parent.name.startswith("topic=") for f in files)
    assert all(f.parent.name.startswith("date=") and len(f.parent.name) == len("date=2026-11-23") for f in files)


def test_compaction_keeps_every_event_in_fewer_files(spark: Any, tracking_job: Path, client: HermesClient) -> None:
    store = TrackingStore(tracking_job)
    topic = client.create_topic(trackingEnabled=True)
    ids = []
    for n in range(3):  # one at a time: separate micro-batches, separate files
        ids.append(client.publish(topic, f'{{"n": {n}}}').headers["Hermes-Message-Id"])
        wait_until(lambda m=ids[-1]: len(store.trace(topic, "any", m)) == 2, 30, 0.2)
    before = {m: store.trace(topic, "any", m) for m in ids}
    assert len(store.trace_files(topic)) >= 3
    assert compact_traces(spark, tracking_job) >= 3
    assert len(store.trace_files(topic)) == 1, "one sorted block replaces the topic's files"
    assert {m: store.trace(topic, "any", m) for m in ids} == before
    compact_traces(spark, tracking_job)
    assert len(store.trace_files(topic)) == 1, "a second compaction finds nothing new of the topic"


# Last in this module: its short retention removes the other tests' traces too.
def test_retention_removes_expired_traces_and_compacted_sink_files(
    spark: Any, tracking_job: Path, client: HermesClient, kafka: EmbeddedBroker
) -> None:
    store = TrackingStore(tracking_job)
    topic = client.create_topic(trackingEnabled=True)
    three_days_ago = datetime.now(UTC) - timedelta(days=3)
    old = str(uuid.uuid4())
    event = TraceEvent(old, int(three_days_ago.timestamp() * 1000), topic, TraceStatus.SUCCESS, "test-cluster")
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    producer.produce(TRACKING_TOPIC, event.to_json())
    assert producer.flush(30) == 0
    wait_until(lambda: len(store.trace(topic, "any", old)) == 1, 30, 0.2)
    recent = []
    for n in range(2):  # one at a time: separate micro-batches, separate files to compact
        recent.append(client.publish(topic, f'{{"n": {n}}}').headers["Hermes-Message-Id"])
        wait_until(lambda m=recent[-1]: len(store.trace(topic, "any", m)) == 2, 30, 0.2)
    old_day = tracking_job / TRACES / f"topic={topic}" / f"date={three_days_ago:%Y-%m-%d}"
    assert old_day.is_dir()

    maintain_traces(spark, tracking_job, timedelta(days=1))  # the job's pass: retention, then compaction

    assert not old_day.exists(), "a whole day older than the retention goes"
    assert store.trace(topic, "any", old) == []
    assert [e["status"] for e in store.trace(topic, "any", recent[1])] == ["INFLIGHT", "SUCCESS"]
    blocks, replaced = compacted_blocks(tracking_job, topic)
    assert len(blocks) == 1 and replaced and all(Path(p).exists() for p in replaced)

    maintain_traces(spark, tracking_job, timedelta(days=1))

    assert not any(Path(p).exists() for p in replaced), "the next pass deletes the files a block replaced"
    assert store.trace_files(topic) == blocks
    assert [e["status"] for e in store.trace(topic, "any", recent[1])] == ["INFLIGHT", "SUCCESS"]

    time.sleep(1.5)
    removed = apply_trace_retention(tracking_job, timedelta(seconds=1), datetime.now(UTC))

    assert removed.blocks >= 1 and not blocks[0].exists(), "a block whose newest event expired goes"
    assert store.trace(topic, "any", recent[0]) == store.trace(topic, "any", recent[1]) == []
