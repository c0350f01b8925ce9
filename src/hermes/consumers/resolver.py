"""Endpoint address resolvers: the URLs a subscription's messages go to.

A resolver names every address of a subscription's endpoint (every instance of the subscribing service).
ANYCAST sends each attempt to one of them, BROADCAST to all. Which resolver the consumers use is the setting
``endpoint_address_resolver``: an importable ``module:Class`` whose class is built without arguments. It is
given the subscription's endpoint and its ``endpointAddressResolverMetadata``.

A resolver that cannot resolve raises ``EndpointResolutionError``: the attempt fails and is retried like a
network error. Any other exception is a bug in the resolver and crashes the consumer, which is restarted.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from hermes.domain.endpoint import EndpointAddress
from hermes.errors import EndpointResolutionError, StartupError, ValidationError

ADDRESSES_KEY = "addresses"


@runtime_checkable
class EndpointAddressResolver(Protocol):
    async def resolve(self, endpoint: EndpointAddress, metadata: Mapping[str, Any]) -> list[str]:
        """Every address (URL, without credentials) the endpoint stands for, in a stable order."""
        ...


class EndpointItself:
    """The default: the endpoint is its only address (the metadata is ignored)."""

    async def resolve(self, endpoint: EndpointAddress, metadata: Mapping[str, Any]) -> list[str]:
        return [endpoint.url]


class StaticAddressList:
    """The addresses listed in the metadata, ``{"addresses": ["http://10.0.0.1:8080/events", ...]}``; the
    endpoint itself when the metadata has no ``addresses``. The endpoint's credentials apply to every address;
    credentials written into the listed addresses are not used."""

    async def resolve(self, endpoint: EndpointAddress, metadata: Mapping[str, Any]) -> list[str]:
        listed = metadata.get(ADDRESSES_KEY)
        if listed is None:
            return [endpoint.url]
        field = f"endpointAddressResolverMetadata.{ADDRESSES_KEY}"
        if not isinstance(listed, list) or not listed:
            raise EndpointResolutionError(f"{field}: must be a non-empty list of URLs")
        try:
            addresses = [EndpointAddress.parse(raw, f"{field}[{i}]").url for i, raw in enumerate(listed)]
        except ValidationError as exc:
            raise EndpointResolutionError(exc.message) from None
        return list(dict.fromkeys(addresses))  # each instance once


def load_resolver(spec: str) -> EndpointAddressResolver:
    """Builds the resolver named ``module:Class``; a clear start-up error when it cannot."""
    module_name, _, class_name = spec.partition(":")
    if not module_name or not class_name:
        raise StartupError(f"endpoint address resolver '{spec}' must be written module:Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise StartupError(f"endpoint address resolver '{spec}': cannot import {module_name} ({exc})") from None
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise StartupError(f"endpoint address resolver '{spec}': {module_name} has no class {class_name}")
    try:
        resolver = cls()
    except Exception as exc:
        raise StartupError(f"endpoint address resolver '{spec}' cannot be built without arguments ({exc})") from None
    if not isinstance(resolver, EndpointAddressResolver):
        raise StartupError(f"endpoint address resolver '{spec}' has no resolve(endpoint, metadata) method")
    return resolver
