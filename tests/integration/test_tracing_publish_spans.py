"""The frontend's spans, recorded without the SDK's tracer (``telemetry/publish_spans.py``) and exported through its
OTLP/HTTP exporter to a real receiver: what a whole Hermes does not show cheaply (the publisher's tracestate, errors,
a publisher's unsampled trace, an invalid traceparent, a full queue)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from hermes.telemetry.spans import Tracing
from tests.support.otlp import ERROR, PRODUCER, SERVER, OtlpReceiver

pytestmark = pytest.mark.integration

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


@pytest.fixture
def tracing(otlp: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> Iterator[Tracing]:
    """The default sampler, parent-based always on; batches every 50 ms."""
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    with otlp.exporting():
        tracing = Tracing("frontend")
    yield tracing
    tracing.close()


def test_a_recorded_publish_and_its_ack_carry_the_publishers_tracestate_and_their_errors(
    otlp: OtlpReceiver, tracing: Tracing
) -> None:
    trace_id = TRACE[:-4] + "0001"
    headers = {"traceparent": f"00-{trace_id}-{PARENT}-01", "tracestate": "congo=t61rcWkgMzE"}
    published = tracing.publish("g.t", "id-1", headers)
    acked = tracing.ack("g.t", headers)
    assert published is not None and acked is not None
    acked(RuntimeError("the broker refused it"))
    published(503, True)

    publish, ack = sorted(otlp.wait_for(2, trace_id), key=lambda span: span.kind)
    assert (publish.name, publish.kind, publish.parent_span_id) == ("publish g.t", SERVER, PARENT)
    assert publish.status == ERROR  # a 5xx
    assert publish.attributes == {
        "messaging.destination.name": "g.t",
        "messaging.message.id": "id-1",
        "http.response.status_code": 503,
    }
    assert headers["traceparent"] == f"00-{trace_id}-{publish.span_id}-01"  # what the message carries
    assert (ack.name, ack.kind, ack.parent_span_id) == ("ack g.t", PRODUCER, publish.span_id)
    assert (ack.status, ack.status_message) == (ERROR, "the broker refused it")
    assert {publish.trace_state, ack.trace_state} == {"congo=t61rcWkgMzE"}
    assert (publish.role, publish.service) == ("frontend", "hermes")


def test_a_publishers_unsampled_trace_is_not_recorded_and_keeps_its_flags(tracing: Tracing) -> None:
    headers = {"traceparent": f"00-{TRACE}-{PARENT}-02"}  # random trace id, not sampled
    assert tracing.publish("g.t", "id-2", headers) is None
    _, trace_id, span_id, flags = headers["traceparent"].split("-")
    assert (trace_id, flags) == (TRACE, "02")
    assert span_id not in (PARENT, "0" * 16)
    assert tracing.ack("g.t", headers) is None


def test_an_invalid_traceparent_starts_a_new_trace_without_its_tracestate(otlp: OtlpReceiver, tracing: Tracing) -> None:
    headers = {"traceparent": f"00-{'0' * 32}-{PARENT}-01", "tracestate": "congo=t61rcWkgMzE"}
    published = tracing.publish("g.t", "id-3", headers)
    assert published is not None
    assert "tracestate" not in headers  # the spec: not carried without its traceparent
    _, trace_id, span_id, flags = headers["traceparent"].split("-")
    assert trace_id != "0" * 32
    assert flags == "03"  # sampled, its trace id random
    published(201, True)

    [publish] = otlp.wait_for(1, trace_id)
    assert (publish.span_id, publish.parent_span_id, publish.trace_state) == (span_id, "", "")


def test_spans_beyond_the_queue_are_dropped_oldest_first_with_a_warning(
    otlp: OtlpReceiver, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "2")
    with otlp.exporting():
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")  # nothing exported before close
        tracing = Tracing("frontend")
    trace_ids = []
    for n in range(5):
        headers = {"traceparent": f"00-{TRACE[:-1]}{n}-{PARENT}-01"}
        published = tracing.publish("g.t", f"id-{n}", headers)
        assert published is not None
        published(201, True)
        trace_ids.append(headers["traceparent"][3:35])
    with caplog.at_level(logging.WARNING, logger="hermes.telemetry.publish_spans"):
        tracing.close()

    exported = {span.trace_id for span in otlp.spans()}
    assert [trace_id in exported for trace_id in trace_ids] == [False, False, False, True, True]
    assert "3 spans dropped: more than OTEL_BSP_MAX_QUEUE_SIZE=2 waited" in caplog.text
