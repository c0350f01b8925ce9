"""The offload service on the publishing port: ``POST /offload/topic/{topic}+oversized`` stores a BSON document
``{message, headers, key}`` (201), ``GET /offload/msg/{id}`` answers it again (200), with the ``metadata`` element
the service adds (``documents``), or 404 once it is unknown, expired with its topic's retention or deleted with its
topic.

An upload is a publish to its topic: the topic's ``auth`` decides as for the publishing API. The caller is the
SCRAM user when the service signs users in by SCRAM (the broker's Kafka users), else whoever the publishing port's
credentials name (none: a caller without credentials). A download needs only the service's own authentication, as
reading the Kafka topic does."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Iterator
from typing import Any, TypeVar
from urllib.parse import unquote

import orjson

from hermes.errors import HermesError, OffloadedMessageNotFound
from hermes.frontend.access import PublishAccess
from hermes.frontend.app import TopicLookup
from hermes.http.lean import Request, SpooledBody, error_body
from hermes.metadata.cache import MetadataCache
from hermes.offload import OFFLOAD_PREFIX
from hermes.offload.blobs import BlobInfo, BlobStore
from hermes.offload.documents import Upload, canonical_id, check_stored_upload, check_upload, with_metadata
from hermes.offload.offloader import offload_limit
from hermes.offload.scram import HttpScram

log = logging.getLogger(__name__)

PREFIX = OFFLOAD_PREFIX
_UPLOAD = PREFIX + "topic/"
_OVERSIZED = "+oversized"
_DOWNLOAD = PREFIX + "msg/"
BSON = "application/bson"
# An upload's document holds the message plus its headers, key and BSON framing.
UPLOAD_HEADROOM = 1024 * 1024
_JSON = "application/json"
T = TypeVar("T")
Headers = tuple[tuple[str, str], ...]


class OffloadApi:
    def __init__(
        self,
        store: BlobStore,
        cache: MetadataCache,
        topics: TopicLookup,
        max_message_size: int,
        access: PublishAccess,
        scram: HttpScram | None = None,
    ) -> None:
        self._scram = scram  # None: anonymous, as the broker is
        self._access = access
        self._store = store
        self._cache = cache
        self._topics = topics
        self._max_size = max_message_size
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, request: Request) -> None:
        path = unquote(request.path)
        signed_in: tuple[tuple[str, str], ...] = ()
        user = None
        if self._scram is not None:
            verdict = self._scram.authenticate(request.headers.get("authorization"))
            if verdict.user is None:
                problem = verdict.problem or "SCRAM exchange in progress"
                request.respond(401, verdict.headers, body=error_body(problem, "UNAUTHORIZED"), content_type=_JSON)
                return
            signed_in, user = verdict.headers, verdict.user
        if path.startswith(_UPLOAD) and path.endswith(_OVERSIZED):
            if request.method != "POST":
                _not_allowed(request, "POST")
            else:
                self._spawn(self._upload(request, path[len(_UPLOAD) : -len(_OVERSIZED)], user, signed_in))
        elif path.startswith(_DOWNLOAD):
            if request.method not in ("GET", "HEAD"):
                _not_allowed(request, "GET,HEAD")
            else:
                self._spawn(self._download(request, path[len(_DOWNLOAD) :], signed_in))
        else:
            request.respond(404, body=error_body("Not Found", "NOT_FOUND"), content_type=_JSON)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _upload(
        self, request: Request, name: str, user: str | None, signed_in: tuple[tuple[str, str], ...]
    ) -> None:
        stored = await _answering_failures(
            request,
            f"storing an offloaded message for {name}",
            self._store_upload(request, name, user),
            lambda exc: signed_in + self._access.challenge(exc),
        )
        if stored is not None:
            request.respond(201, (("Location", f"{_DOWNLOAD}{stored}"), *signed_in))

    async def _store_upload(self, request: Request, name: str, user: str | None) -> str:
        """The id of the message stored."""
        if user is None:
            caller = await self._access.identify(request.headers.get("authorization"), request.client)
            user = None if caller is None else caller.name
        topic = await self._topics.get(name)
        self._access.check_name(topic, user)
        limit = offload_limit(topic, self._max_size)
        spooled = request.spooled
        if spooled is None:
            upload = check_upload(request.body, limit)
            document: Iterable[bytes] = (request.body,)
            size = len(request.body)
        else:  # checked in its file without reading the message, and stored from there in chunks
            upload = await asyncio.to_thread(_check_spooled, spooled, limit)
            document, size = spooled.chunks(), spooled.size
        chunks = with_metadata(document, size, upload, int(time.time() * 1000))
        await asyncio.to_thread(self._store.put, topic.qualified_name, upload.message_id, chunks)
        return upload.message_id

    async def _download(self, request: Request, text: str, signed_in: tuple[tuple[str, str], ...]) -> None:
        opened = await _answering_failures(
            request, f"reading offloaded message {text}", self._open(text), lambda _: signed_in
        )
        if opened is not None:
            info, first, chunks = opened
            await request.stream(200, signed_in, info.size, _in_thread(first, chunks), content_type=BSON)

    async def _open(self, text: str) -> tuple[BlobInfo, bytes, Iterator[bytes]]:
        """The blob, its first chunk and the rest: a blob gone meanwhile is a 404, not a short body."""
        info = await self._find(text)
        chunks = self._store.read(info)
        return info, await asyncio.to_thread(next, chunks, b""), chunks

    async def _find(self, text: str) -> BlobInfo:
        """The blob of that id, unless it expired with its topic's retention (then deleted now)."""
        blob_id = canonical_id(text)
        info = None if blob_id is None else await asyncio.to_thread(self._store.info, blob_id)
        if info is None:
            raise OffloadedMessageNotFound(f"offloaded message {text} not found")
        topic = self._cache.topic(info.topic)
        if topic is None or info.stored_at < time.time() - topic.retention_time.seconds:
            await asyncio.to_thread(self._store.delete, info)
            raise OffloadedMessageNotFound(f"offloaded message {text} expired with its topic's retention")
        return info


def _check_spooled(spooled: SpooledBody, limit: int) -> Upload:
    with spooled.path.open("rb") as source:
        return check_stored_upload(source, limit)


async def _in_thread(first: bytes, chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """A blocking store's chunks, each read in a thread, so the event loop goes on meanwhile."""
    if first:
        yield first
    while chunk := await asyncio.to_thread(next, chunks, b""):
        yield chunk


async def _answering_failures(
    request: Request, doing: str, work: Awaitable[T], headers: Callable[[HermesError], Headers]
) -> T | None:
    """What ``work`` returns; None when it failed, and then the request was answered with the error (with
    ``headers(error)``), or with a 500 for a bug, logged."""
    try:
        return await work
    except HermesError as exc:
        _error(request, exc, headers(exc))
    except Exception as exc:
        log.exception("%s failed", doing)
        _error(request, exc)
    return None


def _error(request: Request, exc: Exception, headers: Headers = ()) -> None:
    if isinstance(exc, HermesError):
        request.respond(exc.status, headers, body=orjson.dumps(exc.to_body()), content_type=_JSON)
    else:
        request.respond(500, body=error_body("internal error", "INTERNAL_ERROR"), content_type=_JSON)


def _not_allowed(request: Request, allow: str) -> None:
    request.respond(
        405, (("Allow", allow),), body=error_body("Method Not Allowed", "METHOD_NOT_ALLOWED"), content_type=_JSON
    )
