"""``hermes tail TOPIC``: a temporary subscription delivering the topic's new messages to a small HTTP server in
this process, printed as they come; the subscription is deleted when tail stops. Over the public APIs only, so the
broker must reach this machine (``--listen``, ``--advertise``)."""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hermes.client import HermesClient
from hermes.errors import UsageError

ACTIVE_WITHIN_S = 30.0


def tail(client: HermesClient, args: argparse.Namespace) -> None:
    received: queue.Queue[tuple[str, bytes]] = queue.Queue()
    server = _server(args.listen, received)
    host = args.advertise or args.listen.rpartition(":")[0] or "127.0.0.1"
    endpoint = f"http://{host}:{server.server_address[1]}/"
    name = f"tail-{uuid.uuid4().hex[:8]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client.create_subscription(args.topic, name, endpoint, description="hermes tail")
        try:
            _wait_active(client, args.topic, name)
            print(f"hermes: following {args.topic} (subscription {name}); Ctrl-C stops", file=sys.stderr, flush=True)
            count = 0
            while args.count is None or count < args.count:
                message_id, body = received.get()
                _print(message_id, body, args.output)
                count += 1
        finally:
            client.delete_subscription(args.topic, name)
    finally:
        server.shutdown()
        server.server_close()


def _print(message_id: str, body: bytes, output: str) -> None:
    text = body.decode(errors="replace")
    if output == "json":
        line = json.dumps({"messageId": message_id, "body": text}, ensure_ascii=False)
    else:
        line = f"{message_id}  {text}"
    print(line, flush=True)


def _wait_active(client: HermesClient, topic: str, name: str) -> None:
    """A new subscription is PENDING until a consumer starts it: only then are new messages delivered."""
    deadline = time.monotonic() + ACTIVE_WITHIN_S
    while client.subscription(topic, name)["state"] != "ACTIVE":
        if time.monotonic() > deadline:
            raise UsageError(f"the subscription {name} was not started within {ACTIVE_WITHIN_S:.0f} s")
        time.sleep(0.1)


def _server(listen: str, received: queue.Queue[tuple[str, bytes]]) -> ThreadingHTTPServer:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(f"--listen: expected HOST:PORT (got {listen})")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            received.put((self.headers.get("Hermes-Message-Id", ""), self.rfile.read(length)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    try:
        return ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
    except OSError as exc:
        raise UsageError(f"--listen {listen}: {exc.strerror}") from None
