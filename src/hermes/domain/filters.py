"""Subscription filters, applied to each message before sending, in declaration order.

``matcher`` is a regular expression that must match the whole value. A path may select several values
(``*`` in JsonPath, ``[*]`` in AvroPath): with matchingStrategy ``all`` every one must match, with ``any`` at
least one; a path that selects nothing does not match. A header filter on ``ce-<name>`` reads the CloudEvents
attribute ``<name>`` of an event, however it was published (``ce-type``, ``ce-source``...); a path filter reads
an event's data.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import orjson
from jsonpath_ng.ext import parse as parse_jsonpath  # type: ignore[attr-defined]

from hermes.domain.cloudevents import HTTP_PREFIX
from hermes.domain.message import Message
from hermes.domain.subscription import MatchingStrategy, MessageFilterSpecification

Predicate = Callable[[Message, Any], bool]  # (message, lazily decoded JSON body) -> passes
_UNDECODED = object()


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    return orjson.dumps(value).decode() if isinstance(value, dict | list) else str(value)


def _matches(values: Iterable[Any], pattern: re.Pattern[str], strategy: MatchingStrategy) -> bool:
    found = [pattern.fullmatch(_text(v)) is not None for v in values]
    if not found:
        return False
    return all(found) if strategy is MatchingStrategy.ALL else any(found)


def _avropath_values(document: Any, path: str) -> list[Any]:
    """Dotted paths with ``[n]`` and ``[*]`` over a decoded record, e.g. ``.user.addresses[*].city``."""
    current = [document]
    for step in path.strip(".").split("."):
        name, _, index = step.partition("[")
        nxt: list[Any] = []
        for node in current:
            if isinstance(node, dict) and name in node:
                value = node[name]
                if index:
                    if not isinstance(value, list):
                        continue
                    selector = index.rstrip("]")
                    if selector == "*":
                        nxt.extend(value)
                    elif selector.isdigit() and int(selector) < len(value):
                        nxt.append(value[int(selector)])
                else:
                    nxt.append(value)
        current = nxt
    return current


def compile_filter(spec: MessageFilterSpecification) -> Predicate:
    pattern = re.compile(spec.matcher)
    if spec.type == "header":
        header = (spec.header or "").lower()
        attribute = header.removeprefix(HTTP_PREFIX) if header.startswith(HTTP_PREFIX) else None

        def by_header(message: Message, _: Any) -> bool:
            values = [v for k, v in message.propagated_headers.items() if k.lower() == header]
            event = message.cloud_event
            if attribute is not None and event is not None and attribute in event:
                values.append(event[attribute])
            return _matches(values, pattern, spec.matching_strategy)

        return by_header
    if spec.type == "jsonpath":
        expression = parse_jsonpath(spec.path or "$")

        def by_jsonpath(_: Message, document: Any) -> bool:
            return _matches((m.value for m in expression.find(document)), pattern, spec.matching_strategy)

        return by_jsonpath
    path = spec.path or ""

    def by_avropath(_: Message, document: Any) -> bool:
        return _matches(_avropath_values(document, path), pattern, spec.matching_strategy)

    return by_avropath


def _json(message: Message) -> Any:
    return orjson.loads(message.body)


class MessageFilters:
    """All filters of a subscription. ``decode`` turns a message into the document paths are evaluated on
    (parsed JSON by default; the decoded record for Avro messages)."""

    def __init__(self, specs: Iterable[MessageFilterSpecification]) -> None:
        self._predicates = [compile_filter(s) for s in specs]

    def __bool__(self) -> bool:
        return bool(self._predicates)

    def passes(self, message: Message, decode: Callable[[Message], Any] = _json) -> bool:
        document: Any = _UNDECODED
        for predicate in self._predicates:
            if document is _UNDECODED:
                try:
                    document = decode(message)
                except (ValueError, TypeError, EOFError, IndexError):
                    document = None  # a body paths cannot read matches no path filter
            if not predicate(message, document):
                return False
        return True
