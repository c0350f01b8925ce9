"""A redrive (our extension): a subscription's dead letters sent back into its delivery, as a job kept in the
metadata repository (``dead-letter-redrives``, key ``<topic>$<subscription>/<id>``).

Management writes it with the range of the dead-letter topic it covers, ``start`` up to ``end`` (the topic's end
when asked: dead letters written later, those of redriven messages that fail again among them, are not part of
it), and which dead letters of that range it takes (all, those discarded from ``since`` to ``until``, or those of
``ids``). A consumer of the subscription runs it and writes back ``position`` (every dead letter below it is done
with), ``redriven``, and at the end ``DONE``; after a crash the next run goes on from ``position``.
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any

from hermes.domain.dead_letter import DeadLetter


class RedriveStatus(StrEnum):
    PENDING = "PENDING"  # no consumer took it up yet (e.g. the subscription is SUSPENDED)
    RUNNING = "RUNNING"
    DONE = "DONE"


@dataclass(frozen=True)
class Redrive:
    id: str
    subscription: str  # group.topic$subscription
    createdAt: int  # epoch millis; field names are the API's (camelCase)
    start: int
    end: int
    position: int
    since: int | None = None
    until: int | None = None
    ids: tuple[int, ...] | None = None
    status: RedriveStatus = RedriveStatus.PENDING
    redriven: int = 0
    runner: str | None = None  # the consumer node running it
    updatedAt: int = 0
    finishedAt: int | None = None

    @property
    def key(self) -> str:
        return f"{self.subscription}/{self.id}"

    @property
    def finished(self) -> bool:
        return self.status is RedriveStatus.DONE

    def selects(self, letter: DeadLetter) -> bool:
        if self.ids is not None:  # sorted
            at = bisect.bisect_left(self.ids, letter.id)
            return at < len(self.ids) and self.ids[at] == letter.id
        if self.since is not None and letter.time < self.since:
            return False
        return self.until is None or letter.time <= self.until

    def progressed(self, position: int, redriven: int, at: int, done: bool = False) -> Redrive:
        status = RedriveStatus.DONE if done else RedriveStatus.RUNNING
        return replace(
            self, position=position, redriven=redriven, status=status, updatedAt=at, finishedAt=at if done else None
        )

    def to_document(self) -> dict[str, Any]:
        document = asdict(self)
        document["status"] = self.status.value
        document["from"], document["to"] = document.pop("since"), document.pop("until")
        document["ids"] = None if self.ids is None else [str(i) for i in self.ids]
        return document

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> Redrive:
        ids = document.get("ids")
        return cls(
            id=str(document["id"]),
            subscription=str(document["subscription"]),
            createdAt=int(document["createdAt"]),
            start=int(document["start"]),
            end=int(document["end"]),
            position=int(document["position"]),
            since=document.get("from"),
            until=document.get("to"),
            ids=None if ids is None else tuple(int(i) for i in ids),
            status=RedriveStatus(document.get("status", RedriveStatus.PENDING)),
            redriven=int(document.get("redriven", 0)),
            runner=document.get("runner"),
            updatedAt=int(document.get("updatedAt", 0)),
            finishedAt=document.get("finishedAt"),
        )
