"""Reading an offloaded document's message field from a file, fields skipped by their sizes: the consumers' fetched
documents and the frontend's spooled uploads; the stored documents' ``metadata`` element, as hop-client reads it."""

from __future__ import annotations

import io
import re
import struct
import uuid

import bson
import pytest
from bson.binary import Binary
from bson.int64 import Int64
from bson.objectid import ObjectId

from hermes.domain.bson_document import element_spans, find_message
from hermes.errors import HermesError, PayloadTooLarge, ValidationError
from hermes.offload.documents import Upload, check_stored_upload, check_upload, document_chunks, with_metadata


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


STORED_AT = 1_763_877_600_123


def test_the_frontends_own_documents_and_old_binary_subtype() -> None:
    ours = b"".join(document_chunks((b"ab", b"cd"), 4, [("h", b"v"), ("h", b"w")], b"key", STORED_AT))
    assert bson.decode(ours) == {
        "message": b"abcd",
        "headers": [["h", b"v"], ["h", b"w"]],
        "key": b"key",
        "metadata": {"headers": [["h", b"v"], ["h", b"w"]], "timestamp": STORED_AT, "key": b"key"},
    }
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
    pairs = (("_id", message_id.bytes), ("h", b"v"))
    for headers in ([list(pair) for pair in pairs], dict(pairs)):
        document = bson.encode({"message": b"x" * 1000, "headers": headers, "key": b"k"})
        assert _stored(document) == check_upload(document, 1 << 20) == Upload(str(message_id), 1000, pairs, b"k")
    ours = b"".join(document_chunks((b"ab", b"cd"), 4, [("_id", message_id.bytes)], None, STORED_AT))
    assert _stored(ours).message_id == str(message_id)
    assert _stored(ours).metadata == check_upload(ours, 1 << 20).metadata != ()  # found, to be replaced


def _stored_document(document: bytes, upload: Upload, chunk_size: int) -> bytes:
    chunks = (document[i : i + chunk_size] for i in range(0, len(document), chunk_size))
    return b"".join(with_metadata(chunks, len(document), upload, STORED_AT))


def _served(document: bytes, upload: Upload, chunk_size: int) -> dict[str, object]:
    stored = _stored_document(document, upload, chunk_size)
    assert read_message(stored) == bson.decode(stored)["message"]
    assert len(element_spans(io.BytesIO(stored), b"metadata")) == 1
    return bson.decode(stored)


@pytest.mark.parametrize("chunk_size", [1, 3, 1000, 1 << 20], ids=lambda size: f"chunks of {size}")
def test_an_upload_is_stored_with_the_metadata_hop_client_reads(chunk_size: int) -> None:
    headers = [["_id", uuid.uuid4().bytes], ["_format", b"blob"], ["_format", b"twice"]]
    document = bson.encode({"message": b"x" * 100, "headers": headers, "key": b"k", "extra": "kept"})
    served = _served(document, check_upload(document, 1 << 20), chunk_size)
    assert served == {
        "message": b"x" * 100,
        "headers": headers,
        "key": b"k",
        "extra": "kept",
        "metadata": {"headers": headers, "timestamp": STORED_AT, "key": b"k"},
    }
    keyless = bson.encode({"headers": {"h": b"v"}, "message": b"y"})
    metadata = _served(keyless, _stored(keyless), chunk_size)["metadata"]
    assert metadata == {"headers": [["h", b"v"]], "timestamp": STORED_AT}


@pytest.mark.parametrize("chunk_size", [1, 7, 1 << 20], ids=lambda size: f"chunks of {size}")
def test_a_downloaded_document_uploaded_again_gets_the_services_metadata_in_place_of_its_own(chunk_size: int) -> None:
    downloaded = b"".join(document_chunks((b"body",), 4, [("h", b"v")], None, 1))
    elements = bson.encode({"metadata": {"x": 1}, "message": b"m", "metadata2": 2, "metadata ": 3})[4:-1]
    elements += bson.encode({"metadata": "again"})[4:-1]  # a second element of that name
    twice = struct.pack("<i", 4 + len(elements) + 1) + elements + b"\x00"
    for document in (downloaded, twice):
        upload = _stored(document)
        served = _served(document, upload, chunk_size)
        assert served["metadata"] == {"headers": [list(h) for h in upload.headers], "timestamp": STORED_AT}
    assert _served(twice, _stored(twice), chunk_size) == {
        "message": b"m",
        "metadata2": 2,
        "metadata ": 3,
        "metadata": {"headers": [], "timestamp": STORED_AT},
    }


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
