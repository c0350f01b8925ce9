"""The offload protocol's BSON document read from a file without reading it whole: its top-level fields are
skipped by their sizes to find the ``message`` binary, which may be far larger than memory should hold."""

from __future__ import annotations

import struct
from typing import IO

from hermes.errors import HermesError, ValidationError


def find_message(source: IO[bytes]) -> tuple[int, int]:
    """Where the ``message`` binary of the BSON document in ``source`` is (offset, size), found without reading
    the document whole: the top-level fields before it are skipped by their sizes."""
    _, offset, size = message_element(source)
    return offset, size


def message_element(source: IO[bytes]) -> tuple[int, int, int]:
    """As ``find_message``, and where the ``message`` element itself starts (its type byte) first."""
    end = source.seek(0, 2)
    source.seek(0)
    total = _int32(source)
    while source.tell() < total - 1:
        start = source.tell()
        kind = source.read(1)
        name = _cstring(source)
        if kind == b"\x05":  # binary: length, subtype, bytes (subtype 2 repeats the length inside)
            length, subtype = _int32(source), source.read(1)
            if subtype == b"\x02":
                length = _int32(source)
            if name == b"message":
                if source.tell() + length > end:
                    raise HermesError("the document ends inside its message")
                return start, source.tell(), length
            source.seek(length, 1)
        elif name == b"message" and kind == b"\x0a":  # null, as if absent
            raise ValidationError("is required", "message")
        elif name == b"message":
            raise ValidationError(f"must be a BSON binary, not {_KINDS.get(kind, 'another type')}", "message")
        else:
            _skip_value(source, kind)
    raise ValidationError("is required", "message")


def element_spans(source: IO[bytes], wanted: bytes) -> list[tuple[int, int]]:
    """Where the top-level elements named ``wanted`` are (each from its type byte to its end): every element is
    skipped by its size, the message too."""
    spans = []
    source.seek(0)
    total = _int32(source)
    while source.tell() < total - 1:
        start = source.tell()
        kind = source.read(1)
        name = _cstring(source)
        if kind == b"\x05":
            source.seek(_int32(source) + 1, 1)  # length, subtype, bytes
        else:
            _skip_value(source, kind)
        if name == wanted:
            spans.append((start, source.tell()))
    return spans


def _skip_value(source: IO[bytes], kind: bytes) -> None:
    if kind in _FIXED_SIZES:
        source.seek(_FIXED_SIZES[kind], 1)
    elif kind in (b"\x02", b"\x0d", b"\x0e"):  # string, code, symbol: length, then bytes
        source.seek(_int32(source), 1)
    elif kind in (b"\x03", b"\x04", b"\x0f"):  # document, array, code with scope: total size, itself included
        source.seek(_int32(source) - 4, 1)
    elif kind == b"\x0b":  # regex: two C strings
        _cstring(source)
        _cstring(source)
    elif kind == b"\x0c":  # DBPointer: string, then 12 bytes
        source.seek(_int32(source) + 12, 1)
    else:
        raise HermesError(f"unknown BSON element type {kind!r}")


_KINDS = {
    b"\x01": "a double",
    b"\x02": "a string",
    b"\x03": "a document",
    b"\x04": "an array",
    b"\x08": "a boolean",
    b"\x10": "an integer",
    b"\x12": "an integer",
}
_FIXED_SIZES = {
    b"\x01": 8,
    b"\x06": 0,
    b"\x07": 12,
    b"\x08": 1,
    b"\x09": 8,
    b"\x0a": 0,
    b"\x10": 4,
    b"\x11": 8,
    b"\x12": 8,
    b"\x13": 16,
    b"\xff": 0,
    b"\x7f": 0,
}


def _int32(source: IO[bytes]) -> int:
    raw = source.read(4)
    if len(raw) != 4:
        raise HermesError("the document is cut short")
    value: int = struct.unpack("<i", raw)[0]
    if value < 0:
        raise HermesError("a length in the document is negative")
    return value


def _cstring(source: IO[bytes]) -> bytes:
    name = bytearray()
    while (char := source.read(1)) != b"\x00":
        if not char:
            raise HermesError("the document is cut short")
        name += char
    return bytes(name)
