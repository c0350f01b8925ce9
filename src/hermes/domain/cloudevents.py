"""CloudEvents 1.0: events read from the HTTP binding's three modes, checked against the core specification, kept
in Kafka as the Kafka binding's binary mode, and written back in the HTTP binding's modes.

- binary: each attribute in a ``ce-<name>`` header (percent-encoded), ``datacontenttype`` as ``Content-Type``, the
  data as the body;
- structured: one JSON object (``application/cloudevents+json``), the data in ``data`` or ``data_base64``;
- batched: a JSON array of such objects (``application/cloudevents-batch+json``).

In Kafka an event is its data as the record's value, each attribute in a ``ce_<name>`` header and
``datacontenttype`` in ``content-type``: one form from which every delivery mode is written. Attribute values are
kept in their canonical string form (an integer extension ``7`` as ``"7"``), as binary mode carries them; so an
integer or boolean extension published in a structured event is delivered as a string."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote, unquote_to_bytes

import orjson

from hermes.domain.message import KAFKA_CLOUD_EVENT_PREFIX, KAFKA_CONTENT_TYPE
from hermes.errors import FormattingError, UnsupportedMediaType, ValidationError

STRUCTURED = "application/cloudevents+json"
BATCH = "application/cloudevents-batch+json"
SPEC_VERSION = "1.0"
HTTP_PREFIX = "ce-"
DATA_CONTENT_TYPE = "datacontenttype"
REQUIRED = ("id", "source", "specversion", "type")
_CORE_OPTIONAL = ("datacontenttype", "dataschema", "subject", "time")
# Attribute names: lower-case ASCII letters and digits (the core specification's naming rule)
_NAME = re.compile(r"[a-z0-9]+")
# Members of a structured event that are not attributes
_DATA_MEMBERS = frozenset({"data", "data_base64"})
# RFC 2046 media types: type "/" subtype, parameters after
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_MEDIA_TYPE = re.compile(rf"{_TOKEN}/{_TOKEN}\s*(;.*)?", re.DOTALL)
_JSON_MEDIA_TYPE = re.compile(r"(application|text)/([a-z0-9.\-]+\+)?json\s*(;.*)?", re.IGNORECASE | re.DOTALL)
_TEXT_MEDIA_TYPE = re.compile(r"(text/.*|application/([a-z0-9.\-]+\+)?xml\s*(;.*)?)", re.IGNORECASE | re.DOTALL)
# RFC 3339 date-time
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)")
_URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
# A String attribute may hold no control characters (C0, DEL, C1) and no surrogates
_NOT_STRING = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_INT32 = (-(2**31), 2**31 - 1)
# The HTTP binding percent-encodes space, '"', '%' and everything outside printable ASCII in header values
_HEADER_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '"%')


@dataclass(frozen=True)
class CloudEvent:
    """One event: its attributes (canonical strings, ``datacontenttype`` among them when given) and its data."""

    attributes: dict[str, str]
    data: bytes

    @property
    def partition_key(self) -> bytes | None:
        """The Partitioning extension's key: the Kafka record's key, as the Kafka binding maps it."""
        key = self.attributes.get("partitionkey")
        return key.encode() if key else None

    def kafka_headers(self) -> list[tuple[str, bytes]]:
        return [
            (KAFKA_CONTENT_TYPE if name == DATA_CONTENT_TYPE else KAFKA_CLOUD_EVENT_PREFIX + name, value.encode())
            for name, value in self.attributes.items()
        ]


def is_json_media_type(media_type: str | None) -> bool:
    """What the JSON format takes as JSON data; an absent ``datacontenttype`` means JSON there."""
    return media_type is None or _JSON_MEDIA_TYPE.fullmatch(media_type) is not None


# --- reading what a publisher sent ---------------------------------------------------------------------------


def read_events(body: bytes, headers: Mapping[str, str]) -> list[CloudEvent]:
    """The events of a publish request (``headers`` keyed by lower-case name): structured, batched or binary
    mode, by its Content-Type and ``ce-`` headers. Raises ``ValidationError`` naming the attribute at fault."""
    content_type = headers.get("content-type", "")
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type == STRUCTURED:
        return [_structured(_json(body), "")]
    if media_type == BATCH:
        events = _json(body)
        if not isinstance(events, list):
            raise FormattingError("a batch of CloudEvents must be a JSON array")
        return [_structured(event, f"[{i}].") for i, event in enumerate(events)]
    if f"{HTTP_PREFIX}specversion" in headers:
        return [_binary(body, headers, content_type)]
    raise UnsupportedMediaType(
        "the topic takes CloudEvents: in binary mode (ce-specversion, ce-id, ce-source and ce-type headers), or as "
        f"{STRUCTURED} or {BATCH}"
    )


def _json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise FormattingError(f"the body is not valid JSON: {exc}") from None


def _binary(body: bytes, headers: Mapping[str, str], content_type: str) -> CloudEvent:
    attributes: dict[str, str] = {}
    for header, value in headers.items():
        if header.startswith(HTTP_PREFIX):
            name = header[len(HTTP_PREFIX) :]
            field = HTTP_PREFIX + name
            _check_name(name, field)
            if name == DATA_CONTENT_TYPE:
                raise ValidationError("datacontenttype travels as the Content-Type header in binary mode", field)
            if name == "data":
                raise ValidationError("is no attribute: the JSON format reserves data for the event's data", field)
            try:
                attributes[name] = unquote_to_bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                raise ValidationError("is not percent-encoded UTF-8", field) from None
    if content_type:
        attributes[DATA_CONTENT_TYPE] = content_type
    _check(attributes, HTTP_PREFIX)
    if body and content_type and is_json_media_type(content_type):
        _check_json_data(body, "body")
    return CloudEvent(attributes, body)


def _structured(value: Any, prefix: str) -> CloudEvent:
    if not isinstance(value, dict):
        raise FormattingError("must be a JSON object: a CloudEvent in the JSON format", prefix.rstrip(".") or "body")
    attributes: dict[str, str] = {}
    for name, raw in value.items():
        if name in _DATA_MEMBERS or raw is None:  # null: the attribute is absent
            continue
        _check_name(name, prefix + name)
        attributes[name] = _canonical(raw, prefix + name, name in REQUIRED or name in _CORE_OPTIONAL)
    _check(attributes, prefix)
    data, data_base64 = value.get("data"), value.get("data_base64")
    if data is not None and data_base64 is not None:
        raise ValidationError("must not be given with data: an event has one or the other", prefix + "data_base64")
    media_type = attributes.get(DATA_CONTENT_TYPE)
    if data_base64 is not None:
        if not isinstance(data_base64, str):
            raise ValidationError("must be a base64 string", prefix + "data_base64")
        try:
            body = base64.b64decode(data_base64, validate=True)
        except binascii.Error:
            raise ValidationError("is not valid base64", prefix + "data_base64") from None
    elif data is None:
        body = b""
    elif is_json_media_type(media_type):
        body = orjson.dumps(data)
    elif isinstance(data, str):
        body = data.encode()
    else:
        raise ValidationError(f"must be a string for datacontenttype {media_type}, which is not JSON", prefix + "data")
    return CloudEvent(attributes, body)


def _canonical(value: Any, field: str, string_only: bool) -> str:
    """An attribute's value of the JSON format as a string: String, Boolean and Integer types (core attributes are
    all strings)."""
    if isinstance(value, str):
        return value
    if not string_only:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int) and _INT32[0] <= value <= _INT32[1]:
            return str(value)
    kind = "a string" if string_only else "a string, a boolean or a 32-bit integer"
    raise ValidationError(f"must be {kind}", field)


def _check_name(name: str, field: str) -> None:
    if not _NAME.fullmatch(name):
        raise ValidationError("is no CloudEvents attribute name: lower-case letters a-z and digits only", field)


def _check(attributes: Mapping[str, str], prefix: str) -> None:
    """The core specification's rules for the context attributes."""
    for name in REQUIRED:
        if not attributes.get(name):
            raise ValidationError("is required and must not be empty", prefix + name)
    if attributes["specversion"] != SPEC_VERSION:
        raise ValidationError(f"must be {SPEC_VERSION}", prefix + "specversion")
    for name, value in attributes.items():
        if _NOT_STRING.search(value):
            raise ValidationError("must not contain control characters", prefix + name)
    for name in ("subject", "dataschema"):
        if name in attributes and not attributes[name]:
            raise ValidationError("must not be empty when given", prefix + name)
    media_type = attributes.get(DATA_CONTENT_TYPE)
    if media_type is not None and not _MEDIA_TYPE.fullmatch(media_type):
        field = "Content-Type" if prefix == HTTP_PREFIX else prefix + DATA_CONTENT_TYPE
        raise ValidationError("must be a media type (RFC 2046), e.g. application/json", field)
    schema = attributes.get("dataschema")
    if schema is not None and (not _URI_SCHEME.match(schema) or " " in schema):
        raise ValidationError("must be an absolute URI", prefix + "dataschema")
    if " " in attributes["source"]:
        raise ValidationError("must be a URI-reference", prefix + "source")
    time = attributes.get("time")
    if time is not None and not _timestamp(time):
        raise ValidationError("must be an RFC 3339 timestamp, e.g. 2018-04-05T17:31:00Z", prefix + "time")


