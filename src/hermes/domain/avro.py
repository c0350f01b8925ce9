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
        fields = ", ".join(str(e).split(" is ")[0] for e in exc.errors) or "message"
        raise ValidationError(f"the message does not match the topic's Avro schema ({fields})", fields) from None
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, record)
    return buffer.getvalue()


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
    except (ValueError, TypeError, KeyError, IndexError, EOFError, UnicodeDecodeError) as exc:
        raise ValidationError(f"the message is not Avro binary of the topic's schema: {exc!r}") from None
    if buffer.tell() != len(data):
        raise ValidationError(f"the message has {len(data) - buffer.tell()} bytes after its Avro record")
    return data


def avro_to_record(schema: str, data: bytes) -> Any:
    return fastavro.schemaless_reader(io.BytesIO(data), parse_schema(schema))


def avro_to_json(schema: str, data: bytes) -> bytes:
    return orjson.dumps(avro_to_record(schema, data), default=str)
