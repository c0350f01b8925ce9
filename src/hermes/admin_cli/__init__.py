"""The operator's commands of ``hermes`` (topics, subscriptions, publish, tail): calls of the public APIs through
``hermes.client``, against ``--management-url`` and ``--frontend-url``. This module only names them, so that
``hermes --help`` lists them without importing anything; ``commands.py`` runs them."""

from __future__ import annotations

from collections.abc import Sequence

COMMANDS = {
    "topics": "Topics: list, show, create, delete; retransmit (offline, from the lake) with its progress.",
    "subscriptions": "Subscriptions: list, show, create, suspend, activate, retransmit (with its progress).",
    "publish": "Publish one message to a topic from a file or standard input; prints its id and 201 or 202.",
    "tail": "Follow a topic's new messages (a temporary subscription to this machine), for debugging.",
}


def main(argv: Sequence[str]) -> int:
    from hermes.admin_cli.commands import run

    return run(argv)
