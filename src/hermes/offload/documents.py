"""The offload protocol's BSON document, ``{message, headers, key}``: checked on upload, as the spec has it.

``message`` and ``key`` are BSON binaries; ``headers`` either an array of ``[name, value]`` pairs or a document
of ``name: value``, names strings, values binaries. The ``_id`` header is the message's UUID (16 bytes, as the
spec's standard headers have it, or its text form).

The document stored (and served on download) carries one more top-level element, ``metadata``: ``{headers,
timestamp, key}``, the headers as ``[name, value]`` pairs, the time the message was stored in epoch ms and the key
when there is one. The spec allows extra elements there; hop-client's consumer requires this one."""

from __future__ import annotations

import io
import itertools
import struct
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import IO, Any

import bson
from bson.errors import BSONError

from hermes.domain.bson_document import element_spans, message_element
from hermes.errors import HermesError, PayloadTooLarge, ValidationError

ID_HEADER = "_id"
METADATA = "metadata"

Header = tuple[str, bytes]


@dataclass(frozen=True)
class Upload:
    message_id: str  # the canonical text form of the UUID
    size: int  # of the message, in bytes
    headers: tuple[Header, ...]  # as uploaded, in their order
    key: bytes | None
    metadata: tuple[tuple[int, int], ...] = ()  # where an uploaded metadata element is (replaced when stored)


def check_upload(document: bytes, max_size: int) -> Upload:
    """Raises what is wrong with the document; a message without an ``_id`` header gets a new id."""
    fields = _decoded(document)
    message = fields.get("message")
    if message is None:
        raise ValidationError("is required", "message")
    if not isinstance(message, bytes):
        raise ValidationError(f"must be a BSON binary, not {_bson_type(message)}", "message")
    upload = _checked(fields, len(message), max_size)
    return _with_spans(upload, fields, io.BytesIO(document))


def check_stored_upload(source: IO[bytes], max_size: int) -> Upload:
    """``check_upload`` for a document in a file: the message is found by skipping the fields before it and never
    read; the document without it (headers, key, any other field) is decoded and checked as a whole one is."""
    try:
        start, offset, size = message_element(source)
        source.seek(0)
        total = struct.unpack("<i", source.read(4))[0]
    except ValidationError:
        raise
    except HermesError as exc:
        raise ValidationError(f"the body is not a BSON document: {exc.message}") from None
    end = source.seek(0, 2)
    if total != end:
        raise ValidationError(f"the body is not a BSON document: its length says {total} bytes, it has {end}")
    if size > max_size:  # before the rest is read
        raise PayloadTooLarge(f"Message size {size} exceeds the offload limit {max_size}")
    source.seek(4)
    before = source.read(start - 4)
    source.seek(offset + size)
    after = source.read()
    rest = struct.pack("<i", 4 + len(before) + len(after)) + before + after
    fields = _decoded(rest)
    return _with_spans(_checked(fields, size, max_size), fields, source)


def _with_spans(upload: Upload, fields: Mapping[str, Any], source: IO[bytes]) -> Upload:
    """The upload, with where its own metadata elements are when it has any (a document downloaded and uploaded
    again has one): the service's replaces them."""
    if METADATA not in fields:
        return upload
    return replace(upload, metadata=tuple(element_spans(source, METADATA.encode())))


def _decoded(document: bytes) -> dict[str, Any]:
    try:
        return bson.decode(document)
    except (BSONError, ValueError, TypeError) as exc:  # bson raises all three on malformed input
        raise ValidationError(f"the body is not a BSON document: {exc}") from None


def _checked(fields: Mapping[str, Any], size: int, max_size: int) -> Upload:
    if size > max_size:
        raise PayloadTooLarge(f"Message size {size} exceeds the offload limit {max_size}")
    key = fields.get("key")
    if key is not None and not isinstance(key, bytes):
        raise ValidationError(f"must be a BSON binary, not {_bson_type(key)}", "key")
    headers = _headers(fields.get("headers"))
    ids = [value for name, value in headers if name == ID_HEADER]
    message_id = _message_id(ids[0]) if ids else str(uuid.uuid4())
    return Upload(message_id, size, tuple(headers), key)


