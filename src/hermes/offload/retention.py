"""Offloaded messages live as long as their topic keeps messages: blobs older than the topic's retention are
deleted every ``interval`` seconds, and a topic's blobs go with the topic (at once when this process hears of the
deletion, otherwise at the next sweep)."""

from __future__ import annotations

import asyncio
import logging
import time

from hermes.domain.topic import Topic
from hermes.metadata.cache import MetadataCache
from hermes.offload.blobs import BlobStore
from hermes.tasks import cancel

log = logging.getLogger(__name__)


class BlobRetention:
    def __init__(self, store: BlobStore, cache: MetadataCache, interval: float) -> None:
        self._store = store
        self._cache = cache
        self._interval = interval
        self._task: asyncio.Task[None] | None = None
        self._deletions: set[asyncio.Future[None]] = set()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()

        def changed(name: str, topic: Topic | None) -> None:
            if topic is None:
                deletion = loop.run_in_executor(None, self._store.delete_topic, name)
                self._deletions.add(deletion)
                deletion.add_done_callback(self._deletions.discard)

        self._cache.on_topic_change(changed)
        self._task = asyncio.create_task(self._loop(), name="offload-retention")

    async def stop(self) -> None:
        await cancel(self._task)
        self._task = None

    def sweep(self) -> int:
        """Deletes what outlived its topic's retention (or its topic); returns how many blobs expired."""
        expired = 0
        now = time.time()
        for name in self._store.topics():
            topic = self._cache.topic(name)
            if topic is None:
                self._store.delete_topic(name)
            else:
                expired += self._store.expire(name, now - topic.retention_time.seconds)
        return expired

    async def _loop(self) -> None:
        while True:
            try:
                expired = await asyncio.to_thread(self.sweep)
                if expired:
                    log.info("large messages: %d offloaded messages expired with their topics' retention", expired)
            except OSError:
                log.warning("expiring offloaded messages failed", exc_info=True)
            await asyncio.sleep(self._interval)
