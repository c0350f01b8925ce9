"""``hermes pipeline --spark-remote``: every job through a local Spark Connect server (started with Spark's Kafka
connector), including a client killed while its queries run, and a server without the connector."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hermes.broker.embedded import EmbeddedBroker
from hermes.pipeline.lake import Lake
from hermes.pipeline.traces import TrackingStore, tracking_root
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.pipeline import PipelineCommand, lake_count, lake_ids, pipeline_beside, retransmit_offline
from tests.support.spark_connect import SparkConnectServer
from tests.support.subscriber import SubscriberServer

FRONTEND = ["INFLIGHT", "SUCCESS"]  # a published message's trace before any subscription


@pytest.fixture
def pipeline(
    spark_connect: SparkConnectServer, hermes: InProcessHermes, kafka: EmbeddedBroker, tmp_path: Path
) -> Iterator[PipelineCommand]:
    flags = ("--spark-remote", spark_connect.url, "--pipeline-jobs", "all", "--pipeline-statistics-trigger", "2")
    with pipeline_beside(hermes, kafka, tmp_path, *flags, "--pipeline-retransmission-poll", "0.5") as running:
        yield running


def test_the_pipeline_runs_every_job_through_spark_connect(
    pipeline: PipelineCommand,
    spark_connect: SparkConnectServer,
    hermes: InProcessHermes,
    client: HermesClient,
    subscriber: SubscriberServer,
    tmp_path: Path,
) -> None:
    lake = Lake(str(tmp_path / "lake"))
    topic = client.create_topic(offlineStorage={"enabled": True}, trackingEnabled=True)
    target = client.create_topic()  # for the retransmission at the end; its subscription is ready by then
    client.create_subscription(target, subscriber.url, subscriptionPolicy={"requestTimeout": 10_000})
    start = datetime.now(UTC) - timedelta(seconds=1)

    def publish(n: int) -> list[str]:
        replies = [client.publish(topic, f'{{"n": "{uuid.uuid4()}"}}') for _ in range(n)]
        assert all(r.status_code in (201, 202) for r in replies)
        return [r.headers["Hermes-Message-Id"] for r in replies]

    published = publish(20)
    pipeline.start()
    wait_until(lambda: lake_count(None, lake, topic) >= 15, timeout=180, interval=0.5)
    # The killed client's queries run on in the server until the restarted pipeline starts its own on the
    # same checkpoints (Spark stops the active run of a checkpoint that is started again).
    pipeline.kill()
    published += publish(10)
    pipeline.start()
    wait_until(lambda: lake_count(None, lake, topic) >= 30, timeout=180, interval=0.5)
    ids = lake_ids(lake, topic)
    assert sorted(ids) == sorted(published), "each message exactly once across the killed client"

    # tracking: the server writes the trace table where management reads it
    store = TrackingStore(tracking_root(hermes.hermes.settings))
    for message_id in (published[0], published[-1]):
        wait_until(lambda m=message_id: [e["status"] for e in store.trace(topic, "any", m)] == FRONTEND, 180, 0.5)

    # offline retransmission: a Spark batch job on the server republishes the range into a live subscription
    end = datetime.now(UTC)
    done = retransmit_offline(client, topic, target, start, end)
    assert done["progress"] == {"republished": 30, "total": 30}
    subscriber.wait_for(30, timeout=60)
    assert sorted(r.message_id for r in subscriber.received) == sorted(published)
    assert pipeline.stop() == 0, "SIGTERM stops the pipeline and its queries cleanly"


def test_a_spark_connect_server_without_the_kafka_connector_is_a_clear_error(
    spark_connect_without_kafka: SparkConnectServer, hermes: InProcessHermes, kafka: EmbeddedBroker, tmp_path: Path
) -> None:
    server = spark_connect_without_kafka
    try:
        with pipeline_beside(hermes, kafka, tmp_path, "--spark-remote", server.url) as command:
            command.start()
            assert command.process is not None and command.process.process is not None
            assert command.process.process.wait(120) == 1
            assert f"hermes: the Spark Connect server {server.url} has no Kafka connector" in command.process.log()
    finally:
        server.stop()  # no other test uses it
