"""The ``hermes`` command. Every setting is a flag (see ``hermes.config`` for the precedence)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from pydantic import ValidationError as SettingsError

from hermes.config import ENV_PREFIX, Settings, load_settings
from hermes.errors import HermesError
from hermes.runtime import ALL_ROLES, Role, serve

Command = Callable[[Settings, argparse.Namespace], int]
Arguments = Callable[[argparse.ArgumentParser], None]
COMMANDS: dict[str, tuple[str, Command]] = {}
ARGUMENTS: dict[str, Arguments] = {}  # a command's own flags, beside the settings


def command(name: str, help_: str, arguments: Arguments | None = None) -> Callable[[Command], Command]:
    def register(fn: Command) -> Command:
        COMMANDS[name] = (help_, fn)
        if arguments is not None:
            ARGUMENTS[name] = arguments
        return fn

    return register


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise HermesError(
                "--event-loop uvloop needs the uvloop package (pip install 'hermes-broker[fast]')"
            ) from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def _serve(settings: Settings, roles: frozenset[Role]) -> int:
    with asyncio.Runner(loop_factory=loop_factory(settings.event_loop)) as runner:
        runner.run(serve(settings, roles))
    return 0


@command(
    "run", "Run the whole broker in one process: embedded Kafka (unless external), management, frontend, consumers."
)
def _run(settings: Settings, _: argparse.Namespace) -> int:
    return _serve(settings, ALL_ROLES)


@command("frontend", "Run only the publishing API.")
def _frontend(settings: Settings, _: argparse.Namespace) -> int:
    return _serve(settings, frozenset({Role.FRONTEND}))


@command("management", "Run only the management API.")
def _management(settings: Settings, _: argparse.Namespace) -> int:
    return _serve(settings, frozenset({Role.MANAGEMENT}))


@command("consumers", "Run only the consumers (push delivery).")
def _consumers(settings: Settings, _: argparse.Namespace) -> int:
    return _serve(settings, frozenset({Role.CONSUMERS}))


@command("pipeline", "Run the Spark data pipeline: offline storage and the jobs of docs/pipeline.md (spark extra).")
def _pipeline(settings: Settings, _: argparse.Namespace) -> int:
    from hermes.pipeline.runner import run_pipeline

    run_pipeline(settings)
    return 0


def _bench_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("benchmark")
    group.add_argument("--quick", action="store_true", help="the short plan (under 2 minutes) instead of the full one")
    group.add_argument("--output", type=Path, default=Path("bench-results"), help="directory for results.json, plots")
    group.add_argument("--docs", type=Path, default=None, help="Markdown file whose generated block to update")


@command(
    "bench",
    "Run the benchmark suite: each scenario beside its ceiling, every message reconciled; writes JSON and plots.",
    _bench_arguments,
)
def _bench(_settings: Settings, args: argparse.Namespace) -> int:
    from hermes.bench import report, suite

    def progress(text: str) -> None:
        print(f"hermes bench: {text}", file=sys.stderr, flush=True)

    results = suite.run(suite.QUICK if args.quick else suite.FULL, progress)
    written = report.write(results, args.output, args.docs)
    print(json.dumps({"void": results["void"], "void_reasons": results["void_reasons"], **written}, indent=2))
    return 1 if results["void"] else 0


def _add_setting(
    parser: argparse.ArgumentParser, name: str, annotation: Any, description: str | None, default: Any
) -> None:
    flag = "--" + name.replace("_", "-")
    env = ENV_PREFIX + name.upper()
    shown = default.get_secret_value() and "****" if isinstance(default, SecretStr) else default
    help_ = f"{description or ''} [env {env}; default {shown}]"
    args: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS, "help": help_}
    base = annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        base = next(a for a in typing.get_args(annotation) if a is not type(None))
    if base is bool:
        parser.add_argument(flag, action=argparse.BooleanOptionalAction, **args)
        return
    if typing.get_origin(base) is typing.Literal:
        args["choices"] = typing.get_args(base)
    elif base in (int, float):
        args["type"] = base
    parser.add_argument(
        flag, metavar=name.rsplit("_", maxsplit=1)[-1].upper() if "choices" not in args else None, **args
    )


def settings_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("settings (flags > HERMES_* environment > --config file > defaults)")
    group.add_argument(
        "--config",
        dest="config",
        type=Path,
        default=argparse.SUPPRESS,
        help="TOML file with settings (keys as the flags, with underscores) [env HERMES_CONFIG]",
    )
    for name, field in Settings.model_fields.items():
        _add_setting(group, name, field.annotation, field.description, field.default)  # type: ignore[arg-type]
    return parser


def build_parser() -> argparse.ArgumentParser:
    common = settings_parser()
    parser = argparse.ArgumentParser(
        prog="hermes",
        description="Hermes for Python: publish over HTTP, store in Kafka, push to HTTP subscribers.",
        parents=[common],
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_, _) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=help_, description=help_, parents=[common])
        if name in ARGUMENTS:
            ARGUMENTS[name](command_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    values = {k: v for k, v in vars(args).items() if k in Settings.model_fields}
    config_file = getattr(args, "config", None)
    name = args.command
    try:
        settings = load_settings(values, config_file)
    except SettingsError as exc:
        print(f"hermes: invalid settings: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    try:
        return COMMANDS[name][1](settings, args)
    except HermesError as exc:
        print(f"hermes: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
