"""Shared fixtures: one real Apache Kafka broker per test session, real subscribers, Hermes in-process."""

from __future__ import annotations

import contextlib
import gc
import os
from collections import Counter
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from hermes.bench.zookeeper import ZookeeperServer
from hermes.broker.embedded import EmbeddedBroker
from hermes.metadata.secrets import SecretKeys, StoredSecrets, key_file
from hermes.metadata.sqlite import SqliteMetadataRepository
from tests.support.activemq import ActiveMqServer
from tests.support.hermes import HermesClient, InProcessHermes, own_hermes
from tests.support.subscriber import SubscriberServer
from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from tests.support.otlp import OtlpReceiver

__all__ = ["wait_until"]  # the tests import it from here

# Descriptors a test module may leave open in the suite's process (a module's own servers and clients close theirs
# at its end; the session's shared ones are not counted): more is reported at the end of the run. Leaked ones add up
# over the suite's modules, and pyspark's callback server cannot select() a descriptor above 1,024: the run fails
# when the process holds more than DESCRIPTORS_AT_MOST at the end of a module.
DESCRIPTORS_A_MODULE_MAY_LEAVE = 10
DESCRIPTORS_AT_MOST = 512
# The session's SparkSession opens py4j connections as threads call it (both ways: to the JVM's gateway, and the
# JVM's to the callback server of foreachBatch), kept in py4j's pools: 21 sockets after the tier's first module.
DESCRIPTORS_A_SPARK_MODULE_MAY_LEAVE = 40
# How long the session's servers may take to start: a bound for a machine whose other work (CI's neighbours, the
# other pytest-xdist worker starting its own) leaves them a fraction of a core; a quiet one takes seconds.
STARTING_AT_MOST = 180.0


def _descriptors() -> dict[str, str]:
    """This process's open descriptors and what each is (``pipe:[…]``, ``socket:[…]``, a path)."""
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
    return found


class _DescriptorGuard:
    """Reports the test modules that leave descriptors open in the suite's process, counted before a module's first
    test and after its last one's teardown (when pytest has dropped that test's fixture values), and fails the
    session when they add up to more than DESCRIPTORS_AT_MOST."""

    def __init__(self) -> None:
        self.module = ""
        self.before: dict[str, str] = {}
        self.session_descriptors = 0  # opened by session-scoped fixtures' set-up: theirs to keep to the end
        self.session_before = 0
        self.leaks: list[str] = []
        self.too_many: list[str] = []

    def starting(self, module: str) -> None:
        if module != self.module:
            self.module, self.before, self.session_before = module, _descriptors(), self.session_descriptors

    def ended(self, module: str) -> None:
        gc.collect()  # a stopped Hermes or client is cyclic garbage until collected
        after = _descriptors()
        leaked = len(after) - len(self.before) - (self.session_descriptors - self.session_before)
        spark = module.startswith("tests/spark/")
        if leaked > (DESCRIPTORS_A_SPARK_MODULE_MAY_LEAVE if spark else DESCRIPTORS_A_MODULE_MAY_LEAVE):
            kinds = Counter(what.split(":")[0] for fd, what in after.items() if self.before.get(fd) != what)
            self.leaks.append(f"{module} left {leaked} descriptors open: {dict(kinds)}")
        if len(after) > DESCRIPTORS_AT_MOST:
            self.too_many.append(f"{len(after)} descriptors open after {module}")
        self.module = ""


_guard = _DescriptorGuard()


class _SessionFixtures:
    """Counts the descriptors session-scoped fixtures open in their set-up. A plugin (``pytest_configure``), not a
    hook of this conftest: pytest calls a session fixture's set-up hook on the session's node, which the hooks of
    tests/conftest.py do not reach, so every session fixture's descriptors were counted as its first module's."""

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[Any]) -> Generator[None, object, object]:
        if fixturedef.scope not in ("session", "package"):  # the Spark tier's are the package's
            return (yield)
        before = len(_descriptors())
        try:
            return (yield)
        finally:
            _guard.session_descriptors += len(_descriptors()) - before


# What Spark's launcher adds to the command of every Spark JVM the suite starts (the tests' SparkSession, the Spark
# Connect servers, `hermes pipeline`'s driver, the docs' examples; the standalone cluster's master and workers), read
# from the environment the children inherit: C1 only, as the embedded Kafka broker runs. Their work here is small and
# short-lived, and C2 compiling it cost nearly half of it: a session's start, a Delta write, three reads and an
# OPTIMIZE took 38-43 s of CPU with the default compilers and 22 s with C1 (see docs/benchmarks.md). The pipeline
# itself keeps the default compilers, which pay off on a sustained archive (docs/pipeline.md).
SPARK_TEST_JAVA_OPTIONS = {
    "SPARK_SUBMIT_OPTS": "-XX:TieredStopAtLevel=1",
    "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1",
}


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_SessionFixtures(), "hermes-session-fixture-descriptors")
    for variable, options in SPARK_TEST_JAVA_OPTIONS.items():
        os.environ.setdefault(variable, options)


