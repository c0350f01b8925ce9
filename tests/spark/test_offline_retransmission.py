"""Offline retransmission end to end: messages archived to the lake and then gone from Kafka (deleted as retention
would delete them) are republished by a task into a live subscription of another topic."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from hermes.broker.admin import BrokerAdmin
from hermes.pipeline.lake import read_lake
from hermes.pipeline.offline_storage import ArchiveJob
from hermes.pipeline.retransmission import RetransmissionJob
from hermes.pipeline.runner import PipelineContext
from tests.conftest import wait_until
from tests.integration.test_publishing import read_topic
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.pipeline import pipeline_context, retransmit_offline
from tests.support.subscriber import SubscriberServer

ARCHIVED = {"offlineStorage": {"enabled": True, "retentionTime": {"duration": 7}}}


@pytest.fixture(scope="module")
def context(spark: Any, hermes: InProcessHermes, tmp_path_factory: pytest.TempPathFactory) -> PipelineContext:
    return pipeline_context(spark, hermes, tmp_path_factory, pipeline_retransmission_poll=0.5)


@pytest.fixture
def retransmission(context: PipelineContext) -> Iterator[RetransmissionJob]:
    job = RetransmissionJob(context)
    job.start()
    yield job
    job.stop()


def test_messages_no_longer_in_kafka_reach_a_live_subscription(
    context: PipelineContext,
    hermes: InProcessHermes,
    client: HermesClient,
    subscriber: SubscriberServer,
    retransmission: RetransmissionJob,
) -> None:
    source = client.create_topic(**ARCHIVED)
    start = datetime.now(UTC) - timedelta(seconds=1)
    published = [
        client.publish(source, f'{{"n": {n}}}', headers={"Partition-Key": "k", "Trace-Id": f"trace-{n}"})
        for n in range(3)
    ]
    assert all(r.status_code in (201, 202) for r in published)  # 202: accepted, the broker ack came later
    ids = [r.headers["Hermes-Message-Id"] for r in published]
    time.sleep(0.05)  # the range ends between the second and the third message (millisecond timestamps)
    end = datetime.now(UTC)
    late = client.publish(source, '{"n": 3}', headers={"Partition-Key": "k"}).headers["Hermes-Message-Id"]

    archive = ArchiveJob(context)
    archive.start()
    try:
        wait_until(lambda: read_lake(context.spark, context.lake, source).count() == 4, 180, 1.0)
    finally:
        archive.stop()

    admin = BrokerAdmin(context.connection)
    ends = admin.end_offsets(source)
    kafka_admin = AdminClient({"bootstrap.servers": context.connection.bootstrap_servers})
    deleted = kafka_admin.delete_records([TopicPartition(source, p, end) for p, end in ends.items()])
    for future in deleted.values():  # as Kafka's retention would
        future.result(30)
    assert admin.beginning_offsets(source) == ends, "nothing of the source topic is left in Kafka"

    target = client.create_topic()
    client.create_subscription(target, subscriber.url, subscriptionPolicy={"requestTimeout": 10_000})
    done = retransmit_offline(client, source, target, start, end)
    assert done["progress"] == {"republished": 3, "total": 3}
    subscriber.wait_for(3, timeout=30)
    time.sleep(1.0)  # time for a message outside the range to arrive, if one was wrongly sent
    by_id = {r.message_id: r for r in subscriber.received}
    assert len(subscriber.received) == 3 and set(by_id) == set(ids), "the original ids, and nothing else"
    assert late not in by_id
    assert [by_id[i].headers.get("Trace-Id") for i in ids] == ["trace-0", "trace-1", "trace-2"]
    assert [by_id[i].body for i in ids] == [b'{"n": 0}', b'{"n": 1}', b'{"n": 2}']
    in_kafka = read_topic(hermes, target, 3)
    assert [m.message_id for m in in_kafka] == ids, "republished in publish order (one key: one partition)"


def test_a_task_over_an_empty_range_is_done_at_once(
    context: PipelineContext, client: HermesClient, retransmission: RetransmissionJob
) -> None:
    source = client.create_topic(**ARCHIVED)
    target = client.create_topic()
    done = retransmit_offline(client, source, target, "2020-01-01T00:00:00Z", "2020-01-01T01:00:00Z", 60)
    assert done["progress"] == {"republished": 0, "total": 0}
