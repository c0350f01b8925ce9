"""``hermes frontend --workers 2``: one scrape answers for every worker, and a killed worker is started again
while the other keeps serving, losing nothing it answered 201 or 202."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hermes.broker.admin import BrokerAdmin
from hermes.broker.embedded import EmbeddedBroker
from hermes.broker.kafka_consumer import BrokerConsumer
from hermes.metadata.documents import TOPIC_METRICS
from hermes.metadata.repository import MetadataRepository
from hermes.runtime import Role
from tests.support.hermes import HermesClient, HermesProcess, InProcessHermes, hermes_settings, unique
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


class _Workers:
    """Management in this process, and ``hermes frontend --workers 2`` beside it on the same data directory."""

    def __init__(self, tmp_path: Path, kafka: EmbeddedBroker) -> None:
        self.management = InProcessHermes(
            hermes_settings(tmp_path, kafka.bootstrap_servers), frozenset({Role.MANAGEMENT})
        ).start()
        args = ("--kafka-bootstrap-servers", kafka.bootstrap_servers, "--metadata-poll-interval", "0.05")
        # how often each worker reports its publish rates
        env = {"HERMES_CONSUMER_METRICS_INTERVAL": "0.2"}
        self.frontend = HermesProcess(tmp_path, *args, "--workers", "2", command="frontend", env=env)
        self.frontend.start(wait_for="frontend")
        self.client = HermesClient(self.management.management_url, self.frontend.frontend_url)
        self.metrics_dir = tmp_path / "frontend-metrics"

    def pids(self) -> set[int]:
        assert self.frontend.process is not None
        master = self.frontend.process.pid
        return {int(pid) for pid in Path(f"/proc/{master}/task/{master}/children").read_text().split()}

    def scrape(self, topic: str) -> float:
        """The topic's accepted publishes (201 and 202) in one scrape, over a new connection (so by any worker)."""
        text = httpx.get(f"{self.frontend.frontend_url}/status/prometheus", timeout=10).text
        pattern = rf'^hermes_frontend_requests_total{{status="20[12]",topic="{topic}"}} (\S+)$'
        return sum(float(count) for count in re.findall(pattern, text, re.M))

    def close(self) -> None:
        self.frontend.stop()
        self.client.close()
        self.management.stop()


@pytest.fixture
def workers(tmp_path: Path, kafka: EmbeddedBroker) -> Iterator[_Workers]:
    rig = _Workers(tmp_path, kafka)
    yield rig
    rig.close()


def _rate_reports(repository: MetadataRepository, topic: str) -> list[str]:
    return [key for key in repository.list_documents(TOPIC_METRICS) if key.startswith(f"{topic}/")]


def _published(management: InProcessHermes, topic: str, wanted: set[str]) -> set[str]:
    """The message ids in the topic, read until ``wanted`` are all there (the topic holds others too)."""
    assert management.hermes.connection is not None
    partitions = BrokerAdmin(management.hermes.connection).partitions(topic)
    consumer = BrokerConsumer(management.hermes.connection, unique("reader"), auto_offset_reset="earliest")
    consumer.assign({(topic, p): 0 for p in partitions})
    found: set[str] = set()
    # the killed worker's 202s are sent again by its replacement once it has started, which a loaded machine
    # can hold up for a minute or more: waiting long costs nothing when they are all there
    deadline = time.monotonic() + 180
    try:
        while not wanted <= found and time.monotonic() < deadline:
            found.update(message.message_id for message in consumer.poll(500, 0.2))
    finally:
        consumer.close()
    return found


class _Load:
    """Publishers on threads of their own, each on its connection, noting what was accepted and when."""

    def __init__(self, url: str, topic: str, threads: int) -> None:
        self.accepted: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._publish, args=(url, topic)) for _ in range(threads)]
        for thread in self._threads:
            thread.start()

    def _publish(self, url: str, topic: str) -> None:
        with httpx.Client(base_url=url, timeout=30) as client:
            while not self._stop.is_set():
                try:
                    response = client.post(f"/topics/{topic}", content=b'{"n": 1}')
                except httpx.TransportError:  # its worker was killed: the outcome is unknown, so not counted
                    continue
                if response.status_code in (201, 202):
                    self.accepted.append((time.monotonic(), response.headers["Hermes-Message-Id"]))

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)


def test_one_scrape_counts_every_workers_requests_and_a_killed_worker_loses_nothing(workers: _Workers) -> None:
    topic = workers.client.create_topic()
    url = workers.frontend.frontend_url
    for _ in range(16):  # new connections, which the kernel spreads over both workers
        with httpx.Client(base_url=url, timeout=30) as client:
            for _ in range(2):
                assert client.post(f"/topics/{topic}", content=b"{}").status_code in (201, 202)
    # both workers served some: each writes its counters to a file of its own within a second
    wait_until(lambda: len(list(workers.metrics_dir.glob("counter_*.db"))) == 2, timeout=10)
    wait_until(lambda: all(workers.scrape(topic) == 32.0 for _ in range(4)), timeout=20, interval=0.2)
    # each live worker's own process figures, whichever worker answers the scrape
    text = httpx.get(f"{url}/status/prometheus", timeout=10).text
    for figure in (
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        'python_gc_collections_total{generation="0",',
    ):
        pids = {int(pid) for pid in re.findall(rf'^{re.escape(figure)}.*pid="(\d+)"}} \S+$', text, re.M)}
        assert pids == workers.pids(), figure
    assert "python_info{" in text
    # and both report their publish rates to the management API, which sums them
    repository = workers.management.hermes.repository
    assert repository is not None
    wait_until(lambda: len(_rate_reports(repository, topic)) == 2, timeout=20, interval=0.2)

    first = workers.pids()
    assert len(first) == 2
    load = _Load(url, topic, threads=4)
    try:
        wait_until(lambda: len(load.accepted) >= 20, timeout=30)
        victim = min(first)
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        wait_until(lambda: len(workers.pids() - first) == 1 and len(workers.pids()) == 2, timeout=30)
        replaced_at = time.monotonic()
        served_meanwhile = sum(killed_at < at < replaced_at for at, _ in load.accepted)
        wait_until(lambda: len(load.accepted) >= 20 + served_meanwhile + 20, timeout=30)
    finally:
        load.stop()
    assert served_meanwhile > 0  # the other worker kept serving
    assert workers.frontend.process is not None and workers.frontend.process.poll() is None
    assert f"worker 0 (pid {victim})" in workers.frontend.log() or f"worker 1 (pid {victim})" in workers.frontend.log()

    accepted = {message_id for _, message_id in load.accepted}
    found = _published(workers.management, topic, accepted)
    assert accepted <= found, f"lost {len(accepted - found)} of {len(accepted)} accepted messages"
