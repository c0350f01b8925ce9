"""A real OTLP/HTTP trace receiver: the requests the OpenTelemetry SDK exports (``POST /v1/traces``, protobuf),
decoded with the official definitions (``opentelemetry-proto``) into the spans they carry."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support.subscriber import SubscriberServer
from tests.support.waiting import wait_until

# Kinds and status codes as the protobuf numbers them
SERVER, CLIENT, PRODUCER, CONSUMER = 2, 3, 4, 5
ERROR = 2


@dataclass(frozen=True)
class ExportedSpan:
    name: str
    kind: int
    trace_id: str  # hex, as in a traceparent
    span_id: str
    parent_span_id: str  # "" for a root span
    attributes: dict[str, Any]
    status: int
    links: tuple[str, ...]  # the linked spans' ids
    service: str  # the resource's service.name
    role: str  # the resource's hermes.role
    trace_state: str = ""
    status_message: str = ""


class OtlpReceiver:
    def __init__(self) -> None:
        self.server = SubscriberServer()

    def start(self) -> OtlpReceiver:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    @property
    def endpoint(self) -> str:
        """For OTEL_EXPORTER_OTLP_ENDPOINT: the exporter appends /v1/traces."""
        return self.server.url.rstrip("/")

    @contextmanager
    def exporting(self) -> Iterator[None]:
        """The SDK's environment, for the tracer providers made meanwhile: this endpoint, batches every 50 ms."""
        with pytest.MonkeyPatch.context() as env:
            env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", self.endpoint)
            env.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
            for name in [name for name in os.environ if name.startswith("OTEL_") and "ENDPOINT" in name]:
                if name != "OTEL_EXPORTER_OTLP_ENDPOINT":
                    env.delenv(name)
            yield

    def spans(self) -> list[ExportedSpan]:
        spans = []
        for received in list(self.server.received):
            assert received.path == "/v1/traces"
            assert received.headers["Content-Type"] == "application/x-protobuf"
            request = ExportTraceServiceRequest.FromString(received.body)
            for resource_spans in request.resource_spans:
                resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        spans.append(
                            ExportedSpan(
                                span.name,
                                span.kind,
                                span.trace_id.hex(),
                                span.span_id.hex(),
                                span.parent_span_id.hex(),
                                {a.key: _value(a.value) for a in span.attributes},
                                span.status.code,
                                tuple(link.span_id.hex() for link in span.links),
                                resource["service.name"],
                                resource["hermes.role"],
                                span.trace_state,
                                span.status.message,
                            )
                        )
        return spans

    def wait_for(self, count: int, trace_id: str, timeout: float = 20) -> list[ExportedSpan]:
        """The spans of the trace, once at least ``count`` of them arrived."""
        found: list[ExportedSpan] = []

        def arrived() -> bool:
            nonlocal found
            found = [span for span in self.spans() if span.trace_id == trace_id]
            return len(found) >= count

        wait_until(arrived, timeout=timeout)
        return found


def _value(value: AnyValue) -> Any:
    return getattr(value, value.WhichOneof("value"))
