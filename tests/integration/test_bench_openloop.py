"""hermes-openloop, the benchmark's open-loop generator in C, built from the tree's source and run against a real
HTTP/1.1 server on 127.0.0.1: counts, headers and body, latency from the scheduled send time, and clear
failures."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from hermes.bench import openloop
from hermes.broker.embedded import free_port
from hermes.errors import StartupError

pytestmark = pytest.mark.integration

SOURCE = Path(__file__).parents[2] / "bench" / "openloop" / "openloop.c"


@pytest.fixture(scope="module", autouse=True)
def generator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The generator compiled from this tree (not an installed copy), first on PATH."""
    bin_dir = tmp_path_factory.mktemp("bin")
    subprocess.run(
        ["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(bin_dir / openloop.PROGRAM), str(SOURCE)], check=True
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        yield


class _Server(ThreadingHTTPServer):
    stall_at = 0  # the request number that is answered after ``stall`` seconds (0: none)
    stall = 0.0
    count = 0
    seen: list[tuple[bytes, str | None]]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    server: _Server

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.count += 1
        self.server.seen.append((body, self.headers.get("X-Probe")))
        if self.server.count == self.server.stall_at:
            time.sleep(self.server.stall)
        if self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"2\r\nok\r\n0\r\n\r\n")
        else:
            self.send_response(201)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.seen = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _url(server: _Server, path: str) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


def test_a_stall_is_charged_to_every_request_scheduled_during_it(server: _Server) -> None:
    # one connection, 50 requests 20 ms apart; the 30th is answered 0.3 s late, while about 15 more fall due. A slow
    # rate and a stall late in the run: a loaded machine slows the server too, and the median request must still
    # come before the stall
    server.stall_at, server.stall = 30, 0.3
    result = openloop.run(_url(server, "/topics/t"), b'{"a":1}', 50, 1.0, connections=1, headers={"X-Probe": "yes"})
    assert (result["scheduled"], result["sent"], result["answered"]) == (50, 50, 50)
    assert result["codes"] == {"201": 50} and result["errors"] == 0 and result["unanswered"] == 0
    assert server.seen == [(b'{"a":1}', "yes")] * 50
    latency = result["latency_ms"]
    assert latency["max"] >= 290  # the stalled request itself
    # measured from the send, only one request would be slow; from the schedule, the ~15 queued behind it (the
    # slowest tenth among them) waited 100-300 ms. The median request, before the stall, was not charged with it.
    assert latency["p90"] >= 100 and latency["p50"] < 100
    assert 0.6 * 50 < result["throughput"] <= 1.025 * 50  # never above the rate; the stall's queue drained
    assert result["cpu_us_per_request"] > 0


def test_chunked_answers_are_read_on_a_kept_alive_connection(server: _Server) -> None:
    result = openloop.run(_url(server, "/chunked"), b"x", 100, 0.2, connections=2)
    assert result["answered"] == 20 and result["codes"] == {"200": 20} and result["errors"] == 0


def test_a_refused_connection_and_bad_arguments_fail_clearly() -> None:
    with pytest.raises(StartupError, match=r"cannot connect to 127\.0\.0\.1"):
        openloop.run(f"http://127.0.0.1:{free_port()}/topics/t", b"x", 10, 0.1)
    with pytest.raises(StartupError, match="numeric IPv4"):
        openloop.run("http://localhost:80/topics/t", b"x", 10, 0.1)
    with pytest.raises(StartupError, match=r"-r \(rate"):
        openloop.run("http://127.0.0.1:80/t", b"x", 0, 0.1)
