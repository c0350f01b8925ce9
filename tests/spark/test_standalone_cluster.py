"""``hermes pipeline --spark-master spark://...``: the archive and an offline retransmission on a Spark standalone
cluster of two workers, each running its executor in its own JVM with the venv's Python for the Python workers;
the lake is a local path, which every worker here sees."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hermes.broker.embedded import EmbeddedBroker
from hermes.pipeline.lake import Lake
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.pipeline import PipelineCommand, lake_count, pipeline_beside, retransmit_offline
from tests.support.spark_cluster import SparkStandaloneCluster
from tests.support.subscriber import SubscriberServer


@pytest.fixture
def pipeline(
    spark_cluster: SparkStandaloneCluster, hermes: InProcessHermes, kafka: EmbeddedBroker, tmp_path: Path
) -> Iterator[PipelineCommand]:
    flags = ("--spark-master", spark_cluster.url, "--pipeline-jobs", "archive,offline-retransmission")
    # no kill here: the 30 messages in one batch, not in small ones (each a round of tasks on the executors)
    flags += ("--pipeline-max-records-per-batch", "1000", "--pipeline-retransmission-poll", "0.5")
    with pipeline_beside(hermes, kafka, tmp_path, *flags) as running:
        yield running


def test_the_archive_and_an_offline_retransmission_run_on_a_standalone_cluster(
    pipeline: PipelineCommand,
    spark_cluster: SparkStandaloneCluster,
    client: HermesClient,
    subscriber: SubscriberServer,
    tmp_path: Path,
) -> None:
    lake = Lake(str(tmp_path / "lake"))
    topic = client.create_topic(offlineStorage={"enabled": True})
    target = client.create_topic()
    client.create_subscription(target, subscriber.url, subscriptionPolicy={"requestTimeout": 10_000})
    start = datetime.now(UTC) - timedelta(seconds=1)
    replies = [client.publish(topic, f'{{"n": "{uuid.uuid4()}"}}') for _ in range(30)]
    assert all(r.status_code in (201, 202) for r in replies)
    published = sorted(r.headers["Hermes-Message-Id"] for r in replies)

    pipeline.start()
    wait_until(lambda: lake_count(None, lake, topic) >= 30, timeout=180, interval=0.5)
    assert lake_count(None, lake, topic) == 30

    done = retransmit_offline(client, topic, target, start, datetime.now(UTC))
    assert done["progress"] == {"republished": 30, "total": 30}
    subscriber.wait_for(30, timeout=60)
    assert sorted(str(r.message_id) for r in subscriber.received) == published
    assert all(spark_cluster.executor_logs(n) for n in (0, 1)), "both workers ran an executor of the pipeline"
    assert pipeline.stop() == 0
