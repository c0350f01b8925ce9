"""Reads answered while the metadata store (ZooKeeper) is unreachable: the store's last answer to the same read,
and the response says how old it is in ``Hermes-Metadata-Age`` (whole seconds since the store gave it, as HTTP's
``Age``). A read the store never answered since management started is a 503, as every change is."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from contextvars import ContextVar
from typing import Any, TypeVar, cast

from aiohttp import web
from aiohttp.typedefs import Handler

from hermes.errors import MetadataUnreachable

HEADER = "Hermes-Metadata-Age"
_KEPT = 10_000  # answers kept, the least recently read dropped first

T = TypeVar("T")
_ages: ContextVar[list[float] | None] = ContextVar("metadata_ages", default=None)


class LastReads:
    def __init__(self, kept: int = _KEPT) -> None:
        self._kept = kept
        self._answers: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()

    async def read(self, key: Hashable, read: Callable[[], Awaitable[T]]) -> T:
        """What ``read`` answers now; while the store is unreachable, what it answered last (noted for the
        response's header), else ``MetadataUnreachable``."""
        try:
            answer = await read()
        except MetadataUnreachable:
            kept = self._answers.get(key)
            if kept is None:
                raise
            read_at, answer = kept
            ages = _ages.get()
            if ages is not None:
                ages.append(time.monotonic() - read_at)
            return cast(T, answer)
        except Exception:
            self._answers.pop(key, None)  # the store's last answer now (e.g. not found) is not the one kept
            raise
        self._answers[key] = (time.monotonic(), answer)
        self._answers.move_to_end(key)
        if len(self._answers) > self._kept:
            self._answers.popitem(last=False)
        return answer


@web.middleware
async def metadata_age_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Adds ``Hermes-Metadata-Age`` to a successful answer made of reads the store did not answer now (the
    oldest one's age)."""
    ages: list[float] = []
    token = _ages.set(ages)
    try:
        response = await handler(request)
    finally:
        _ages.reset(token)
    if ages and response.status < 400:
        response.headers[HEADER] = str(int(max(ages)))
    return response
