"""Avro for topics with contentType AVRO: what clients publish (JSON, Avro's JSON encoding or Avro binary) is
validated against the topic's schema and stored as Avro binary; consumers convert it back to JSON for JSON
subscriptions."""

from __future__ import annotations

import io
from functools import lru_cache
from typing import Any

import fastavro
import orjson
from fastavro.validation import validate

from hermes.errors import ValidationError

# what fastavro raises for bytes that are not one record of a schema
AVRO_DECODING_ERRORS = (ValueError, TypeError, KeyError, IndexError, EOFError, UnicodeDecodeError)


def avro_problem(exc: Exception) -> str:
    """Why bytes are not a record of a schema, in words: fastavro's ``EOFError('Expected -52 bytes, read 6')``
    means the record needs more bytes than the body has."""
    if isinstance(exc, EOFError):
        return "the body ends before its record does (cut short, or written with another schema)"
    if isinstance(exc, UnicodeDecodeError):
        return "a string field is not UTF-8 (written with another schema?)"
    if isinstance(exc, IndexError | KeyError):
        return "a union branch or enum symbol the schema does not have (written with another schema?)"
    return str(exc) or type(exc).__name__


# Versions are stored as signed 64-bit integers (SQLite, the Kafka record's header): none can be larger
MAX_SCHEMA_VERSION = 2**63 - 1


def schema_version(text: str, field: str) -> int:
    """A schema version (or id) a client named in a header or path."""
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_SCHEMA_VERSION:
        raise ValidationError(f"must be a schema version number from 0 to {MAX_SCHEMA_VERSION}", field)
    return int(text)


@lru_cache(maxsize=512)
def parse_schema(schema: str) -> Any:
    try:
        return fastavro.parse_schema(orjson.loads(schema))
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as exc:
        raise ValidationError(f"is not a valid Avro schema: {exc}", "schema") from None


def json_to_avro(schema: str, body: bytes) -> bytes:
    """Validates the JSON ``body`` against ``schema`` and encodes it; a mismatch names the field."""
    parsed = parse_schema(schema)
    try:
        record = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValidationError(f"the message is not valid JSON: {exc}") from None
    try:
        validate(record, parsed, raise_errors=True)
    except fastavro.validation.ValidationError as exc:
        detail = _mismatches(exc.errors, parsed.get("name", "") if isinstance(parsed, dict) else "")
        raise ValidationError(f"the message does not match the topic's Avro schema: {detail}") from None
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, record)
    return buffer.getvalue()


_JSON_TYPES = {str: "a string", bool: "true or false", int: "a number", float: "a number", list: "an array"}


def _mismatches(errors: Any, top: str) -> str:
    """fastavro's errors (``field`` is the record's full name and the field's: ``ns.User.name``) in words, each
    field once: a union's alternatives are one error each."""
    expected: dict[str, list[str]] = {}
    given: dict[str, Any] = {}
    for error in errors:
        expected.setdefault(error.field, []).append(_schema_name(error.schema))
        given[error.field] = error.datum
    said = []
    for path, types in expected.items():
        record, _, name = path.rpartition(".")
        if not path:
            said.append(f"it must be a JSON object, the record `{_short(top)}`")
            continue
        where = "" if record == top else f" of record `{_short(record)}`"
        if given[path] is None:
            said.append(f"missing required field `{name}`{where}")
        else:
            found = _JSON_TYPES.get(type(given[path]), "an object")
            said.append(f"field `{name}`{where} must be {' or '.join(types)}, not {found}")
    return "; ".join(said)


def _schema_name(schema: Any) -> str:
    if isinstance(schema, dict):
        named = schema.get("name")
        return f"{schema.get('type')} `{_short(named)}`" if named else str(schema.get("type"))
    return str(schema)


def _short(name: str) -> str:
    return name.rpartition(".")[2]


def avro_json_to_avro(schema: str, body: bytes) -> bytes:
    """Avro's own JSON encoding (``avro/json``: unions written as ``{"type": value}``) to Avro binary."""
    parsed = parse_schema(schema)
    try:
        record = next(iter(fastavro.json_reader(io.StringIO(body.decode()), parsed)))
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, record)
    # fastavro's JSON decoder reports a mismatch as whichever error its decoding step hit
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, StopIteration) as exc:
        raise ValidationError(f"the message is not Avro JSON of the topic's schema: {exc}") from None
    return buffer.getvalue()


def check_avro(schema: str, data: bytes) -> bytes:
    """Returns ``data`` once it is checked to be one record of ``schema`` in Avro binary (``avro/binary``)."""
    buffer = io.BytesIO(data)
    try:
        fastavro.schemaless_reader(buffer, parse_schema(schema))
    except AVRO_DECODING_ERRORS as exc:
        raise ValidationError(f"the message is not Avro binary of the topic's schema: {avro_problem(exc)}") from None
    if buffer.tell() != len(data):
        raise ValidationError(f"the message has {len(data) - buffer.tell()} bytes after its Avro record")
    return data


def avro_to_record(schema: str, data: bytes) -> Any:
    return fastavro.schemaless_reader(io.BytesIO(data), parse_schema(schema))


def avro_to_json(schema: str, data: bytes) -> bytes:
    return orjson.dumps(avro_to_record(schema, data), default=str)
