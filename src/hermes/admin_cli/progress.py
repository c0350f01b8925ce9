"""Following a long operation until it ends, a line on stderr whenever its progress changes. Ctrl-C stops the
watching, not the operation."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from hermes.client import HermesClient
from hermes.errors import HermesError


def _say(line: str) -> None:
    print(f"hermes: {line}", file=sys.stderr, flush=True)


def retransmit_and_watch(
    client: HermesClient, topic: str, name: str, retransmit: Callable[[], dict[str, Any]], interval: float
) -> dict[str, Any]:
    """Runs ``retransmit`` (its answer: each partition's new offset) and follows the subscription until it has
    handled as many messages as lay between those offsets and the log's end, read from its metrics (up to
    --consumer-metrics-interval behind). The count starts before the retransmission, so that a redelivery faster
    than the metrics is not missed (messages delivered meanwhile count too)."""
    active = client.subscription(topic, name)["state"] == "ACTIVE"
    start = _handled(client, topic, name) if active else 0
    moved = retransmit()
    if not active:
        _say("the subscription is not active: its new position takes effect when it is activated")
        return moved
    backlog = _backlog(client, topic, name, moved)
    shown = -1
    while (done := _handled(client, topic, name) - start) < backlog:
        if done != shown:
            _say(f"retransmission of {topic}${name}: {done} of {backlog} messages handled")
            shown = done
        time.sleep(interval)
    _say(f"retransmission of {topic}${name}: done, {backlog} messages handled again")
    return moved


def _handled(client: HermesClient, topic: str, name: str) -> int:
    """Messages delivered, discarded or filtered out: each handled message counts once in one of them. (Hermes'
    own metrics have no ``totals``: against it, a filtering subscription's filtered messages are not counted.)"""
    metrics = client.subscription_metrics(topic, name)
    filtered = metrics.get("totals", {}).get("filtered", 0)
    return int(metrics.get("delivered", 0)) + int(metrics.get("discarded", 0)) + int(filtered)


def _backlog(client: HermesClient, topic: str, name: str, moved: dict[str, Any]) -> int:
    """The messages from each partition's new offset to its log's end (as the consumer group reports it)."""
    ends = {
        int(p["partition"]): int(p["logEndOffset"])
        for group in client.consumer_groups(topic, name)
        for member in group.get("members", [])
        for p in member.get("partitions", [])
    }
    offsets = [p for partitions in moved.get("partitionOffsetListPerBrokerName", {}).values() for p in partitions]
    return sum(max(0, ends.get(int(p["partition"]), 0) - int(p["offset"])) for p in offsets)


def watch_offline_retransmission(client: HermesClient, task_id: str, interval: float) -> dict[str, Any]:
    """Until the task is DONE (its last state answered) or FAILED (its error raised)."""
    shown = None
    while True:
        task = client.offline_retransmission(task_id)
        progress = task.get("progress") or {}
        line = f"offline retransmission {task_id}: {task.get('status')}, {progress.get('republished', 0)} of "
        line += f"{progress.get('total', '?')} republished"
        if line != shown:
            _say(line)
            shown = line
        if task.get("status") == "DONE":
            return task
        if task.get("status") == "FAILED":
            raise HermesError(f"offline retransmission {task_id} failed: {task.get('error', 'no reason given')}")
        time.sleep(interval)
