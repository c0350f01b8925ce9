"""The cluster's znodes in ZooKeeper (kazoo), beside the metadata under the same root:

    cluster/consumers/nodes/{node id}    ephemeral: {"id", "address", "load", "running", "deliveriesPerSecond"}
    cluster/consumers/leader             kazoo's Election recipe: the coordinator holds it
    cluster/consumers/assignment         the coordinator's assignment (assignment.py's document)
    cluster/frontends/{quoted address}-{pid}  ephemeral: {"address", "load"}

A member's znode lives as long as its ZooKeeper session: a process that dies leaves the cluster once its
session times out (``--cluster-session-timeout``), which is what bounds failover.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.election import Election

from hermes.cluster.assignment import Assignment
from hermes.errors import MetadataUnreachable, StartupError
from hermes.metadata.zookeeper_session import CLOSE_TIMEOUT, ZookeeperSession, reaching_zookeeper

log = logging.getLogger(__name__)

CONSUMERS, FRONTENDS = "consumers/nodes", "frontends"


class ClusterStore:
    def __init__(self, connect: str, root: str, session_timeout: float) -> None:
        self._base = (root.rstrip("/") or "/hermes") + "/cluster"
        self.session_timeout = session_timeout
        paths = (self._path(CONSUMERS), self._path(FRONTENDS))
        self.session = ZookeeperSession(connect, session_timeout, max(session_timeout, 10.0), paths)
        self.client = self.session.client

    def _path(self, *parts: str) -> str:
        return "/".join((self._base, *parts))

    def close(self) -> None:
        self.session.close()

    # --- members ---

    @reaching_zookeeper
    def register(self, kind: str, member: str, document: dict[str, Any]) -> None:
        """Creates the member's ephemeral znode. A process killed a moment ago under the same id leaves its znode
        until its session times out: wait for that, but not for a live process that has the id."""
        deadline = time.monotonic() + self.session_timeout * 2 + 1
        while True:
            try:
                self.client.create(self._path(kind, member), orjson.dumps(document), ephemeral=True)
                return
            except NodeExistsError:
                if time.monotonic() > deadline:
                    raise StartupError(
                        f"another process is registered in ZooKeeper as {member!r}: give each one its own --node-id"
                    ) from None
                time.sleep(0.2)

    @reaching_zookeeper
    def report(self, kind: str, member: str, document: dict[str, Any]) -> None:
        """Updates the member's znode; after its session expired (and took the znode along), creates it again."""
        path = self._path(kind, member)
        try:
            self.client.set(path, orjson.dumps(document))
        except NoNodeError:
            log.warning("%s was no longer registered in ZooKeeper (its session expired): registering again", member)
            self.client.create(path, orjson.dumps(document), ephemeral=True)

    def unregister(self, kind: str, member: str) -> None:
        """Leaves at once rather than at the session's timeout; without ZooKeeper, leaves it to the timeout (a
        stopping process must not wait for a ZooKeeper that may not come back)."""
        with contextlib.suppress(NoNodeError, MetadataUnreachable), self.session.reaching():
            self.client.delete_async(self._path(kind, member)).get(timeout=CLOSE_TIMEOUT)

    @reaching_zookeeper
    def members(self, kind: str) -> dict[str, dict[str, Any]]:
        out = {}
        for child in self.client.get_children(self._path(kind)):
            try:
                data, _ = self.client.get(self._path(kind, child))
            except NoNodeError:
                continue  # left meanwhile
            out[child] = orjson.loads(data)
        return out

    def watch_members(self, kind: str, callback: Callable[[list[str]], bool | None]) -> None:
        """Calls ``callback`` (in kazoo's thread) with the members now and at every join or leave, until it
        returns False."""
        self.client.ChildrenWatch(self._path(kind), callback)

    # --- coordinator and assignment ---

    def election(self, identifier: str) -> Election:
        return self.client.Election(self._path("consumers", "leader"), identifier)

    @reaching_zookeeper
    def coordinator(self) -> str | None:
        contenders = self.election("").contenders()
        return str(contenders[0]) if contenders else None

    @reaching_zookeeper
    def read_assignment(self) -> tuple[Assignment, int]:
        """The assignment and its znode version (-1: none written yet)."""
        try:
            data, stat = self.client.get(self._path("consumers", "assignment"))
        except NoNodeError:
            return Assignment(), -1
        return Assignment.from_document(orjson.loads(data)), stat.version

    @reaching_zookeeper
    def write_assignment(self, assignment: Assignment, version: int) -> bool:
        """Writes the assignment if nobody wrote since ``version`` was read (a coordinator that lost its
        leadership and does not know yet must not overwrite its successor's); False when somebody had."""
        path, body = self._path("consumers", "assignment"), orjson.dumps(assignment.to_document())
        try:
            if version < 0:
                self.client.create(path, body)
            else:
                self.client.set(path, body, version=version)
        except (BadVersionError, NodeExistsError):
            return False
        return True

    def watch_assignment(self, callback: Callable[[Assignment], bool | None]) -> None:
        """Calls ``callback`` (in kazoo's thread) with the assignment now and at every change, until it returns
        False."""

        def changed(data: bytes | None, _: Any) -> bool | None:
            return callback(Assignment.from_document(orjson.loads(data) if data else None))

        self.client.DataWatch(self._path("consumers", "assignment"), changed)
