"""The frontend's spans, ``publish`` and ``ack``, recorded without the SDK's tracer: the SDK's span objects (their
context, bounded attributes, locks and processor calls) cost about 140 µs of CPU for each recorded publish, taken
from the requests. A finished span here is one tuple of plain values in a queue; a thread turns the queue into the
SDK's ``ReadableSpan`` in batches and hands them to its OTLP/HTTP exporter, as the SDK's batch span processor would,
with the same ``OTEL_BSP_*`` settings."""

from __future__ import annotations

import collections
import logging
import os
import threading

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from hermes.domain.trace_context import valid_tracestate
from hermes.tasks import STOP_BOUND, NamedThread, joined

log = logging.getLogger(__name__)

# A finished span: its name, kind, trace id, span id and parent span id in hex (the parent "" for a root), whether
# the parent is the publisher's, the tracestate ("": none), start and end (ns since the epoch), attributes, and
# its error (None: none; "" an error without a description).
FinishedSpan = tuple[str, SpanKind, str, str, str, bool, str, int, int, dict[str, str | int], str | None]

# The SDK's batch span processor's settings and defaults
_DELAY_MS = ("OTEL_BSP_SCHEDULE_DELAY", 5000)
_QUEUE_SIZE = ("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
_BATCH_SIZE = ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def _setting(name_default: tuple[str, int]) -> int:
    name, default = name_default
    try:
        value = int(os.environ.get(name, default))
    except ValueError:
        value = 0
    if value <= 0:
        log.warning("%s=%r is not a positive integer: %d is used", name, os.environ.get(name), default)
        return default
    return value


class SpanBatches:
    """Finished spans, exported from a thread every ``OTEL_BSP_SCHEDULE_DELAY`` ms or as soon as a batch is full;
    beyond ``OTEL_BSP_MAX_QUEUE_SIZE`` waiting, the oldest are dropped (counted in a warning)."""

    def __init__(self, resource: Resource) -> None:
        self._exporter = OTLPSpanExporter()
        self._resource = resource
        self._scope = InstrumentationScope("hermes")
        self._delay = _setting(_DELAY_MS) / 1000
        self._queue_size = _setting(_QUEUE_SIZE)
        self._batch_size = min(_setting(_BATCH_SIZE), self._queue_size)
        self._queue: collections.deque[FinishedSpan] = collections.deque(maxlen=self._queue_size)
        self._dropped = 0
        self._wake = threading.Event()
        self._stopping = False
        self._thread = NamedThread(target=self._run, name="otel-publish-spans", daemon=True)
        self._thread.start()

    def add(self, span: FinishedSpan) -> None:
        """From the event loop: appended, the thread woken only for a full batch."""
        queue = self._queue
        if len(queue) == self._queue_size:
            self._dropped += 1
        queue.append(span)
        if len(queue) >= self._batch_size and not self._wake.is_set():
            self._wake.set()

    def close(self) -> None:
        """Exports what is left, for ``STOP_BOUND`` at most (a collector that does not answer holds no stop)."""
        self._stopping = True
        self._wake.set()
        joined(self._thread, STOP_BOUND, "the export of the publish spans")
        self._exporter.shutdown()  # type: ignore[no-untyped-call]

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self._delay)
            self._wake.clear()
            self._export()
        self._export()

    def _export(self) -> None:
        queue = self._queue
        while queue:
            batch = [self._readable(queue.popleft()) for _ in range(min(self._batch_size, len(queue)))]
            try:
                self._exporter.export(batch)  # logs its own failures
            except Exception:  # the thread must outlive an exporter's bug
                log.warning("exporting %d spans failed", len(batch), exc_info=True)
        if self._dropped:
            dropped, self._dropped = self._dropped, 0
            log.warning("%d spans dropped: more than OTEL_BSP_MAX_QUEUE_SIZE=%d waited", dropped, self._queue_size)

    def _readable(self, span: FinishedSpan) -> ReadableSpan:
        name, kind, trace_id, span_id, parent_id, remote, state, start, end, attributes, error = span
        trace = int(trace_id, 16)
        trace_state = TraceState.from_header([state]) if state and valid_tracestate(state) else None
        context = SpanContext(trace, int(span_id, 16), False, _SAMPLED, trace_state)
        parent = SpanContext(trace, int(parent_id, 16), remote, _SAMPLED, trace_state) if parent_id else None
        return ReadableSpan(
            name,
            context,
            parent,
            self._resource,
            attributes,
            kind=kind,
            status=Status(StatusCode.UNSET) if error is None else Status(StatusCode.ERROR, error or None),
            start_time=start,
            end_time=end,
            instrumentation_scope=self._scope,
        )
