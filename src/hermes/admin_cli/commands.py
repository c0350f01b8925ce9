"""Parsing and running the operator commands. Usage errors are one line and exit code 2, API errors one line with
the API's message and exit code 1, as the rest of ``hermes``."""

from __future__ import annotations

import argparse
import json
import sys
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hermes.admin_cli import COMMANDS
from hermes.admin_cli.output import show
from hermes.admin_cli.progress import retransmit_and_watch, watch_offline_retransmission
from hermes.client import Connection, HermesClient
from hermes.client import connection as env
from hermes.errors import GroupNotFound, HermesError, UsageError

Action = Callable[[HermesClient, argparse.Namespace], Any]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> typing.NoReturn:
        raise UsageError(message.removeprefix("argument "))


def _connection_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of ``Connection``, each defaulting to its environment variable (``Connection.from_env``)."""
    defaults = Connection.from_env()
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--management-url",
        metavar="URL",
        default=defaults.management_url,
        help=f"the management API [env {env.ENV_MANAGEMENT_URL}; default {env.DEFAULT_MANAGEMENT_URL}]",
    )
    group.add_argument(
        "--frontend-url",
        metavar="URL",
        default=defaults.frontend_url,
        help=f"the publishing API [env {env.ENV_FRONTEND_URL}; default {env.DEFAULT_FRONTEND_URL}]",
    )
    group.add_argument("--user", metavar="NAME", default=defaults.user, help=f"HTTP Basic [env {env.ENV_USER}]")
    group.add_argument(
        "--password", metavar="PASSWORD", default=defaults.password, help=f"HTTP Basic [env {env.ENV_PASSWORD}]"
    )
    group.add_argument("--token", metavar="TOKEN", default=defaults.token, help=f"a bearer token [env {env.ENV_TOKEN}]")
    group.add_argument(
        "--output", choices=("table", "json"), default="table", help="table for people, json as the API answers"
    )


def _fields(values: Sequence[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` pairs: the value as JSON when it parses (numbers, objects), else as text."""
    fields: dict[str, Any] = {}
    for pair in values:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--set: expected KEY=VALUE (got {pair})")
        try:
            fields[key] = json.loads(raw)
        except ValueError:
            fields[key] = raw
    return fields


def _set_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        metavar="FIELD=VALUE",
        action="append",
        default=[],
        help="any other field of the API's JSON, e.g. --set 'subscriptionPolicy={\"rate\": 50}' (repeatable)",
    )


def _owner(args: argparse.Namespace) -> dict[str, Any]:
    return {"owner": {"source": "Plaintext", "id": args.owner}} if args.owner else {}


# topics


def _topics_create(client: HermesClient, args: argparse.Namespace) -> Any:
    fields = {"contentType": args.content_type, **_owner(args), **_fields(args.set)}
    if args.description is not None:
        fields["description"] = args.description
    try:
        return client.create_topic(args.name, **fields)
    except GroupNotFound:
        group = args.name.rpartition(".")[0]
        print(f"hermes: creating the group {group}", file=sys.stderr)
        client.create_group(group)
        return client.create_topic(args.name, **fields)


def _topics_retransmit(client: HermesClient, args: argparse.Namespace) -> Any:
    task = client.create_offline_retransmission(args.source, args.target, args.start, args.end)
    if args.no_wait:
        return task
    return watch_offline_retransmission(client, task["taskId"], args.interval)


def _topics(sub: Any) -> None:
    parser = sub.add_parser("list", help="the topics' names")
    parser.add_argument("--group", metavar="GROUP", help="only this group's")
    parser.set_defaults(action=lambda c, a: c.topics(a.group))
    parser = sub.add_parser("show", help="a topic and its metrics")
    parser.add_argument("name", metavar="TOPIC")
    parser.set_defaults(action=lambda c, a: {**c.topic(a.name), "metrics": c.topic_metrics(a.name)})
    parser = sub.add_parser("create", help="a topic (its group too, when missing)")
    parser.add_argument("name", metavar="TOPIC", help="group.topic")
    parser.add_argument("--content-type", choices=("JSON", "AVRO"), default="JSON")
    parser.add_argument("--owner", metavar="OWNER_ID", help="the owner's id (source Plaintext)")
    parser.add_argument("--description", metavar="TEXT")
    _set_flag(parser)
    parser.set_defaults(action=_topics_create)
    parser = sub.add_parser("delete", help="a topic without subscriptions")
    parser.add_argument("name", metavar="TOPIC")
    parser.set_defaults(action=lambda c, a: c.delete_topic(a.name))
    parser = sub.add_parser(
        "retransmit", help="republish a time range of SOURCE from the lake to TARGET (offline retransmission)"
    )
    parser.add_argument("source", metavar="SOURCE")
    parser.add_argument("target", metavar="TARGET")
    parser.add_argument("--start", metavar="INSTANT", required=True, help="ISO-8601 with a zone, inclusive")
    parser.add_argument("--end", metavar="INSTANT", required=True, help="ISO-8601 with a zone, exclusive")
    _wait_flags(parser)
    parser.set_defaults(action=_topics_retransmit)


# subscriptions


def _subscriptions_create(client: HermesClient, args: argparse.Namespace) -> Any:
    fields = {**_owner(args), **_fields(args.set)}
    if args.description is not None:
        fields["description"] = args.description
    return client.create_subscription(args.topic, args.name, args.endpoint, **fields)


