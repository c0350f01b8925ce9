"""W3C traceparent validation and the traceparent of a delivery attempt."""

from __future__ import annotations

import pytest

from hermes.domain.trace_context import child_traceparent, valid_traceparent, valid_tracestate

pytestmark = pytest.mark.unit

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    "value",
    [
        PARENT,
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",  # not sampled
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later",  # a later version may add fields
    ],
)
def test_valid_traceparents(value: str) -> None:
    assert valid_traceparent(value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "garbage",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # invalid trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # invalid parent id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # the forbidden version
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  # version 00 has four fields
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
    ],
)
def test_invalid_traceparents(value: str) -> None:
    assert not valid_traceparent(value)


def test_a_child_is_a_new_span_of_the_same_trace_with_the_same_flags() -> None:
    children = {child_traceparent(PARENT) for _ in range(100)}
    assert len(children) == 100
    for child in children:
        version, trace_id, span_id, flags = child.split("-")
        assert span_id != "00f067aa0ba902b7"
        assert (version, trace_id, flags) == ("00", "4bf92f3577b34da6a3ce929d0e0e4736", "01")
        assert valid_traceparent(child)
    unsampled = child_traceparent(PARENT[:-2] + "00")
    assert unsampled.endswith("-00")


def test_tracestate_within_the_specs_limits() -> None:
    assert valid_tracestate("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
    assert not valid_tracestate("a=" + "x" * 10_000)
    assert not valid_tracestate("a=b\r\nInjected: yes")
