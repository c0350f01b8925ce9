"""The spans of publishes, the broker's acks, deliveries and their attempts, exported by the OpenTelemetry SDK
over OTLP/HTTP, configured by its standard ``OTEL_*`` environment variables (endpoint, headers, sampler,
batching). Each role that traces has its own ``Tracing``."""

from __future__ import annotations

import contextlib
import functools
import os
import random
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, Decision, ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from hermes.domain.trace_context import TRACEPARENT

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
# The flags of a trace dropped at its start: not sampled, its trace id random (W3C Trace Context level 2)
_RANDOM_UNSAMPLED = f"{TraceFlags.RANDOM_TRACE_ID:02x}"
_LOW_64_BITS = (1 << 64) - 1  # the part of a trace id the ratio sampler decides by


class Tracing:
    """One role's tracer provider and its batch span processor; ``close`` exports what is left."""

    def __init__(self, role: str) -> None:
        resource = _Resource(
            Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "hermes"), "hermes.role": role})
        )
        self._ids = _ChosenTraceIds()
        # its sampler: OTEL_TRACES_SAMPLER, default parent-based always on
        self._provider = TracerProvider(resource=resource, id_generator=self._ids)
        self._sampler = self._provider.sampler
        self._new_trace_bound = _new_trace_bound(self._sampler)
        self._provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self._tracer = self._provider.get_tracer("hermes")

    def close(self) -> None:
        self._provider.shutdown()

    # --- the frontend ---

    def publish(
        self, topic: str, message_id: str, headers: MutableMapping[str, str]
    ) -> Callable[[int, bool], None] | None:
        """Starts a publish's span, in the publisher's trace if ``headers`` (the request's) carry one, else in a
        new one; its traceparent replaces theirs, so the message carries it to its deliveries (their tracestate
        goes unchanged). Returns what ends it, with the response's status and whether the topic is known (a
        stranger's made-up name does not stay the span's name); None when the sampler dropped it."""
        attributes = None
        if TRACEPARENT in headers:
            parent = _W3C.extract(headers)
        else:  # a new trace: sampled as the SDK would, and when dropped, without making a span nor its attributes
            parent, trace_id = None, random.getrandbits(128) or self._ids.generate_trace_id()
            if self._new_trace_bound is not None:  # the usual samplers: a comparison, not a call into the SDK
                sampled = trace_id & _LOW_64_BITS < self._new_trace_bound
            else:
                attributes = {TOPIC: topic, MESSAGE_ID: message_id}
                result = self._sampler.should_sample(None, trace_id, "publish", SpanKind.SERVER, attributes)
                sampled = result.decision is not Decision.DROP
            if not sampled:
                span_id = random.getrandbits(64) or self._ids.generate_span_id()
                headers[TRACEPARENT] = f"00-{trace_id:032x}-{span_id:016x}-{_RANDOM_UNSAMPLED}"
                return None
            self._ids.chosen = trace_id  # the span the SDK makes now is in the trace just sampled
        attributes = attributes or {TOPIC: topic, MESSAGE_ID: message_id}
        span = self._tracer.start_span(f"publish {topic}", parent, SpanKind.SERVER, attributes)
        context = span.get_span_context()
        headers[TRACEPARENT] = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
        return functools.partial(_published, span) if span.is_recording() else None

    def ack(self, topic: str, headers: Mapping[str, str]) -> Callable[[Exception | None], None] | None:
        """Starts the span of the broker's ack of a message being produced, in its publish's trace (``headers``:
        the request's, with the publish span's context). Returns what ends it, with the broker's error if any;
        None when the publish was not sampled (nor is its ack, then)."""
        traceparent = headers.get(TRACEPARENT)
        if traceparent is not None and not int(traceparent[53:55], 16) & 1:  # the sampled flag
            return None
        span = self._tracer.start_span(f"ack {topic}", _W3C.extract(headers), SpanKind.PRODUCER, {TOPIC: topic})
        return functools.partial(_acked, span)

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


def _new_trace_bound(sampler: Sampler) -> int | None:
    """The bound under which the low 64 bits of a new trace's id have the trace sampled, for the samplers that
    decide by the trace id alone (``OTEL_TRACES_SAMPLER`` ratio, on or off, parent-based or not); None for others."""
    root = sampler._root if isinstance(sampler, ParentBased) else sampler  # the SDK has no accessor
    if isinstance(root, TraceIdRatioBased):
        return root.bound
    if root is ALWAYS_ON or root is ALWAYS_OFF:
        return 1 << 64 if root is ALWAYS_ON else 0
    return None


class _Resource(Resource):
    """The SDK's resource, its hash computed once: the exporter hashes it for every span, the SDK's hash a JSON
    dump of its attributes each time (a fifth of the export's CPU), and they never change."""

    def __init__(self, resource: Resource) -> None:
        super().__init__(resource.attributes, resource.schema_url)
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash


class _ChosenTraceIds(RandomIdGenerator):
    """The SDK's random ids, but the next trace id is the one a publish was just sampled with."""

    def __init__(self) -> None:
        self.chosen = 0

    def generate_trace_id(self) -> int:
        chosen, self.chosen = self.chosen, 0
        return chosen or super().generate_trace_id()


def _published(span: Span, status: int, known: bool) -> None:
    if not known:
        span.update_name("publish")
    span.set_attribute(HTTP_STATUS, status)
    if status >= 500:
        span.set_status(StatusCode.ERROR)
    span.end()


def _acked(span: Span, error: Exception | None) -> None:
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, str(error)))
    span.end()


def _span_context(headers: Mapping[str, str]) -> trace.SpanContext | None:
    context = trace.get_current_span(_W3C.extract(headers)).get_span_context()
    return context if context.is_valid else None
