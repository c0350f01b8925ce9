"""Publishing with OpenTelemetry tracing (``--tracing``, docs/tracing.md): the closed-loop maximum (wrk) and CPU per
publish of one frontend process with tracing off (without, then with a publisher's ``traceparent``), on with every
trace sampled (a publish's span and its ack's,
the batch span processor exporting them over OTLP/HTTP to a local receiver), and on with the parent-based
ratio sampler. The issue's target: tracing on within 10% of plain publishing.

``python -m hermes.bench.publish_tracing [SECONDS [RATIO]]`` runs it alone and prints its JSON."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hermes.bench.publish import closed
from hermes.bench.stats import ratio
from hermes.bench.system import Management, System, run_alone

# What the publisher sends in the second run: the trace context travels with each message, tracing off
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
# The sampler of the fourth run: one trace in RATIO, or as the publisher's traceparent says
RATIO = 0.01


class OtlpSink:
    """An OTLP/HTTP trace receiver in a thread of this process, counting the spans it is sent (the exporter's
    protobuf, decoded with the definitions its package brings)."""

    def __init__(self) -> None:
        # the otel extra's: imported only when this runs
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        sink = self
        self.spans = 0
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the exporter's session expects

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = ExportTraceServiceRequest.FromString(body)
                sink.requests += 1
                sink.spans += sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpSink:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """Settings the child processes started meanwhile read."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def _frontend(
    system: System, tracing: dict[str, str] | None, run: Callable[..., dict[str, Any]], sink: OtlpSink, **headers: str
) -> dict[str, Any]:
    """``run`` against a frontend started for it: with ``tracing`` on (its sampler's settings), exporting to
    ``sink``, or off. Each run has a fresh frontend, so that none has warmed up longer. With tracing on, the spans
    it exported (counted once it stopped and exported the rest; its 1 s warm-up's included)."""
    spans = sink.spans
    if tracing is None:
        with system.frontend_with("--workers", "1") as frontend:
            return run(frontend.pid, headers)
    settings = environment(OTEL_EXPORTER_OTLP_ENDPOINT=sink.endpoint, **tracing)
    with settings, system.frontend_with("--workers", "1", "--tracing") as frontend:
        figures = run(frontend.pid)
    figures["spans_exported"] = sink.spans - spans
    return figures


_COMPARED = ("off_traceparent", "always_on", "ratio")


def publish_tracing(seconds: float, concurrency: int, reps: int, sampled: float = RATIO) -> dict[str, Any]:
    async def scenario(system: System, _sink: Any, api: Management) -> dict[str, Any]:
        topic = await api.topic("benchtrace", "publish")
        url = f"{system.frontend}/topics/{topic}"

        def run(pid: int, headers: dict[str, str] | None = None) -> dict[str, Any]:
            return closed(url, seconds, concurrency, reps, pid, headers)

        ratio_sampler = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": str(sampled)}
        with OtlpSink() as sink:
            return {
                "off": _frontend(system, None, run, sink),
                "off_traceparent": _frontend(system, None, run, sink, traceparent=TRACEPARENT),
                "always_on": _frontend(system, {"OTEL_TRACES_SAMPLER": "always_on"}, run, sink),
                "ratio": _frontend(system, ratio_sampler, run, sink),
            }

    runs = asyncio.run(run_alone(scenario))
    cpu = {name: figures["server_cpu_us"]["median"] for name, figures in runs.items()}
    throughput = {name: figures["throughput"]["median"] for name, figures in runs.items()}
    return {
        "seconds": seconds,
        "concurrency": concurrency,
        "sampler_ratio": sampled,
        **runs,
        "cpu_ratio": {name: ratio(cpu[name], cpu["off"]) for name in _COMPARED},
        "throughput_ratio": {name: ratio(throughput[name], throughput["off"]) for name in _COMPARED},
    }


if __name__ == "__main__":
    arguments = [float(arg) for arg in sys.argv[1:]]
    seconds, sampled = arguments[0] if arguments else 4.0, arguments[1] if len(arguments) > 1 else RATIO
    print(json.dumps(publish_tracing(seconds, 32, 3, sampled), indent=2))
