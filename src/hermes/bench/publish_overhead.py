"""What an ``Idempotency-Key`` and tracing cost beside plain publishing (issue 34's target: each within 10% of it),
measured so that a machine shared with other work favours none of them: a frontend process per setting, all
serving for the whole benchmark, and their wrk runs taken in turn, round after round, each round in the reverse
order of the one before (plain, keyed, ratio, always; always, ratio, keyed, plain; ...). A variant's figure is the
median over rounds of its ratio to the plain run of the same round, for throughput and for the frontend's CPU per
publish; the load average is kept beside each run. A frontend's CPU per publish grows as its rate falls (on this
machine 34.5 µs at 16,000 publishes/s, 53.4 at 3,500: the event loop's and the producer's work per wake-up is shared
by fewer publishes), so a slower variant's CPU figure holds some of its slowness twice; ``pause_ms`` runs every
variant at about the same rate instead (each connection pauses between an answer and its next request).

- plain: frontend A, each request with a header of its own (``X-Bench-Sequence``, ignored), so that wrk builds
  every variant's requests in Lua alike;
- keyed: frontend A, a new ``Idempotency-Key`` per request;
- ratio: frontend B, ``--tracing`` with ``parentbased_traceidratio`` at ``RATIO`` (the production setting), new
  traces;
- always: frontend C, ``--tracing`` with every trace recorded (two spans a publish, exported over OTLP/HTTP to a
  receiver in this process).

Scenario 1c of ``hermes bench``; ``python -m hermes.bench.publish_overhead [SECONDS [ROUNDS [CONNECTIONS
[PAUSE_MS]]]]`` runs it alone and prints its JSON."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hermes.bench import wrk
from hermes.bench.interrupt import alone
from hermes.bench.publish import BODY
from hermes.bench.rounds import alternated, median_ratio, summary
from hermes.bench.system import Management, System, run_alone

VARIANTS = ("plain", "keyed", "ratio", "always")
RATIO = 0.01  # the ratio sampler's, the production setting (docs/tracing.md)
IDEMPOTENCY_KEY = "Idempotency-Key"
_SEQUENCE = "X-Bench-Sequence"


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


def overhead(
    seconds: float, rounds: int, connections: int, pause_ms: float | None = None, sampled: float = RATIO
) -> dict[str, Any]:
    async def scenario(system: System, _sink: Any, api: Management) -> dict[str, Any]:
        topic = await api.topic("benchover", "publish")
        plain_pid, plain_url = system.processes["frontend"].pid, system.frontend
        ratio_sampler = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": str(sampled)}
        with OtlpSink() as sink, contextlib.ExitStack() as frontends:
            with environment(OTEL_EXPORTER_OTLP_ENDPOINT=sink.endpoint, **ratio_sampler):
                ratio_process, ratio_url = frontends.enter_context(
                    system.frontend_beside("--workers", "1", "--tracing")
                )
            with environment(OTEL_EXPORTER_OTLP_ENDPOINT=sink.endpoint, OTEL_TRACES_SAMPLER="always_on"):
                always_process, always_url = frontends.enter_context(
                    system.frontend_beside("--workers", "1", "--tracing")
                )
            targets = {
                "plain": (plain_url, plain_pid, _SEQUENCE),
                "keyed": (plain_url, plain_pid, IDEMPOTENCY_KEY),
                "ratio": (ratio_url, ratio_process.pid, _SEQUENCE),
                "always": (always_url, always_process.pid, _SEQUENCE),
            }
            out = _rounds(targets, f"/topics/{topic}", seconds, rounds, connections, pause_ms)
        out["spans_exported"] = sink.spans  # once both traced frontends stopped and exported the rest
        return out

    return {
        "seconds": seconds,
        "rounds": rounds,
        "connections": connections,
        "pause_ms": pause_ms,
        "sampler_ratio": sampled,
        "generator": wrk.command(connections),
        **asyncio.run(run_alone(scenario)),
    }


def _rounds(
    targets: dict[str, tuple[str, int, str]],
    path: str,
    seconds: float,
    rounds: int,
    connections: int,
    pause_ms: float | None,
) -> dict[str, Any]:
    def run(variant: str, run_seconds: float, measured: bool) -> dict[str, Any]:
        url, pid, header = targets[variant]
        load = os.getloadavg()[0]
        fresh = (header, uuid.uuid4().hex)
        measure = pid if measured else None
        figures = wrk.run(url + path, BODY, run_seconds, connections, measure, fresh=fresh, pause_ms=pause_ms)
        return {**figures, "load": round(load, 1)}

    for variant in VARIANTS:  # warm-up: connections, caches, the producer's metadata
        run(variant, 1.0, False)
    runs = alternated(VARIANTS, rounds, lambda variant: run(variant, seconds, True))
    out: dict[str, Any] = {}
    for variant in VARIANTS:
        out[variant] = summary(runs[variant])
        if variant != "plain":
            out[variant]["throughput_ratio"] = median_ratio(runs[variant], runs["plain"], "throughput")
            out[variant]["cpu_ratio"] = median_ratio(runs[variant], runs["plain"], "server_cpu_us")
    return out


if __name__ == "__main__":
    arguments = [float(arg) for arg in sys.argv[1:]]
    seconds = arguments[0] if arguments else 4.0
    rounds = int(arguments[1]) if len(arguments) > 1 else 6
    connections = int(arguments[2]) if len(arguments) > 2 else 128
    pause_ms = arguments[3] if len(arguments) > 3 else None
    alone(lambda: print(json.dumps(overhead(seconds, rounds, connections, pause_ms), indent=1)))
