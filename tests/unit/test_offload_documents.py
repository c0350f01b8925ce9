"""Reading an offloaded document's message field from a file, fields skipped by their sizes: the consumers' fetched
documents and the frontend's spooled uploads."""

from __future__ import annotations

import io
import re
import uuid

import bson
import pytest
from bson.binary import Binary
from bson.int64 import Int64
from bson.objectid import ObjectId

from hermes.domain.bson_document import find_message
from hermes.errors import HermesError, PayloadTooLarge, ValidationError
from hermes.offload.documents import Upload, check_stored_upload, check_upload, document_chunks


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
        (bson.encode({"other": b"x"}), "message: is required"),
        (bson.encode({"message": "a string"}), "message: must be a BSON binary"),
        (bson.encode({"message": b"0123456789"})[:-6], "ends inside its message"),
        (b"\x05\x00", "cut short"),
    ],
)
def test_a_bad_document_says_what_is_wrong(document: bytes, problem: str) -> None:
    with pytest.raises(HermesError, match=problem):
        read_message(document)


def _stored(document: bytes, max_size: int = 1 << 20) -> Upload:
    return check_stored_upload(io.BytesIO(document), max_size)


def test_an_upload_in_a_file_is_checked_as_a_whole_one_is_without_its_message_read() -> None:
    message_id = uuid.uuid4()
    for headers in ([["_id", message_id.bytes], ["h", b"v"]], {"_id": message_id.bytes}):
        document = bson.encode({"message": b"x" * 1000, "headers": headers, "key": b"k"})
        assert _stored(document) == check_upload(document, 1 << 20) == Upload(str(message_id), 1000)
    ours = b"".join(document_chunks((b"ab", b"cd"), 4, [("_id", message_id.bytes)], None))
    assert _stored(ours) == Upload(str(message_id), 4)


@pytest.mark.parametrize(
    ("document", "error", "problem"),
    [
        (bson.encode({"other": b"x"}), ValidationError, "^message: is required"),
        (bson.encode({"message": "text"}), ValidationError, "^message: must be a BSON binary"),
        (bson.encode({"message": b"x"}) + b"more", ValidationError, "its length says 20 bytes, it has 24"),
        (bson.encode({"message": b"x", "key": 7}), ValidationError, "^key: must be a BSON binary"),
        (bson.encode({"headers": [["h", "text"]], "message": b"x"}), ValidationError, r"^headers\[0\]"),
        (bson.encode({"message": b"x" * 11}), PayloadTooLarge, "exceeds the offload limit 10"),
    ],
)
def test_a_bad_upload_in_a_file_says_what_is_wrong(document: bytes, error: type[Exception], problem: str) -> None:
    with pytest.raises(error, match=problem):
        _stored(document, 10)
