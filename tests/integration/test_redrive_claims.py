"""Which consumer runs a redrive when a subscription's consumers run on two nodes: one claims it (its node id as
``runner``), the other leaves it alone while the runner's lease is fresh and takes it over once it is not. Against
the real SQLite store; the consumers are reduced to what a claim reads (their node id and the store)."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace
from typing import Any

from hermes.consumers import redrive
from hermes.consumers.redrive import Redrives
from hermes.domain.redrive import Redrive, RedriveStatus
from hermes.metadata.documents import DEAD_LETTER_REDRIVES
from hermes.metadata.sqlite import SqliteMetadataRepository

SUBSCRIPTION = "g.t$s"


def _node(repository: SqliteMetadataRepository, node_id: str) -> Redrives:
    delivery: Any = SimpleNamespace(name=SUBSCRIPTION, context=SimpleNamespace(repository=repository, node_id=node_id))
    return Redrives(delivery, redeliver=None)  # type: ignore[arg-type]


def test_one_node_claims_a_redrive_and_another_takes_it_over_once_its_lease_ended(
    sqlite_repository: SqliteMetadataRepository,
) -> None:
    job = Redrive("1", SUBSCRIPTION, 0, 0, 10, 0)
    sqlite_repository.put_document(DEAD_LETTER_REDRIVES, job.key, job.to_document())
    first, second = _node(sqlite_repository, "node-a"), _node(sqlite_repository, "node-b")

    async def claims() -> list[Redrive | None]:
        claimed = await first._next()
        return [claimed, await second._next()]  # node-a's lease is fresh

    claimed, refused = asyncio.run(claims())
    assert claimed is not None and claimed.runner == "node-a" and claimed.status is RedriveStatus.RUNNING
    assert refused is None
    stale = dataclasses.replace(claimed, updatedAt=claimed.updatedAt - redrive.LEASE_MS - 1)  # node-a went away
    sqlite_repository.put_document(DEAD_LETTER_REDRIVES, stale.key, stale.to_document())
    taken = asyncio.run(second._next())
    assert taken is not None and taken.runner == "node-b"
    stored = sqlite_repository.get_document(DEAD_LETTER_REDRIVES, job.key)
    assert stored is not None and stored["runner"] == "node-b"
    done = taken.progressed(10, 10, taken.updatedAt, done=True)
    sqlite_repository.put_document(DEAD_LETTER_REDRIVES, done.key, done.to_document())
    assert asyncio.run(first._next()) is None  # nothing left to run
