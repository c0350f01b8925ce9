"""W3C Trace Context (https://www.w3.org/TR/trace-context/): the ``traceparent`` and ``tracestate`` headers a
publisher may send. They travel with the message through Kafka, whether tracing is on or off, and each delivery
attempt sends a ``traceparent`` of its own: the same trace, a span id of its own, the same flags."""

from __future__ import annotations

import os
import re

# HTTP header names, lower-case as the frontend keys a request's headers
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

# version-trace id-parent id-flags; a later version may append fields after a dash
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?\Z")
_INVALID_TRACE_ID = "0" * 32
_INVALID_PARENT_ID = "0" * 16
# the spec's limit on the header (32 members of at most 256 characters, with commas); longer ones are dropped
_TRACESTATE_MAX = 32 * 257


def valid_traceparent(value: str) -> bool:
    """Whether ``value`` is a traceparent this can carry on: an invalid one is dropped, as the spec says."""
    match = _TRACEPARENT.match(value)
    if match is None:
        return False
    version, trace_id, parent_id, _, rest = match.groups()
    if version == "ff" or trace_id == _INVALID_TRACE_ID or parent_id == _INVALID_PARENT_ID:
        return False
    return version != "00" or rest is None  # version 00 has exactly four fields


def valid_tracestate(value: str) -> bool:
    return len(value) <= _TRACESTATE_MAX and value.isascii() and value.isprintable()


def child_traceparent(parent: str) -> str:
    """A traceparent (version 00) of a new span in ``parent``'s trace, with its flags (a valid ``parent``)."""
    return f"00-{parent[3:35]}-{os.urandom(8).hex()}-{parent[53:55]}"