def _timestamp(value: str) -> bool:
    if not _TIMESTAMP.fullmatch(value):
        return False
    try:
        datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:  # a day or an hour that does not exist
        return False
    return True


def _check_json_data(body: bytes, field: str) -> None:
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValidationError(f"is not JSON, as its datacontenttype says it is ({exc})", field) from None


# --- writing what a subscriber receives ----------------------------------------------------------------------


def binary_headers(attributes: Mapping[str, str]) -> dict[str, str]:
    """The ``ce-`` headers of binary mode (``datacontenttype`` goes as the Content-Type, not here)."""
    return {
        HTTP_PREFIX + name: quote(value, safe=_HEADER_SAFE)
        for name, value in attributes.items()
        if name != DATA_CONTENT_TYPE and _NAME.fullmatch(name)  # another Kafka producer's name may be no header's
    }


def http_content_type(attributes: Mapping[str, str]) -> str:
    """The Content-Type of binary mode: the ``datacontenttype``, or none ("") when it is absent or, written by
    another Kafka producer, no header value."""
    media_type = attributes.get(DATA_CONTENT_TYPE, "")
    return media_type if media_type.isascii() and media_type.isprintable() else ""


def structured(attributes: Mapping[str, str], data: bytes) -> bytes:
    """The event in the JSON format: JSON data as ``data``, text as a ``data`` string, other bytes as
    ``data_base64``."""
    # another Kafka producer's header names may be no attribute's, or the data's member
    event: dict[str, Any] = {
        name: value for name, value in attributes.items() if _NAME.fullmatch(name) and name != "data"
    }
    if data:
        media_type = attributes.get(DATA_CONTENT_TYPE)
        if is_json_media_type(media_type) and _is_json(data):
            event["data"] = orjson.Fragment(data)
        elif media_type is not None and _TEXT_MEDIA_TYPE.fullmatch(media_type) and (text := _utf8(data)) is not None:
            event["data"] = text
        else:
            event["data_base64"] = base64.b64encode(data).decode()
    return orjson.dumps(event)


def _is_json(data: bytes) -> bool:
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return True


def _utf8(data: bytes) -> str | None:
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None
