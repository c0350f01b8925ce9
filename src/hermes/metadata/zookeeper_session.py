"""One connection to ZooKeeper (a kazoo client) that never makes its callers wait for a ZooKeeper it cannot reach.

kazoo queues a request made while it is disconnected until it connects again, however long that takes, and
reconnects with a back-off that grows to an hour: a ZooKeeper down for 30 s left every caller hanging, and
reconnected 24 s after it was back. Here a call made while the connection is down fails at once with
``MetadataUnreachable`` (a 503 for the management API), a call under way when it drops fails when kazoo
notices (at once when ZooKeeper's end closes; within two thirds of the session timeout when it falls silent),
reconnection tries at least once a second, and ``close`` waits for ZooKeeper a bounded time only.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry, RetryFailedError

from hermes.errors import MetadataUnavailable, MetadataUnreachable
from hermes.tasks import NamedThread

log = logging.getLogger(__name__)

RECONNECT_MAX_DELAY = 1.0  # seconds between two attempts to reach ZooKeeper again, at most
CLOSE_TIMEOUT = 2.0  # a stopping process waits this long at most to end its session
LOST_CONNECTION = (ConnectionLoss, SessionExpiredError, ConnectionClosedError, KazooTimeoutError)


class ZookeeperSession:
    """Connects and creates the znodes ``paths`` (where missing) within ``start_timeout``."""

    def __init__(self, connect: str, session_timeout: float, start_timeout: float, paths: tuple[str, ...]) -> None:
        self.connect = connect
        retry = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": RECONNECT_MAX_DELAY}
        self.client = KazooClient(hosts=connect, timeout=session_timeout, connection_retry=retry, command_retry=retry)
        self._unreachable_since: float | None = None  # time.monotonic() of the connection's loss
        self.client.add_listener(self._on_state)
        unavailable = MetadataUnavailable(f"ZooKeeper at {connect} did not answer within {start_timeout:.0f} s")
        try:
            self.client.start(timeout=start_timeout)
        except KazooTimeoutError:
            self.client.close()
            raise unavailable from None
        # again while the connection drops meanwhile: on a loaded machine a ping can come late, and a start that
        # gave up then exited the process
        creating = KazooRetry(**retry, deadline=start_timeout)
        try:
            for path in paths:
                creating(self.client.ensure_path, path)
        except RetryFailedError:
            self.close()
            raise unavailable from None

    def _on_state(self, state: KazooState) -> None:  # kazoo's connection thread: must not block
        if state == KazooState.CONNECTED:
            if self._unreachable_since is not None:
                log.warning("ZooKeeper at %s is reachable again", self.connect)
            self._unreachable_since = None
            return
        if state == KazooState.LOST:
            log.warning("the ZooKeeper session expired: a new one starts when ZooKeeper answers again")
        elif self._unreachable_since is None:
            log.warning("ZooKeeper at %s is unreachable: metadata cannot be read or changed meanwhile", self.connect)
        if self._unreachable_since is None:
            self._unreachable_since = time.monotonic()

    def unreachable(self) -> MetadataUnreachable:
        since = self._unreachable_since
        gone = f" for {time.monotonic() - since:.0f} s" if since is not None else ""
        return MetadataUnreachable(
            f"the metadata store, ZooKeeper at {self.connect}, is unreachable{gone}; try again later",
            retry_after=RECONNECT_MAX_DELAY,
        )

    @contextlib.contextmanager
    def reaching(self) -> Iterator[KazooClient]:
        """The client, while connected; raises ``MetadataUnreachable`` when not, or when the connection drops."""
        if not self.client.connected:
            raise self.unreachable()
        try:
            yield self.client
        except LOST_CONNECTION:
            raise self.unreachable() from None

    def close(self) -> None:
        """Ends the session (its ephemeral znodes go at once); with ZooKeeper unreachable, gives up after
        ``CLOSE_TIMEOUT`` and leaves them to the session's timeout."""
        self.client.remove_listener(self._on_state)
        connected = self.client.connected  # else there is no session to end, and nothing worth waiting for
        stopping = NamedThread(target=self._stop, name="zookeeper-close", daemon=True)
        stopping.start()
        stopping.join(CLOSE_TIMEOUT if connected else 0)
        if connected and stopping.is_alive():
            log.warning("ZooKeeper at %s did not answer: this process leaves without ending its session", self.connect)

    def _stop(self) -> None:
        with contextlib.suppress(Exception):
            self.client.stop()
        self.client.close()


class _Connected(Protocol):
    @property
    def session(self) -> ZookeeperSession: ...


S = TypeVar("S", bound=_Connected)
P = ParamSpec("P")
T = TypeVar("T")


def reaching_zookeeper(method: Callable[Concatenate[S, P], T]) -> Callable[Concatenate[S, P], T]:
    """A method of an object with a ``session`` that fails at once with ``MetadataUnreachable`` while ZooKeeper
    is (or becomes) unreachable."""

    @functools.wraps(method)
    def call(connected: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        with connected.session.reaching():
            return method(connected, *args, **kwargs)

    return call