def document_chunks(
    message: Iterable[bytes], size: int, headers: Sequence[Header], key: bytes | None, timestamp: int
) -> Iterator[bytes]:
    """The stored document ``{message, headers, key, metadata}`` around the message's chunks (``size`` bytes in
    all): a large message is written out as it comes, where ``bson.encode`` would copy it into the document first."""
    rest = bson.encode({"headers": [[name, value] for name, value in headers], **({"key": key} if key else {})})
    element = b"\x05message\x00" + struct.pack("<i", size) + b"\x00"  # binary, subtype 0 (generic)
    elements = rest[4:-1] + metadata_element(headers, key, timestamp)  # without rest's length and closing zero
    length = 4 + len(element) + size + len(elements) + 1
    return itertools.chain((struct.pack("<i", length) + element,), message, (elements + b"\x00",))


def with_metadata(document: Iterable[bytes], size: int, upload: Upload, timestamp: int) -> Iterator[bytes]:
    """The stored document of an upload: the uploaded one (its chunks, ``size`` bytes in all) with the service's
    ``metadata`` element in place of any it had, appended, chunk by chunk: the elements are copied as they come."""
    metadata = metadata_element(upload.headers, upload.key, timestamp)
    keep, cursor = [], 4  # the elements' byte ranges: without the length, the uploaded metadata, the closing zero
    for start, end in upload.metadata:
        keep.append((cursor, start))
        cursor = end
    keep.append((cursor, size - 1))
    yield struct.pack("<i", 4 + sum(end - start for start, end in keep) + len(metadata) + 1)
    position = 0
    for chunk in document:
        after = position + len(chunk)
        for start, end in keep:
            low, high = max(start, position), min(end, after)
            if low < high:
                yield chunk[low - position : high - position]  # a whole chunk is the chunk itself, not a copy
        position = after
    yield metadata + b"\x00"


def metadata_element(headers: Sequence[Header], key: bytes | None, timestamp: int) -> bytes:
    """The ``metadata`` element, as hop-client reads it: ``headers`` as pairs, ``timestamp`` in epoch ms."""
    metadata: dict[str, Any] = {"headers": [[name, value] for name, value in headers], "timestamp": timestamp}
    if key is not None:
        metadata["key"] = key
    return bson.encode({METADATA: metadata})[4:-1]


def _headers(value: Any) -> list[Header]:
    if value is None:
        return []
    if isinstance(value, Mapping):
        pairs = [(name, header, f"headers.{name}") for name, header in value.items()]
    elif isinstance(value, list):
        pairs = []
        for index, pair in enumerate(value):
            if not isinstance(pair, list) or len(pair) != 2:
                raise ValidationError("must be an array of two elements, a name and a value", f"headers[{index}]")
            pairs.append((pair[0], pair[1], f"headers[{index}]"))
    else:
        kind = _bson_type(value)
        raise ValidationError(f"must be an array of [name, value] pairs or a document, not {kind}", "headers")
    headers: list[Header] = []
    for raw_name, header, field in pairs:
        name = raw_name.decode("utf-8", "replace") if isinstance(raw_name, bytes) else raw_name
        if not isinstance(name, str):
            raise ValidationError(f"the name must be a string, not {_bson_type(name)}", field)
        if not isinstance(header, bytes):
            raise ValidationError(f"the value must be a BSON binary, not {_bson_type(header)}", field)
        headers.append((name, header))
    return headers


def _message_id(value: bytes) -> str:
    try:
        return str(uuid.UUID(bytes=value) if len(value) == 16 else uuid.UUID(value.decode("ascii")))
    except (ValueError, UnicodeDecodeError):
        raise ValidationError("must be a UUID (16 bytes, or its text form)", f"headers.{ID_HEADER}") from None


def canonical_id(text: str) -> str | None:
    """A message id from a URL in its canonical form, or None when it is no UUID."""
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return None


def _bson_type(value: Any) -> str:
    return _BSON_TYPES.get(type(value), type(value).__name__)


_BSON_TYPES: dict[type, str] = {
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a double",
    list: "an array",
    dict: "a document",
}
