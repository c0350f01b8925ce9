"""A subscriber's view of ordering by key (``subscriptionPolicy.ordering: KEY``): messages ``{"key", "n"}``
published with ``Partition-Key`` = key, and what came of each key, in order."""

from __future__ import annotations

import itertools
import json
import threading

from tests.support.hermes import HermesClient
from tests.support.subscriber import Received, Reply, Script, SubscriberServer

ANSWER = 0.03  # seconds each delivery takes to be answered

Requests = list[tuple[int, bool, float]]  # a key's requests in the order they came: (n, delivered, when)


def keyed_script(
    failures: int = 0, hang: tuple[str, int] | None = None, fast: threading.Event | None = None
) -> tuple[Script, list[bool]]:
    """Answers every message in ANSWER seconds (0.3 s until ``fast`` is set, if given), with 500 for the first
    ``failures`` requests of key "a", and the first request of the message ``hang`` (key, n) after 1.5 s (beyond
    a requestTimeout of 1 s); the list says of each request whether it was delivered."""
    answers: list[bool] = []
    hung: list[bool] = []

    def script(_n: int, request: Received) -> Reply:
        body = json.loads(request.body)
        if (body["key"], body["n"]) == hang and not hung:
            hung.append(True)
            answers.append(False)
            return Reply(200, delay=1.5)
        failed = body["key"] == "a" and answers.count(False) < failures
        answers.append(not failed)
        return Reply(500 if failed else 200, delay=ANSWER if fast is None or fast.is_set() else 0.3)

    return script, answers


def publish_keyed(client: HermesClient, topic: str, per_key: int, keys: str = "abc") -> None:
    for n in range(per_key):
        for key in keys:
            body = json.dumps({"key": key, "n": n})
            assert client.publish(topic, body, headers={"Partition-Key": key}).status_code == 201


def requests_by_key(subscriber: SubscriberServer, answers: list[bool]) -> dict[str, Requests]:
    out: dict[str, Requests] = {}
    for request, ok in zip(subscriber.received, answers, strict=False):
        body = json.loads(request.body)
        out.setdefault(body["key"], []).append((body["n"], ok, request.at))
    return out


def assert_one_after_another(requests: Requests) -> None:
    """No request of the key came before the one before it was answered."""
    gaps = [round(b[2] - a[2], 3) for a, b in itertools.pairwise(requests)]
    assert min(gaps) >= ANSWER - 0.005, f"two messages of one key were in flight at once: gaps {gaps}"


def received(subscriber: SubscriberServer) -> set[tuple[str, int]]:
    """The (key, n) that came."""
    return {(body["key"], body["n"]) for body in map(json.loads, (r.body for r in subscriber.received))}
