"""The offload protocol's BSON document, ``{message, headers, key}``: checked on upload, as the spec has it.

``message`` and ``key`` are BSON binaries; ``headers`` either an array of ``[name, value]`` pairs or a document
of ``name: value``, names strings, values binaries. The ``_id`` header is the message's UUID (16 bytes, as the
spec's standard headers have it, or its text form)."""

from __future__ import annotations

import itertools
import struct
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

import bson
from bson.errors import BSONError

from hermes.domain.bson_document import message_element
from hermes.errors import HermesError, PayloadTooLarge, ValidationError

ID_HEADER = "_id"


@dataclass(frozen=True)
class Upload:
    message_id: str  # the canonical text form of the UUID
    size: int  # of the message, in bytes


def check_upload(document: bytes, max_size: int) -> Upload:
    """Raises what is wrong with the document; a message without an ``_id`` header gets a new id."""
    fields = _decoded(document)
    message = fields.get("message")
    if message is None:
        raise ValidationError("is required", "message")
    if not isinstance(message, bytes):
        raise ValidationError(f"must be a BSON binary, not {_bson_type(message)}", "message")
    return _checked(fields, len(message), max_size)


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
    return _checked(_decoded(rest), size, max_size)


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
    message_id = _message_id(headers[ID_HEADER]) if ID_HEADER in headers else str(uuid.uuid4())
    return Upload(message_id, size)


def document_chunks(
    message: Iterable[bytes], size: int, headers: Sequence[tuple[str, bytes]], key: bytes | None
) -> Iterator[bytes]:
    """The document ``{message, headers, key}`` around the message's chunks (``size`` bytes in all): a large
    message is written out as it comes, where ``bson.encode`` would copy it into the document first."""
    rest = bson.encode({"headers": [[name, value] for name, value in headers], **({"key": key} if key else {})})
    element = b"\x05message\x00" + struct.pack("<i", size) + b"\x00"  # binary, subtype 0 (generic)
    elements = rest[4:-1]  # without the other document's length and its closing zero
    length = 4 + len(element) + size + len(elements) + 1
    return itertools.chain((struct.pack("<i", length) + element,), message, (elements + b"\x00",))


def _headers(value: Any) -> dict[str, bytes]:
    if value is None:
        return {}
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
    headers: dict[str, bytes] = {}
    for raw_name, header, field in pairs:
        name = raw_name.decode("utf-8", "replace") if isinstance(raw_name, bytes) else raw_name
        if not isinstance(name, str):
            raise ValidationError(f"the name must be a string, not {_bson_type(name)}", field)
        if not isinstance(header, bytes):
            raise ValidationError(f"the value must be a BSON binary, not {_bson_type(header)}", field)
        headers.setdefault(name, header)
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
