"""Transparent offload for HTTP publishers: a body larger than its topic's maxMessageSize (and within the offload
limit) is stored as the protocol's BSON document, and a placeholder goes to Kafka in its place: the JSON envelope
``{"url": ".../msg/{id}"}`` with the ``_format: external`` and ``_id`` headers, as a spec client would send it."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence

import orjson

from hermes.domain.message import PLACEHOLDER_FORMAT
from hermes.domain.topic import Topic
from hermes.errors import ServiceUnavailable
from hermes.http.lean import SpooledBody
from hermes.offload.blobs import BlobStore
from hermes.offload.documents import ID_HEADER, document_chunks


def offload_limit(topic: Topic, max_size: int) -> int:
    """The largest message offloaded for the topic: its own limit, within the frontend's."""
    return min(topic.offload_max_message_size or max_size, max_size)


def placeholder_headers(message_id: str) -> list[tuple[str, bytes]]:
    return [PLACEHOLDER_FORMAT, (ID_HEADER, uuid.UUID(message_id).bytes)]


class Offloader:
    def __init__(self, store: BlobStore, max_size: int) -> None:
        self._store = store
        self.max_size = max_size
        self.endpoint = ""  # the advertised URL, set once the frontend listens

    def limit_of(self, topic: Topic) -> int:
        return offload_limit(topic, self.max_size)

    async def store(
        self,
        topic: str,
        message_id: str,
        body: bytes | SpooledBody,
        headers: Sequence[tuple[str, bytes]],
        key: bytes | None,
    ) -> bytes:
        """Stores the message (a spooled one read from its file in chunks, never whole); returns the placeholder
        to produce."""
        all_headers = [*headers, (ID_HEADER, uuid.UUID(message_id).bytes)]
        stored_at = int(time.time() * 1000)  # the metadata's timestamp, as for an upload
        if isinstance(body, SpooledBody):
            chunks = document_chunks(body.chunks(), body.size, all_headers, key, stored_at)
        else:
            chunks = document_chunks((body,), len(body), all_headers, key, stored_at)
        try:
            await asyncio.to_thread(self._store.put, topic, message_id, chunks)
        except OSError as exc:
            raise ServiceUnavailable(f"the large message could not be stored: {exc.strerror}") from None
        return orjson.dumps({"url": f"{self.endpoint}/msg/{message_id}"})
