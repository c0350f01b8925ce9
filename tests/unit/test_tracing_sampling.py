"""The frontend's spans under a sampler: what an unsampled publish carries on, and that it skips its ack span."""

from __future__ import annotations

import random
import sys

import pytest
from opentelemetry.sdk.trace.sampling import Decision

from hermes.domain.trace_context import valid_traceparent
from hermes.errors import UsageError
from hermes.telemetry import start_tracing
from hermes.telemetry.spans import Tracing

pytestmark = pytest.mark.unit

SAMPLED_PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def dropping(monkeypatch: pytest.MonkeyPatch) -> Tracing:
    """Records nothing of its own traces; follows a publisher's sampled one (parent-based)."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: given up at once
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0.05")
    return Tracing("frontend")


def test_an_unsampled_publish_carries_a_trace_context_and_records_nothing(dropping: Tracing) -> None:
    headers = {"content-type": "application/json"}
    assert dropping.publish("g.t", "id", headers) is None
    traceparent = headers["traceparent"]
    assert valid_traceparent(traceparent)
    assert not int(traceparent[-2:], 16) & 1  # not sampled, so neither are its deliveries
    assert dropping.ack("g.t", headers) is None
    dropping.close()


def test_a_publishers_sampled_trace_is_recorded(dropping: Tracing) -> None:
    headers = {"traceparent": SAMPLED_PARENT, "tracestate": "congo=t61rcWkgMzE"}
    published = dropping.publish("g.t", "id", headers)
    assert published is not None
    trace_id, span_id, flags = headers["traceparent"].split("-")[1:]
    assert (trace_id, flags) == ("4bf92f3577b34da6a3ce929d0e0e4736", "01")
    assert span_id != "00f067aa0ba902b7"  # the publish span's own
    assert headers["tracestate"] == "congo=t61rcWkgMzE"
    acked = dropping.ack("g.t", headers)
    assert acked is not None
    acked(None)
    published(201, True)
    dropping.close()


def test_tracing_without_the_sdk_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    assert start_tracing(False, "frontend") is None  # off: the SDK is not imported
    monkeypatch.setitem(sys.modules, "hermes.telemetry.spans", None)  # as if its packages were missing
    with pytest.raises(UsageError, match=r"--tracing needs the OpenTelemetry SDK: pip install 'hermes-broker\[otel\]'"):
        start_tracing(True, "frontend")


@pytest.mark.parametrize(
    ("sampler", "argument"),
    [("parentbased_traceidratio", "0.5"), ("traceidratio", "0.5"), ("always_on", ""), ("always_off", "")],
)
def test_a_new_trace_is_sampled_as_the_sdks_sampler_decides(
    monkeypatch: pytest.MonkeyPatch, sampler: str, argument: str
) -> None:
    """The frontend decides a new trace without asking the SDK for the usual samplers: the same decisions."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", argument)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0.05")
    tracing = Tracing("frontend")
    sdk_sampler, decisions = tracing._sampler, set()
    for _ in range(200):
        headers: dict[str, str] = {}
        published = tracing.publish("g.t", "id", headers)
        trace_id, flags = headers["traceparent"].split("-")[1::2]
        expected = sdk_sampler.should_sample(None, int(trace_id, 16), "publish").decision is Decision.RECORD_AND_SAMPLE
        assert (published is not None, bool(int(flags, 16) & 1)) == (expected, expected)
        decisions.add(expected)
        if published is not None:
            published(201, True)
    assert len(decisions) == (2 if argument else 1)  # a ratio of one half: both decisions seen
    tracing.close()


def test_new_traces_draw_ids_of_their_own_past_each_draw(dropping: Tracing, monkeypatch: pytest.MonkeyPatch) -> None:
    """New traces' ids are cut from random digits drawn for many at once: every publish has ids of its own, across
    draws, and a draw with 16 zeros in a row (an all-zero span id or half of a trace id) is drawn again."""
    drawn = 0

    def urandom(size: int) -> bytes:
        nonlocal drawn
        drawn += 1
        return bytes(size) if drawn == 1 else random.randbytes(size)  # the first all zeros

    monkeypatch.setattr("hermes.telemetry.spans.os.urandom", urandom)
    traceparents = []
    for _ in range(3 * 256):
        headers: dict[str, str] = {}
        dropping.publish("g.t", "id", headers)
        traceparents.append(headers["traceparent"])
    assert drawn == 4  # the zeros, then 3 draws of 256 traces each
    assert all(valid_traceparent(t) and "0" * 16 not in t for t in traceparents)
    assert len({t[3:35] for t in traceparents}) == len({t[36:52] for t in traceparents}) == 3 * 256
    dropping.close()