def _module_of(item: pytest.Item | None) -> str:
    return item.nodeid.split("::")[0] if item is not None else ""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    _guard.starting(_module_of(item))
    try:
        return (yield)
    finally:
        if _module_of(nextitem) != _module_of(item):
            _guard.ended(_module_of(item))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for leak in _guard.leaks:
        terminalreporter.write_line(f"DESCRIPTOR LEAK {leak}", yellow=True)
    for too_many in _guard.too_many:
        terminalreporter.write_line(f"TOO MANY DESCRIPTORS: {too_many}", red=True, bold=True)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _guard.too_many and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """The embedded Apache Kafka broker, shared by the session's tests: use unique topic names."""
    broker = EmbeddedBroker(tmp_path_factory.mktemp("kafka"))
    broker.start(timeout=STARTING_AT_MOST)
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZookeeperServer]:
    """A real ZooKeeper server (Debian's package), shared by the session's tests: use unique roots."""
    server = ZookeeperServer(tmp_path_factory.mktemp("zookeeper")).start(timeout=STARTING_AT_MOST)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def activemq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ActiveMqServer]:
    """A real ActiveMQ broker (Debian's package) for jms:// endpoints, shared by the session's tests: use unique
    destination names."""
    server = ActiveMqServer(tmp_path_factory.mktemp("activemq")).start(timeout=STARTING_AT_MOST)
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


@pytest.fixture
def servers() -> Iterator[list[SubscriberServer]]:
    """Subscriber servers a test starts as it goes (each appended once started), stopped at its end."""
    started: list[SubscriberServer] = []
    yield started
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def otlp() -> Iterator[OtlpReceiver]:
    """A real OTLP/HTTP receiver of the spans a test module exports (``OtlpReceiver.exporting``)."""
    from tests.support.otlp import OtlpReceiver  # the protobuf definitions, imported by the modules that trace only

    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="module")
def hermes_overrides() -> dict[str, Any]:
    """Settings a test module changes for its in-process Hermes: a module overrides this fixture."""
    return {}


@pytest.fixture(scope="module")
def hermes(
    kafka: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory, hermes_overrides: dict[str, Any]
) -> Iterator[InProcessHermes]:
    """Every role of Hermes in this process, against the session's broker (one per test module)."""
    with own_hermes(tmp_path_factory.mktemp("hermes"), kafka.bootstrap_servers, **hermes_overrides) as running:
        yield running


@pytest.fixture
def client(hermes: InProcessHermes) -> Iterator[HermesClient]:
    api = HermesClient(hermes.management_url, hermes.frontend_url)
    yield api
    api.close()


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's, which a run without it lacks
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Run by pytest-xdist with ``-n 2 --dist loadscope``, each worker with its own Kafka and ZooKeeper, the suite is
    handed out in whole modules, so that a module-scoped Hermes starts once, and the whole Spark tier goes to one
    worker, so that only that one starts Spark's JVMs (first: its longest scope)."""
    if config.getoption("dist") != "loadscope":
        return None  # pytest-xdist's own scheduler of that mode
    from tests.support.scheduling import TierScheduling  # pytest-xdist is imported by the runs that use it only

    return TierScheduling(config, log)


# The tiers in the order they run: the longest modules first, so that in a parallel run (``-n 2 --dist loadscope``,
# whole modules handed out in this order as workers free up) the short ones are left to even out the workers' ends.
TIERS = ("tests/spark/", "tests/cluster/", "tests/e2e/", "tests/integration/", "tests/contract/", "tests/unit/")


def _tier(item: pytest.Item) -> int:
    path = str(item.fspath).replace("\\", "/")
    return next((rank for rank, tier in enumerate(TIERS) if tier in path), len(TIERS))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tiers in the order of TIERS, the Spark tier first: pyspark's callback server (foreachBatch) select()s its
    sockets, which fails once the process holds 1,024 descriptors ("filedescriptor out of range in select()"). Since
    stopped Hermes instances are freed (``InProcessHermes.stop``) the integration tier's process holds at most 69
    (it held 1,604), and the guard above fails a module that leaks; Spark first stays as a cheap safeguard."""
    items.sort(key=_tier)
