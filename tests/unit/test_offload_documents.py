"""The consumers' reading of an offloaded document's message field from a file, fields skipped by their sizes."""

from __future__ import annotations

import io
import re

import bson
import pytest
from bson.binary import Binary
from bson.int64 import Int64
from bson.objectid import ObjectId

from hermes.consumers.offloaded import find_message
from hermes.errors import HermesError
from hermes.offload.documents import document_chunks


def read_message(document: bytes) -> bytes:
    offset, size = find_message(io.BytesIO(document))
    return document[offset : offset + size]


def test_the_message_is_found_after_fields_of_every_common_type() -> None:
    document = bson.encode(
        {
            "s": "text",
            "d": {"a": 1},
            "arr": [1, "x"],
            "k": b"key",
            "n": None,
            "t": True,
            "i": 7,
            "l": Int64(8),
            "f": 1.5,
            "o": ObjectId(),
            "r": re.compile("a.b"),
            "message": b"the body",
            "after": "x",
        }
    )
    assert read_message(document) == b"the body"


def test_the_frontends_own_documents_and_old_binary_subtype() -> None:
    ours = b"".join(document_chunks((b"ab", b"cd"), 4, [("h", b"v")], b"key"))
    assert bson.decode(ours)["message"] == b"abcd"
    assert read_message(ours) == b"abcd"
    assert read_message(bson.encode({"message": Binary(b"old", 2)})) == b"old"


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        (bson.encode({"other": b"x"}), "no message field"),
        (bson.encode({"message": "a string"}), "not a BSON binary"),
        (bson.encode({"message": b"0123456789"})[:-6], "ends inside its message"),
        (b"\x05\x00", "cut short"),
    ],
)
def test_a_bad_document_says_what_is_wrong(document: bytes, problem: str) -> None:
    with pytest.raises(HermesError, match=problem):
        read_message(document)
