"""A publisher at a steady rate over two frontends, for tests that stop or kill frontends while it publishes."""

from __future__ import annotations

import itertools
import threading

import httpx


class Publisher:
    """Publishes ``{"n": n}`` at ``rate`` per second, alternating the first frontend it tries; the other one only
    when the connection was refused, before anything was sent. A request cut after sending is not repeated: the
    frontend may have taken it, and a second publish would count one message twice. Anything else that is no
    201 or 202 is a failure."""

    def __init__(self, frontends: list[str], topic: str, rate: float, timeout: float = 10) -> None:
        self.frontends = frontends
        self.topic = topic
        self.rate = rate
        self.timeout = timeout
        self.accepted: list[str] = []  # message ids
        self.uncertain: list[str] = []  # requests cut after sending: taken or not, the frontend did not say
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Publisher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        with httpx.Client(timeout=self.timeout) as http:
            for n in itertools.count():
                if self._stop.wait(1 / self.rate):
                    return
                self._publish(http, n)

    def _publish(self, http: httpx.Client, n: int) -> None:
        for frontend in (self.frontends[n % 2], self.frontends[(n + 1) % 2]):
            try:
                response = http.post(
                    f"{frontend}/topics/{self.topic}",
                    content=f'{{"n": {n}}}',
                    headers={"Content-Type": "application/json"},
                )
            except httpx.ConnectError:
                continue  # refused before anything was sent: the other frontend
            except httpx.HTTPError as exc:
                self.uncertain.append(f"{n} at {frontend}: {exc!r}")
                return
            if response.status_code in (201, 202):
                self.accepted.append(response.headers["Hermes-Message-Id"])
            else:
                self.failures.append(f"{n} at {frontend}: {response.status_code} {response.text}")
            return
        self.failures.append(f"{n}: refused by every frontend")
