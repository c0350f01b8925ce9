"""The field readers every document shares: each validates one field and raises ``ValidationError`` naming it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, TypeVar

from hermes.errors import FormattingError, ValidationError

SECRET_MASK = "******"

E = TypeVar("E", bound=StrEnum)
Json = dict[str, Any]

# Hermes' JSON binding (Jackson) takes a JSON string of an integer for an integer field, and the console sends
# typed counts so ("consumersNumber": "2"). Only the plain decimal form (Java's parseInt): no blanks (Jackson
# would trim them), fraction, exponent or empty string (Jackson would take it for 0).
_INTEGER_TEXT = re.compile(r"[-+]?[0-9]{1,18}")


def read_object(value: Any, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise FormattingError("must be a JSON object", field)
    return value


def read_str(data: Mapping[str, Any], key: str, default: str, field: str | None = None) -> str:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ValidationError("must be a string", field or key)
    return value


def read_optional_str(data: Mapping[str, Any], key: str, field: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ValidationError("must be a string", field)
    return value


def read_bool(data: Mapping[str, Any], key: str, default: bool, field: str | None = None) -> bool:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValidationError("must be true or false", field or key)
    return value


def as_int(value: Any, field: str, lo: int | None = None, hi: int | None = None) -> int:
    """An integer given as a JSON number without a fraction or as a string of decimal digits."""
    if isinstance(value, str) and _INTEGER_TEXT.fullmatch(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ValidationError("must be an integer", field)
    number = int(value)
    if lo is not None and number < lo:
        raise ValidationError(f"must be at least {lo}", field)
    if hi is not None and number > hi:
        raise ValidationError(f"must be at most {hi}", field)
    return number


def read_int(
    data: Mapping[str, Any], key: str, default: int, field: str, lo: int | None = None, hi: int | None = None
) -> int:
    value = data.get(key, default)
    return default if value is None else as_int(value, field, lo, hi)


def read_float(data: Mapping[str, Any], key: str, default: float, field: str, lo: float, hi: float) -> float:
    value = data.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError("must be a number", field)
    if not lo <= value <= hi:
        raise ValidationError(f"must be between {lo} and {hi}", field)
    return float(value)


def read_enum(data: Mapping[str, Any], key: str, enum: type[E], default: E, field: str) -> E:
    value = data.get(key, default)
    if value is None:
        return default
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(e.value for e in enum)
        raise ValidationError(f"must be one of: {allowed}", field) from None


def read_timestamp(data: Mapping[str, Any], key: str) -> int:
    """Epoch millis from Hermes' wire form, decimal epoch seconds (Jackson's ``Instant``). Records stored
    before the wire form was seconds hold millis; no date of this century is below 10**11 in millis."""
    value = data.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValidationError("must be epoch seconds", key)
    return int(value) if value >= 10**11 else round(value * 1000)


def seconds(millis: int) -> float | int:
    return millis // 1000 if millis % 1000 == 0 else millis / 1000


def read_strings(value: Any, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValidationError("must be an array of strings", field)
    return tuple(value)


def read_objects(value: Any, field: str) -> list[tuple[str, Mapping[str, Any]]]:
    """An optional array of objects, each with the name its fields' errors start with (``field[i]``)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValidationError("must be an array", field)
    if any(raw is None for raw in value):  # read_object takes null for an empty object, which no item is
        raise FormattingError("must be a JSON object", f"{field}[{value.index(None)}]")
    return [(f"{field}[{i}]", read_object(raw, f"{field}[{i}]")) for i, raw in enumerate(value)]
