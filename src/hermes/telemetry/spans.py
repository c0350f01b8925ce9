"""The spans of publishes, the broker's acks, deliveries and their attempts, exported by the OpenTelemetry SDK's
exporter over OTLP/HTTP, configured by its standard ``OTEL_*`` environment variables (endpoint, headers, sampler,
batching). Each role that traces has its own ``Tracing``."""

from __future__ import annotations

import contextlib
import functools
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, Decision, ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from hermes.domain.trace_context import TRACEPARENT, TRACESTATE, valid_traceparent
from hermes.telemetry.publish_spans import SpanBatches

# Span attributes: OpenTelemetry's semantic conventions where they have a name, Hermes' otherwise.
TOPIC = "messaging.destination.name"
MESSAGE_ID = "messaging.message.id"
BATCH_SIZE = "messaging.batch.message_count"
HTTP_STATUS = "http.response.status_code"
ERROR_TYPE = "error.type"
SUBSCRIPTION = "hermes.subscription"
RETRY_COUNT = "hermes.retry_count"
DELIVERY_STATUS = "hermes.delivery.status"  # DELIVERED or DISCARDED
REASON = "hermes.reason"

_W3C = TraceContextTextMapPropagator()
# The flags of a trace started here: its trace id random (W3C Trace Context level 2), sampled or not
_RANDOM_UNSAMPLED, _RANDOM_SAMPLED = "02", "03"
_NO_ID = "0" * 16  # an all-zero span id (or half of a trace id) is invalid
_SAMPLED_DIGITS = "13579bdf"  # a flags' last hex digit when its sampled bit is set
_IDS_DIGITS = 48  # a new trace's id (32 hex digits) and its publish span's id (16)
_TRACES_PER_DRAW = 256
# above any 16 hex digits: a bound of 2^64 (every trace sampled)
_ABOVE_ALL = "g"


