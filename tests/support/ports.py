"""A TCP connection to itself, as the kernel makes one: a client connecting again and again to a port of the
ephemeral range where nothing listens is given that very port as its own end once (a simultaneous open), and the
connection then holds the port."""

from __future__ import annotations

import socket
import struct

from hermes.broker.embedded import ephemeral_ports, free_port


def connectable_port() -> int:
    """A free port of the ephemeral range that connect() hands out: an even one (bind(0) hands out the odd)."""
    while (port := free_port() + 1) not in ephemeral_ports() or not _free(port):
        pass
    return port


def connect_to_itself(port: int, attempts: int = 200_000) -> socket.socket:
    """Connects to 127.0.0.1:``port`` until the kernel gives the client that port (about 10,000 attempts, well
    under a second); fails when something listens there or the attempts run out. Closing the connection resets
    it: closed gracefully, it would hold the port a minute more in TIME_WAIT, which a start waits out as well
    but a test cannot afford."""
    for _ in range(attempts):
        client = socket.socket()
        try:
            client.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            client.close()
            continue
        if client.getsockname() == client.getpeername():
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return client
        client.close()
        raise AssertionError(f"something listens on port {port}")
    raise AssertionError(f"no connection to itself on port {port} in {attempts} attempts")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
