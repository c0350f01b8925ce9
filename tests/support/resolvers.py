"""Endpoint address resolver plug-ins for tests, loaded by name like any third-party resolver."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hermes.domain.endpoint import EndpointAddress


class FaultyResolver:
    """A plug-in with a bug: while a subscription's metadata holds ``{"region": ...}`` it looks the region up
    in a table it never filled and raises ``KeyError``, as a buggy plug-in does on input it did not expect."""

    def __init__(self) -> None:
        self._instances_by_region: dict[str, list[str]] = {}

    async def resolve(self, endpoint: EndpointAddress, metadata: Mapping[str, Any]) -> list[str]:
        if "region" in metadata:
            return self._instances_by_region[metadata["region"]]
        return [endpoint.url]