class Tracing:
    """One role's tracing: the frontend's spans (``publish``, ``ack``) recorded lean and exported in batches by
    ``publish_spans.SpanBatches``; the consumers' by the SDK's tracer and its batch span processor. ``close``
    exports what is left."""

    def __init__(self, role: str) -> None:
        resource = _Resource(
            Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "hermes"), "hermes.role": role})
        )
        # its sampler: OTEL_TRACES_SAMPLER, default parent-based always on
        self._provider = TracerProvider(resource=resource)
        self._sampler = self._provider.sampler
        self._new_trace_bound = _new_trace_bound(self._sampler)
        self._follows_parent = _follows_parent(self._sampler)
        if role == "frontend":
            self._spans: SpanBatches | None = SpanBatches(resource)
        else:
            self._spans = None
            self._provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self._tracer = self._provider.get_tracer("hermes")
        self._ids, self._at = "", 0  # new traces' ids: see _draw

    def _draw(self) -> str:
        """Random hex digits for the ids of the next new traces (a trace id and a span id each), drawn with one
        system call per ``_TRACES_PER_DRAW`` and formatted once, sampled or not: ``publish`` and ``ack`` of an
        unsampled publish took 0.83 µs in-process with ``random.randbytes(24).hex()`` per publish, 0.54 so. Drawn
        again in the one case in 2^50 with 16 zeros in a row somewhere, so that no span id and no half of a trace
        id is all zeros (invalid, and not random)."""
        ids = _NO_ID
        while _NO_ID in ids:
            ids = os.urandom(_IDS_DIGITS // 2 * _TRACES_PER_DRAW).hex()
        self._ids = ids
        return ids

    def close(self) -> None:
        if self._spans is not None:
            self._spans.close()
        self._provider.shutdown()

    # --- the frontend ---

    def publish(
        self, topic: str, message_id: str, headers: MutableMapping[str, str]
    ) -> Callable[[int, bool], None] | None:
        """Starts a publish's span, in the publisher's trace if ``headers`` (the request's) carry a valid
        traceparent, else in a new one; its traceparent replaces theirs, so the message carries it to its
        deliveries (their tracestate goes unchanged). Returns what ends it, with the response's status and whether
        the topic is known (a stranger's made-up name does not stay the span's name); None when the sampler
        dropped it. An unsampled publish costs its random ids and its traceparent, nothing else."""
        parent = headers.get(TRACEPARENT)
        bound = self._new_trace_bound
        if parent is None and bound is not None:  # the usual case: a new trace, decided by its id alone
            ids, at = self._ids, self._at
            if at == len(ids):
                ids, at = self._draw(), 0
            self._at = at + _IDS_DIGITS
            if ids[at + 16 : at + 32] >= bound:  # decided before anything is formatted
                headers[TRACEPARENT] = f"00-{ids[at : at + 32]}-{ids[at + 32 : at + 48]}-{_RANDOM_UNSAMPLED}"
                return None
            trace_id, span_id, parent_id, state = ids[at : at + 32], ids[at + 32 : at + 48], "", ""
            headers[TRACEPARENT] = f"00-{trace_id}-{span_id}-{_RANDOM_SAMPLED}"
        elif parent is not None and valid_traceparent(parent):
            trace_id, parent_id = parent[3:35], parent[36:52]
            flags = int(parent[53:55], 16)
            sampled = self._child_sampled(topic, message_id, trace_id, flags & 1 == 1, headers)
            span_id = _span_id()
            headers[TRACEPARENT] = f"00-{trace_id}-{span_id}-{flags & ~1 | sampled:02x}"
            state = headers.get(TRACESTATE, "")
            if not sampled:
                return None
        else:  # a new trace in place of an invalid traceparent, or under a sampler of another kind
            if parent is not None:  # the spec: a tracestate is not read without its valid traceparent
                headers.pop(TRACESTATE, None)
            ids = random.randbytes(24).hex()
            trace_id, span_id, parent_id, state = ids[:32], ids[32:], "", ""
            # the usual samplers: hex digits compared, no call into the SDK
            sampled = ids[16:32] < bound if bound is not None else self._sdk_sampled(None, topic, message_id, trace_id)
            if trace_id[16:] == _NO_ID or span_id == _NO_ID:  # one in 2^64: drawn again
                return self.publish(topic, message_id, headers)
            headers[TRACEPARENT] = f"00-{trace_id}-{span_id}-{_RANDOM_SAMPLED if sampled else _RANDOM_UNSAMPLED}"
            if not sampled:
                return None
        return functools.partial(
            self._published, topic, message_id, trace_id, span_id, parent_id, state, time.time_ns()
        )

    def ack(self, topic: str, headers: Mapping[str, str]) -> Callable[[Exception | None], None] | None:
        """Starts the span of the broker's ack of a message being produced, in its publish's trace (``headers``:
        the request's, with the publish span's traceparent). Returns what ends it, with the broker's error if any;
        None when the publish was not sampled (nor is its ack, then)."""
        traceparent = headers.get(TRACEPARENT)
        # the sampled flag, the last bit of the flags Tracing.publish wrote (version 00: 55 characters)
        if traceparent is None or traceparent[54] not in _SAMPLED_DIGITS:
            return None
        return functools.partial(
            self._acked, topic, traceparent[3:35], traceparent[36:52], headers.get(TRACESTATE, ""), time.time_ns()
        )

    def _published(
        self,
        topic: str,
        message_id: str,
        trace_id: str,
        span_id: str,
        parent_id: str,
        state: str,
        start: int,
        status: int,
        known: bool,
    ) -> None:
        assert self._spans is not None
        attributes: dict[str, str | int] = {TOPIC: topic, MESSAGE_ID: message_id, HTTP_STATUS: status}
        self._spans.add(
            (
                f"publish {topic}" if known else "publish",
                SpanKind.SERVER,
                trace_id,
                span_id,
                parent_id,
                True,
                state,
                start,
                time.time_ns(),
                attributes,
                "" if status >= 500 else None,
            )
        )

    def _acked(
        self, topic: str, trace_id: str, parent_id: str, state: str, start: int, error: Exception | None
    ) -> None:
        assert self._spans is not None
        self._spans.add(
            (
                f"ack {topic}",
                SpanKind.PRODUCER,
                trace_id,
                _span_id(),
                parent_id,
                False,
                state,
                start,
                time.time_ns(),
                {TOPIC: topic},
                None if error is None else str(error),
            )
        )

    def _child_sampled(
        self, topic: str, message_id: str, trace_id: str, parent_sampled: bool, headers: Mapping[str, str]
    ) -> bool:
        """Whether a publish in the publisher's trace is recorded: as the parent was, under the usual parent-based
        samplers; by the trace id under a ratio that ignores parents; else as the SDK's sampler decides."""
        if self._follows_parent:
            return parent_sampled
        if self._new_trace_bound is not None:
            return trace_id[16:] < self._new_trace_bound
        return self._sdk_sampled(_W3C.extract(headers), topic, message_id, trace_id)

    def _sdk_sampled(self, parent: Context | None, topic: str, message_id: str, trace_id: str) -> bool:
        attributes = {TOPIC: topic, MESSAGE_ID: message_id}
        result = self._sampler.should_sample(parent, int(trace_id, 16), "publish", SpanKind.SERVER, attributes)
        return result.decision is not Decision.DROP

    # --- the consumers ---

    @contextlib.contextmanager
    def delivery(
        self, subscription: str, topic: str, message_ids: Sequence[str], contexts: Sequence[Mapping[str, str]]
    ) -> Iterator[Span]:
        """A delivery of one message, or of a batch (``contexts``: each message's propagated headers), from its
        first attempt until it is delivered or discarded: the current span of its attempts. A batch's span is in
        its first message's trace and links those of the others."""
        attributes: dict[str, str | int] = {TOPIC: topic, SUBSCRIPTION: subscription}
        if len(message_ids) == 1:
            attributes[MESSAGE_ID] = message_ids[0]
        else:
            attributes[BATCH_SIZE] = len(message_ids)
        links = [Link(context) for headers in contexts[1:] if (context := _span_context(headers)) is not None]
        with self._tracer.start_as_current_span(
            f"deliver {subscription}", _W3C.extract(contexts[0]), SpanKind.CONSUMER, attributes, links
        ) as span:
            yield span

    @staticmethod
    def delivered(span: Span, reason: str | None) -> None:
        """How the delivery ended: delivered (no ``reason``) or discarded."""
        span.set_attribute(DELIVERY_STATUS, "DELIVERED" if reason is None else "DISCARDED")
        if reason is not None:
            span.set_attribute(REASON, reason)
            span.set_status(Status(StatusCode.ERROR, reason))

    @contextlib.contextmanager
    def attempt(self, subscription: str, retry_count: int, headers: MutableMapping[str, str]) -> Iterator[Span]:
        """One request of a delivery, in the delivery's span; its context goes in the request's ``headers``."""
        with self._tracer.start_as_current_span(
            f"send {subscription}",
            kind=SpanKind.CLIENT,
            attributes={SUBSCRIPTION: subscription, RETRY_COUNT: retry_count},
        ) as span:
            _W3C.inject(headers)
            yield span

    @staticmethod
    def attempted(span: Span, status: int | None, failure: str | None) -> None:
        """The subscriber's answer (``status``), or why there was none."""
        if status is not None:
            span.set_attribute(HTTP_STATUS, status)
        if failure is not None or (status is not None and status >= 400):
            span.set_attribute(ERROR_TYPE, failure or str(status))
            span.set_status(StatusCode.ERROR)


def _new_trace_bound(sampler: Sampler) -> str | None:
    """The bound (16 hex digits) under which the low 64 bits of a new trace's id have the trace sampled, for the
    samplers that decide by the trace id alone (``OTEL_TRACES_SAMPLER`` ratio, on or off, parent-based or not);
    None for others. Hex digits of one length compare as the numbers they write."""
    root = sampler._root if isinstance(sampler, ParentBased) else sampler  # the SDK has no accessor
    if isinstance(root, TraceIdRatioBased):
        return _ABOVE_ALL if root.bound >= 1 << 64 else f"{root.bound:016x}"
    if root is ALWAYS_ON or root is ALWAYS_OFF:
        return _ABOVE_ALL if root is ALWAYS_ON else ""
    return None


def _follows_parent(sampler: Sampler) -> bool:
    """Whether ``sampler`` samples a child of a remote parent as the parent was (parent-based, the default)."""
    return (
        isinstance(sampler, ParentBased)
        and sampler._remote_parent_sampled is ALWAYS_ON
        and sampler._remote_parent_not_sampled is ALWAYS_OFF
    )


def _span_id() -> str:
    span_id = random.randbytes(8).hex()
    return span_id if span_id != _NO_ID else _span_id()


class _Resource(Resource):
    """The SDK's resource, its hash computed once: the exporter hashes it for every span, the SDK's hash a JSON
    dump of its attributes each time (a fifth of the export's CPU), and they never change."""

    def __init__(self, resource: Resource) -> None:
        super().__init__(resource.attributes, resource.schema_url)
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash


def _span_context(headers: Mapping[str, str]) -> trace.SpanContext | None:
    context = trace.get_current_span(_W3C.extract(headers)).get_span_context()
    return context if context.is_valid else None
