"""CloudEvents read, checked and written again (hermes.domain.cloudevents), on the specifications' own examples:
the JSON format's events and batch, the HTTP binding's binary-mode request and its percent-encoding example."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from hermes.domain.cloudevents import BATCH, STRUCTURED, binary_headers, read_events, structured
from hermes.domain.message import parse_kafka_headers
from hermes.errors import UnsupportedMediaType, ValidationError
from hermes.frontend.cloudevents import _EventsAnswer
from hermes.frontend.publishing import PublishResult

THRIFT = base64.b64encode(b"\x0b\x00\x01\x00\x00\x00\x03abc\x00").decode()
# The JSON format's examples (section 3): binary data, XML text, JSON data
SPEC_BINARY = {
    "specversion": "1.0",
    "type": "com.example.someevent",
    "source": "/mycontext",
    "id": "A234-1234-1234",
    "time": "2018-04-05T17:31:00Z",
    "comexampleextension1": "value",
    "comexampleothervalue": 5,
    "datacontenttype": "application/vnd.apache.thrift.binary",
    "data_base64": THRIFT,
}
SPEC_XML = {**SPEC_BINARY, "datacontenttype": "application/xml", "data": '<much wow="xml"/>'}
del SPEC_XML["data_base64"]
SPEC_JSON = {
    **SPEC_XML,
    "datacontenttype": "application/json",
    "data": {"appinfoA": "abc", "appinfoB": 123, "appinfoC": True},
}
# The HTTP binding's binary-mode example (section 3.1.4)
SPEC_HEADERS = {
    "ce-specversion": "1.0",
    "ce-type": "com.example.someevent",
    "ce-time": "2018-04-05T03:56:24Z",
    "ce-id": "1234-1234-1234",
    "ce-source": "/mycontext/subcontext",
    "content-type": "application/json; charset=utf-8",
}


def one(body: Any, content_type: str = STRUCTURED) -> Any:
    (event,) = read_events(orjson.dumps(body), {"content-type": content_type})
    return event


def test_the_json_formats_examples_are_kept_as_the_kafka_binding_writes_them_and_written_back_alike() -> None:
    thrift = one(SPEC_BINARY)
    assert thrift.data == base64.b64decode(THRIFT)
    headers = dict(thrift.kafka_headers())
    assert headers["ce_id"] == b"A234-1234-1234" and headers["content-type"] == b"application/vnd.apache.thrift.binary"
    assert headers["ce_comexampleothervalue"] == b"5"  # an Integer in its canonical string form
    expected = {**SPEC_BINARY, "comexampleothervalue": "5"}
    assert orjson.loads(structured(thrift.attributes, thrift.data)) == expected

    xml = one(SPEC_XML)
    assert xml.data == b'<much wow="xml"/>'
    assert orjson.loads(structured(xml.attributes, xml.data))["data"] == '<much wow="xml"/>'

    json = one(SPEC_JSON)
    assert orjson.loads(json.data) == SPEC_JSON["data"]
    assert orjson.loads(structured(json.attributes, json.data)) == {**SPEC_JSON, "comexampleothervalue": "5"}

    # what a consumer reads from those headers
    _, _, _, _, attributes = parse_kafka_headers(thrift.kafka_headers())
    assert attributes == thrift.attributes


def test_a_batch_is_its_events_in_order() -> None:
    events = read_events(orjson.dumps([SPEC_BINARY, SPEC_JSON, SPEC_XML]), {"content-type": BATCH})
    assert [e.attributes["datacontenttype"] for e in events] == [
        "application/vnd.apache.thrift.binary",
        "application/json",
        "application/xml",
    ]
    assert read_events(b"[]", {"content-type": BATCH}) == []  # the binding allows an empty batch


def test_the_http_bindings_binary_example_and_its_percent_encoding() -> None:
    body = b'{"appinfoA": "abc"}'
    (event,) = read_events(body, {**SPEC_HEADERS, "ce-comexampleextension1": "Euro%20%E2%82%AC%20%F0%9F%98%80"})
    assert event.data == body
    assert event.attributes["datacontenttype"] == "application/json; charset=utf-8"
    assert event.attributes["comexampleextension1"] == "Euro € 😀"
    written = binary_headers(event.attributes)
    assert written["ce-comexampleextension1"] == "Euro%20%E2%82%AC%20%F0%9F%98%80"
    assert {k: v for k, v in written.items() if k != "ce-comexampleextension1"} == {
        k: v for k, v in SPEC_HEADERS.items() if k != "content-type"
    }


def test_data_without_a_datacontenttype_is_json_and_goes_back_as_data() -> None:
    body = {k: v for k, v in SPEC_JSON.items() if k != "datacontenttype"}
    event = one(body)
    assert "datacontenttype" not in event.attributes
    assert orjson.loads(structured(event.attributes, event.data))["data"] == SPEC_JSON["data"]
    plain = structured({"id": "1", "source": "/s", "specversion": "1.0", "type": "t", "datacontenttype": "x/y"}, b"ab")
    assert orjson.loads(plain)["data_base64"] == "YWI="  # bytes of no text or JSON type


def test_an_attribute_name_another_kafka_producer_wrote_never_becomes_a_header_or_the_data() -> None:
    assert binary_headers({"id": "1", "bad name\r\nx": "v", "type": "t"}) == {"ce-id": "1", "ce-type": "t"}
    assert orjson.loads(structured({"id": "1", "data": "x", "data_base64": "eA=="}, b"")) == {"id": "1"}


def without(name: str, event: dict[str, Any] = SPEC_JSON) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k != name}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (without("id"), "id"),
        (without("source"), "source"),
        (without("type"), "type"),
        (without("specversion"), "specversion"),
        ({**SPEC_JSON, "id": ""}, "id"),
        ({**SPEC_JSON, "specversion": "0.3"}, "specversion"),
        ({**SPEC_JSON, "type": 7}, "type"),
        ({**SPEC_JSON, "time": "yesterday"}, "time"),
        ({**SPEC_JSON, "time": "2018-02-30T17:31:00Z"}, "time"),
        ({**SPEC_JSON, "datacontenttype": "json"}, "datacontenttype"),
        ({**SPEC_JSON, "dataschema": "schemas/order"}, "dataschema"),
        ({**SPEC_JSON, "subject": ""}, "subject"),
        ({**SPEC_JSON, "Bad_Name": "x"}, "Bad_Name"),
        ({**SPEC_JSON, "comexampleobject": {"a": 1}}, "comexampleobject"),
        ({**SPEC_JSON, "comexamplebig": 2**31}, "comexamplebig"),
        ({**SPEC_JSON, "comexampletext": "a\nb"}, "comexampletext"),
        ({**SPEC_JSON, "data_base64": THRIFT}, "data_base64"),
        ({**SPEC_BINARY, "data_base64": "not base64!"}, "data_base64"),
        ({**SPEC_XML, "data": {"a": 1}}, "data"),
        ([SPEC_JSON], "body"),
    ],
)
def test_a_structured_event_against_the_specification_is_refused_naming_the_attribute(body: Any, field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        one(body)
    assert refused.value.field == field or refused.value.message.startswith(field), refused.value.message


@pytest.mark.parametrize(
    ("headers", "body", "field"),
    [
        (without("ce-id", SPEC_HEADERS), b"{}", "ce-id"),
        ({**SPEC_HEADERS, "ce-specversion": "1.1"}, b"{}", "ce-specversion"),
        ({**SPEC_HEADERS, "ce-time": "2018-04-05"}, b"{}", "ce-time"),
        ({**SPEC_HEADERS, "ce-x_y": "1"}, b"{}", "ce-x_y"),
        ({**SPEC_HEADERS, "ce-datacontenttype": "text/plain"}, b"{}", "ce-datacontenttype"),
        ({**SPEC_HEADERS, "ce-data": "x"}, b"{}", "ce-data"),
        ({**SPEC_HEADERS, "ce-subject": "%FF"}, b"{}", "ce-subject"),
        (SPEC_HEADERS, b"{not json", "body"),
        ({**SPEC_HEADERS, "content-type": "nonsense"}, b"{}", "Content-Type"),
    ],
)
def test_a_binary_event_against_the_specification_is_refused_naming_the_header(
    headers: dict[str, str], body: bytes, field: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        read_events(body, headers)
    assert refused.value.field == field, refused.value.message


def test_a_request_in_no_mode_is_refused_as_unsupported() -> None:
    with pytest.raises(UnsupportedMediaType, match="ce-specversion"):
        read_events(b"{}", {"content-type": "application/json"})
    with pytest.raises(ValidationError, match="JSON array"):
        read_events(b"{}", {"content-type": BATCH})
    with pytest.raises(ValidationError, match=r"\[1\]\.time"):
        read_events(orjson.dumps([SPEC_JSON, {**SPEC_JSON, "time": "now"}]), {"content-type": BATCH})


def test_a_request_of_several_events_is_answered_once_every_event_is_or_with_the_first_error() -> None:
    answers: list[PublishResult | Exception] = []
    joint = _EventsAnswer(answers.append, "first", 3)
    joint(PublishResult("first", True))
    joint(PublishResult("second", False))  # accepted, journaled: the request is answered 202
    assert answers == []
    joint(PublishResult("third", True))
    assert answers == [PublishResult("first", False)]

    answers.clear()
    failing = _EventsAnswer(answers.append, "first", 2)
    refused = ValidationError("the broker refused it")
    failing(refused)
    failing(PublishResult("second", True))
    assert answers == [refused] and failing.answered
