"""A stop waits for each thread it ends a bounded time: a Kafka client whose close never returns (librdkafka has had
such bugs, e.g. its issues 4527 and 4884) is left behind with a warning saying where it is stuck."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest

from hermes.broker.connection import KafkaConnection
from hermes.broker.embedded import EmbeddedBroker
from hermes.broker.kafka_consumer import BrokerConsumer
from hermes.consumers import receiver as receiver_module
from hermes.consumers.content import ContentConverter
from hermes.consumers.context import ConsumerContext
from hermes.consumers.sender.http import HttpSender
from hermes.consumers.sender.senders import MessageSenders
from hermes.consumers.shared_reading import SharedReader
from hermes.metadata.sqlite import SqliteMetadataRepository
from tests.conftest import wait_until

pytestmark = pytest.mark.integration


def test_a_stop_leaves_the_shared_reader_whose_kafka_consumer_does_not_close_behind_within_its_bound(
    kafka: EmbeddedBroker,
    sqlite_repository: SqliteMetadataRepository,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The bound here: 0.5 s plus the 0.5 s session timeout."""
    release, made, closing = threading.Event(), threading.Event(), []
    real_init, real_close = BrokerConsumer.__init__, BrokerConsumer.close

    def noted_init(self: BrokerConsumer, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        made.set()

    def hanging_close(self: BrokerConsumer) -> None:
        closing.append(threading.current_thread())
        release.wait(60)
        real_close(self)

    monkeypatch.setattr(BrokerConsumer, "__init__", noted_init)
    monkeypatch.setattr(BrokerConsumer, "close", hanging_close)
    monkeypatch.setattr(receiver_module, "_CLOSE_BOUND", 0.5)

    async def stop_a_started_reader() -> float:
        sender = MessageSenders(HttpSender())
        context = ConsumerContext(
            KafkaConnection(kafka.bootstrap_servers),
            sender,
            sqlite_repository,
            ContentConverter(sqlite_repository),
            "node",
            "primary",
            session_timeout_ms=500,
        )
        reader = SharedReader(context)
        reader.start()
        assert await asyncio.to_thread(made.wait, 30)  # its thread reads (no lanes yet) with a real Kafka consumer
        started = time.monotonic()
        await reader.stop()
        took = time.monotonic() - started
        await sender.close()
        return took

    try:
        with caplog.at_level(logging.WARNING, logger="hermes.tasks"):
            took = asyncio.run(stop_a_started_reader())
        assert closing and 1.0 <= took < 10.0, f"the stop took {took:.1f} s"
        [warning] = [r.getMessage() for r in caplog.records if r.name == "hermes.tasks"]
        assert warning.startswith("the shared Kafka reader did not end within 1 s") and "hanging_close" in warning
    finally:
        release.set()
    wait_until(lambda: not closing[0].is_alive(), timeout=30)  # its real close, once let go