def _subscriptions_retransmit(client: HermesClient, args: argparse.Namespace) -> Any:
    def retransmit() -> dict[str, Any]:
        return client.retransmit(args.topic, args.name, args.since, args.dry_run)

    if args.dry_run or args.no_wait:
        return retransmit()
    return retransmit_and_watch(client, args.topic, args.name, retransmit, args.interval)


def _state(change: str) -> Action:
    def act(client: HermesClient, args: argparse.Namespace) -> Any:
        getattr(client, change)(args.topic, args.name)
        return {"state": client.subscription(args.topic, args.name)["state"]}

    return act


def _subscriptions(sub: Any) -> None:
    parser = sub.add_parser("list", help="a topic's subscriptions")
    parser.add_argument("topic", metavar="TOPIC")
    parser.set_defaults(action=lambda c, a: c.subscriptions(a.topic))
    for name, help_, action in (
        ("show", "a subscription, its metrics and health", None),
        ("suspend", "stop delivering (the position is kept)", _state("suspend")),
        ("activate", "deliver again, from where it stopped", _state("activate")),
    ):
        parser = sub.add_parser(name, help=help_)
        parser.add_argument("topic", metavar="TOPIC")
        parser.add_argument("name", metavar="SUBSCRIPTION")
        parser.set_defaults(action=action or _subscription_show)
    parser = sub.add_parser("create", help="a subscription delivering to ENDPOINT")
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("name", metavar="SUBSCRIPTION")
    parser.add_argument("endpoint", metavar="ENDPOINT", help="http(s)://... or jms://host:port/queue/NAME")
    parser.add_argument("--owner", metavar="OWNER_ID", help="the owner's id (source Plaintext)")
    parser.add_argument("--description", metavar="TEXT")
    _set_flag(parser)
    parser.set_defaults(action=_subscriptions_create)
    parser = sub.add_parser("retransmit", help="deliver again every message published since a moment")
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("name", metavar="SUBSCRIPTION")
    parser.add_argument(
        "--since",
        metavar="MOMENT",
        required=True,
        help="ISO-8601, or relative to now: --since=-6h (also -30m, -90s, -2d)",
    )
    parser.add_argument("--dry-run", action="store_true", help="only say where each partition would move")
    _wait_flags(parser)
    parser.set_defaults(action=_subscriptions_retransmit)


def _subscription_show(client: HermesClient, args: argparse.Namespace) -> Any:
    shown = client.subscription(args.topic, args.name)
    shown["metrics"] = client.subscription_metrics(args.topic, args.name)
    shown["health"] = client.subscription_health(args.topic, args.name)
    return shown


def _wait_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-wait", action="store_true", help="answer at once instead of following the progress")
    parser.add_argument("--interval", metavar="SECONDS", type=float, default=1.0, help="between progress lines")


# publish and tail


def _publish(client: HermesClient, args: argparse.Namespace) -> Any:
    if args.file in (None, "-"):
        body = sys.stdin.buffer.read()
    else:
        try:
            body = Path(args.file).read_bytes()
        except OSError as exc:
            raise UsageError(f"{args.file}: {exc.strerror}") from None
    headers = dict(_header(value) for value in args.header)
    if args.content_type:
        headers["Content-Type"] = args.content_type
    result = client.publish(args.topic, body, headers, args.partition_key, args.idempotency_key)
    return {"messageId": result.message_id, "status": result.status, **({"replayed": True} if result.replayed else {})}


def _header(value: str) -> tuple[str, str]:
    name, sep, text = value.partition(":")
    if not sep or not name.strip():
        raise UsageError(f"--header: expected NAME:VALUE (got {value})")
    return name.strip(), text.strip()


def _publish_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("file", metavar="FILE", nargs="?", help="the body; - or none: standard input")
    parser.add_argument("--partition-key", metavar="KEY", help="messages of one key stay in order")
    parser.add_argument(
        "--idempotency-key", metavar="KEY", help="a repeat with this key stores nothing and answers as the first"
    )
    parser.add_argument("--header", metavar="NAME:VALUE", action="append", default=[], help="(repeatable)")
    parser.add_argument("--content-type", metavar="TYPE", help="default application/json (avro/binary for Avro)")
    parser.set_defaults(action=_publish)


def _tail_flags(parser: argparse.ArgumentParser) -> None:
    from hermes.admin_cli.tail import tail

    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("--count", metavar="COUNT", type=int, help="stop after this many messages")
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default="127.0.0.1:0",
        help="where the broker delivers to (it must reach it); port 0: any free one",
    )
    parser.add_argument("--advertise", metavar="HOST", help="the host the broker reaches this machine by")
    parser.set_defaults(action=tail)


def _parser(command: str) -> argparse.ArgumentParser:
    parser = _Parser(prog=f"hermes {command}", description=COMMANDS[command], allow_abbrev=False)
    if command in ("topics", "subscriptions"):
        sub = parser.add_subparsers(dest="verb", metavar="ACTION", required=True, parser_class=_Parser)
        (_topics if command == "topics" else _subscriptions)(sub)
        for child in sub.choices.values():
            _connection_flags(child)
    else:
        (_publish_flags if command == "publish" else _tail_flags)(parser)
        _connection_flags(parser)
    return parser


def run(argv: Sequence[str]) -> int:
    """``argv``: the command and its arguments, e.g. ``["topics", "list"]``."""
    try:
        args = _parser(argv[0]).parse_args(argv[1:])
        connection = Connection(args.management_url, args.frontend_url, args.user, args.password, args.token)
        with HermesClient(connection) as client:
            show(args.action(client, args), args.output)
    except UsageError as exc:
        print(f"hermes: {exc.message}", file=sys.stderr)
        return 2
    except HermesError as exc:
        print(f"hermes: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
