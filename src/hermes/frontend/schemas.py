"""Avro schemas of topics, cached in memory: a version never changes, and the latest version is forgotten
when the repository announces a new one, so the request path reads the store only on first use."""

from __future__ import annotations

import asyncio

from hermes.domain.message import SCHEMA_VERSION_HEADER
from hermes.domain.names import TopicName
from hermes.errors import SchemaNotFound, ValidationError
from hermes.metadata.cache import MetadataCache
from hermes.metadata.repository import MetadataRepository


class SchemaSource:
    def __init__(self, repository: MetadataRepository, cache: MetadataCache) -> None:
        self._repository = repository
        self._versions: dict[tuple[str, int], str] = {}
        self._latest: dict[str, int] = {}
        cache.on_schema_change(self._forget_latest)

    def _forget_latest(self, topic: str) -> None:
        self._latest.pop(topic, None)

    async def get(self, topic: TopicName, version: int | None, field: str = SCHEMA_VERSION_HEADER) -> tuple[int, str]:
        """The schema of ``version`` (the latest when None); an unknown version is a ValidationError of ``field``."""
        key = topic.qualified
        if version is None and key in self._latest:
            version = self._latest[key]
        if version is not None and (key, version) in self._versions:
            return version, self._versions[(key, version)]
        try:
            found, schema = await asyncio.to_thread(self._repository.get_schema, topic, version)
        except SchemaNotFound as exc:
            raise ValidationError(exc.message, field) from None
        self._versions[(key, found)] = schema
        if version is None:
            self._latest[key] = found
        return found, schema
