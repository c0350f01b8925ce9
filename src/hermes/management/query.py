"""Hermes' query language, for ``/query/*``, ``/topics/query`` and ``/topics/{t}/subscriptions/query``.

A query is ``{"query": {...}}``. Each member of an object is a condition and all must hold: ``"attr": value``
(equality), ``"attr": {"op": operand}`` with ``eq``, ``ne``, ``like`` (a regular expression the whole value
must match), ``in`` (an array), ``gt``, ``lt`` (numbers), or ``"and"``/``"or"`` with an array of objects and
``"not"`` with an object. Attributes are the JSON fields the API answers with; ``owner.id`` reaches into
nested objects. Values compare as Hermes compares them: equal, or equal as text (``5`` matches ``"5"``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from hermes.errors import InvalidQuery

Json = dict[str, Any]
Matcher = Callable[[Json], bool]
_MISSING = object()
_OPERATORS = frozenset({"eq", "ne", "like", "in", "not", "and", "or", "gt", "lt"})


def parse(document: Any) -> Matcher:
    """The matcher of a query document; an unparsable one raises ``InvalidQuery`` saying why."""
    if not isinstance(document, Mapping) or "query" not in document:
        raise InvalidQuery("JSON object must contain 'query' attribute")
    return _all_of(document["query"], "query")


def select(document: Any, items: Iterable[Json]) -> list[Json]:
    matcher = parse(document)
    return [item for item in items if matcher(item)]


def _all_of(node: Any, where: str) -> Matcher:
    if not isinstance(node, Mapping):
        raise InvalidQuery(f"{where} must be a JSON object of conditions")
    matchers = [_condition(key, value, f"{where}.{key}") for key, value in node.items()]
    return lambda item: all(m(item) for m in matchers)


def _single(node: Any, where: str) -> tuple[str, Any]:
    if not isinstance(node, Mapping) or len(node) != 1:
        members = list(node) if isinstance(node, Mapping) else node
        raise InvalidQuery(f"{where}: the object must define exactly one member, but defines {members}")
    return next(iter(node.items()))


def _condition(key: str, value: Any, where: str) -> Matcher:
    operator = key.lower()
    if operator in ("and", "or"):
        if not isinstance(value, list):
            raise InvalidQuery(f"{where}: element value was expected to be an array")
        parts = [_all_of(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if operator == "and":
            return lambda item: all(p(item) for p in parts)
        return lambda item: any(p(item) for p in parts)
    if operator == "not":
        inner = _condition(*_single(value, where), where)
        return lambda item: not inner(item)
    if operator in _OPERATORS:
        raise InvalidQuery(f'{where}: \'{key}\' needs an attribute, as in {{"name": {{"{key}": ...}}}}')
    if isinstance(value, Mapping):
        op, operand = _single(value, where)
        return _comparison(key, op.lower(), operand, where)
    return _comparison(key, "eq", value, where)


def _comparison(path: str, op: str, operand: Any, where: str) -> Matcher:
    def actual(item: Json) -> Any:
        return _navigate(item, path)

    if op in ("eq", "ne"):
        _scalar(operand, where)
        if op == "eq":
            return lambda item: _equal(actual(item), operand)
        return lambda item: not _equal(actual(item), operand)
    if op == "like":
        _scalar(operand, where)
        try:
            pattern = re.compile(_text(operand))
        except re.error as exc:
            raise InvalidQuery(f"{where}: could not parse regexp pattern '{operand}' ({exc})") from None
        return lambda item: pattern.fullmatch(_text(actual(item))) is not None
    if op == "in":
        if not isinstance(operand, list):
            raise InvalidQuery(f"{where}: element value was expected to be an array")
        for value in operand:
            _scalar(value, where)
        return lambda item: any(_equal(actual(item), v) for v in operand if v is not None)
    if op in ("gt", "lt"):
        bound = _number(operand)
        if bound is None:
            raise InvalidQuery(f"{where}: comparison operator requires numerical data")
        return lambda item: _compare(actual(item), op, bound)
    if op in _OPERATORS:
        raise InvalidQuery(f"{where}: '{op}' cannot compare an attribute")
    raise InvalidQuery(f"{where}: unrecognized operator '{op}'")


def _scalar(value: Any, where: str) -> None:
    if isinstance(value, dict | list):
        raise InvalidQuery(f"{where}: the node value wasn't present (a string, number, boolean or null)")


def _navigate(item: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(item, Mapping) or part not in item:
            return _MISSING
        item = item[part]
    return item


def _text(value: Any) -> str:
    """A value as Hermes' Java code prints it, so that text comparisons agree with Hermes."""
    if value is True or value is False:
        return "true" if value else "false"
    if value is None or value is _MISSING:
        return "null"
    return str(value)


def _equal(actual: Any, expected: Any) -> bool:
    if expected is None or actual is _MISSING:
        return False
    return bool(actual == expected and type(actual) is type(expected)) or _text(actual) == _text(expected)


_NUMERIC = re.compile(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$")


def _number(value: Any) -> float | None:
    """A number, or a string that is one (as Java's ``Double.parseDouble`` reads it); anything else None."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and _NUMERIC.match(value):
        return float(value)
    return None


def _compare(actual: Any, op: str, bound: float) -> bool:
    if actual is _MISSING or actual is None:
        return False
    number = _number(actual)
    if number is None:
        return True  # as Hermes: a value that is not a number passes a comparison
    return number > bound if op == "gt" else number < bound
