"""A subscription's retransmission requests, as management writes them (``PUT .../retransmission``): the offsets
its consumer group moves to. A consumer reads the request when the metadata repository tells of a change to it,
and applies each request once: one made before the consumer started was already committed to the group."""

from __future__ import annotations

from typing import Any

from hermes.consumers.offsets import Partition
from hermes.metadata.documents import RETRANSMISSION
from hermes.metadata.repository import MetadataRepository, until_reachable


class RetransmissionRequests:
    def __init__(self, repository: MetadataRepository, topic: str, subscription: str) -> None:
        self._repository = repository
        self._topic = topic
        self._subscription = subscription
        self._seen: Any = None  # the requestedAt of the last request applied or found at start

    async def start(self) -> None:
        request = await self._read()
        self._seen = request.get("requestedAt") if request else None

    async def new_offsets(self) -> dict[Partition, int] | None:
        """The offsets of a request not applied yet; None when there is none."""
        request = await self._read()
        if not request or request.get("requestedAt") == self._seen:
            return None
        self._seen = request.get("requestedAt")
        return {(self._topic, int(p)): int(o) for p, o in request.get("offsets", {}).items()}

    async def _read(self) -> dict[str, Any] | None:
        return await until_reachable(self._repository.get_document, RETRANSMISSION, self._subscription)
