"""Shared fixtures: one real Apache Kafka broker per test session, real subscribers, Hermes in-process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes.bench.zookeeper import ZookeeperServer
from hermes.broker.embedded import EmbeddedBroker
from hermes.metadata.secrets import SecretKeys, StoredSecrets, key_file
from hermes.metadata.sqlite import SqliteMetadataRepository
from tests.support.activemq import ActiveMqServer
from tests.support.hermes import HermesClient, InProcessHermes, hermes_settings
from tests.support.subscriber import SubscriberServer
from tests.support.waiting import wait_until

__all__ = ["wait_until"]  # the tests import it from here


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """The embedded Apache Kafka broker, shared by the session's tests: use unique topic names."""
    broker = EmbeddedBroker(tmp_path_factory.mktemp("kafka"))
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZookeeperServer]:
    """A real ZooKeeper server (Debian's package), shared by the session's tests: use unique roots."""
    server = ZookeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def activemq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ActiveMqServer]:
    """A real ActiveMQ broker (Debian's package) for jms:// endpoints, shared by the session's tests: use unique
    destination names."""
    server = ActiveMqServer(tmp_path_factory.mktemp("activemq")).start()
    yield server
    server.stop()


@pytest.fixture
def sqlite_repository(tmp_path: Path) -> Iterator[SqliteMetadataRepository]:
    keys = SecretKeys(key_file(tmp_path))
    repository = SqliteMetadataRepository(tmp_path / "metadata.sqlite3", StoredSecrets(keys), poll_interval=0.05)
    yield repository
    repository.close()


@pytest.fixture
def subscriber() -> Iterator[SubscriberServer]:
    server = SubscriberServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def hermes_overrides() -> dict[str, Any]:
    """Settings a test module changes for its in-process Hermes: a module overrides this fixture."""
    return {}


@pytest.fixture(scope="module")
def hermes(
    kafka: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory, hermes_overrides: dict[str, Any]
) -> Iterator[InProcessHermes]:
    """Every role of Hermes in this process, against the session's broker (one per test module)."""
    settings = hermes_settings(tmp_path_factory.mktemp("hermes"), kafka.bootstrap_servers, **hermes_overrides)
    running = InProcessHermes(settings).start()
    yield running
    running.stop()


@pytest.fixture
def client(hermes: InProcessHermes) -> Iterator[HermesClient]:
    api = HermesClient(hermes.management_url, hermes.frontend_url)
    yield api
    api.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The Spark tier first: pyspark's callback server (foreachBatch) select()s its sockets, which fails once the
    process holds 1,024 descriptors ("filedescriptor out of range in select()"), and by the end of the other
    tiers the suite's process holds more than that (its Kafka clients and servers of many modules)."""
    items.sort(key=lambda item: "tests/spark/" not in str(item.fspath).replace("\\", "/"))
