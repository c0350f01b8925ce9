"""A subscription's retransmission requests, as management writes them (``PUT .../retransmission``): the offsets
its consumer group moves to. A consumer reads the request when the metadata repository tells of a change to it,
and applies each request once.

Every committed offset notes the ``requestedAt`` of the last request applied to its partition (``note``):
management commits a request's offsets with its own, and consumers with the last one they applied. A consumer
starting finds whether the request was applied in each partition: a consumer stopping while the request was
made may have committed its older offsets over management's (Hermes #1618), and then the partition's note is
older than the request, which the new consumer applies to it. A partition whose commit has no note (one of an
earlier version) counts as applied."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hermes.broker.admin import RETRANSMISSION_NOTE
from hermes.consumers.offsets import Partition
from hermes.metadata.documents import RETRANSMISSION
from hermes.metadata.repository import MetadataRepository, until_reachable


@dataclass(frozen=True)
class Retransmission:
    """A request: when it was made (epoch millis, its id) and the offsets it moves to."""

    requested_at: int
    offsets: dict[Partition, int]


class RetransmissionRequests:
    def __init__(self, repository: MetadataRepository, topic: str, subscription: str) -> None:
        self._repository = repository
        self._topic = topic
        self._subscription = subscription
        self._seen: Any = None  # the requestedAt of the last request applied or found at start

    async def start(self) -> Retransmission | None:
        """The last request, to apply to each partition whose committed offset notes an older one."""
        request = await self._read()
        self._seen = request.get("requestedAt") if request else None
        return self._parse(request) if request else None

    async def new_request(self) -> Retransmission | None:
        """A request not applied yet; None when there is none."""
        request = await self._read()
        if not request or request.get("requestedAt") == self._seen:
            return None
        self._seen = request.get("requestedAt")
        return self._parse(request)

    def _parse(self, request: dict[str, Any]) -> Retransmission:
        offsets = {(self._topic, int(p)): int(o) for p, o in request.get("offsets", {}).items()}
        return Retransmission(int(request.get("requestedAt") or 0), offsets)

    async def _read(self) -> dict[str, Any] | None:
        return await until_reachable(self._repository.get_document, RETRANSMISSION, self._subscription)


def note(requested_at: int) -> str:
    return f"{RETRANSMISSION_NOTE}{requested_at}"


def noted(metadata: str) -> int | None:
    """The requestedAt a committed offset's metadata notes; None without a note (or one this cannot read)."""
    _, found, rest = metadata.partition(RETRANSMISSION_NOTE)
    stamp = rest.split(";", 1)[0]
    return int(stamp) if found and stamp.isdigit() else None
