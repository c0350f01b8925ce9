"""The ``hermes`` command. Every setting is a flag of the commands that use it (``hermes.config_sections``); usage
errors are one line and exit code 2. A command's code (and the settings, pydantic's) is imported only when that
command runs or shows its help, so that ``hermes --help`` and the operator's commands (``hermes.admin_cli``)
start in a fraction of a second."""

from __future__ import annotations

import argparse
import difflib
import sys
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes import __version__, admin_cli
from hermes.errors import HermesError, UsageError

if TYPE_CHECKING:
    from hermes.config import Settings

Command = Callable[["Settings", argparse.Namespace], int]
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


def _serve(settings: Settings, role: str | None) -> int:
    from hermes import event_loop
    from hermes.runtime import ALL_ROLES, Role, serve

    roles = ALL_ROLES if role is None else frozenset({Role(role)})
    event_loop.run(settings.event_loop, serve(settings, roles))
    return 0


@command(
    "run", "Run the whole broker in one process: embedded Kafka (unless external), management, frontend, consumers."
)
def _run(settings: Settings, _: argparse.Namespace) -> int:
    return _serve(settings, None)


@command("frontend", "Run only the publishing API, in --workers processes.")
def _frontend(settings: Settings, _: argparse.Namespace) -> int:
    if settings.workers > 1:
        from hermes.frontend.workers import run_workers

        return run_workers(settings)
    return _serve(settings, "frontend")


@command("management", "Run only the management API.")
def _management(settings: Settings, _: argparse.Namespace) -> int:
    return _serve(settings, "management")


@command("consumers", "Run only the consumers (push delivery).")
def _consumers(settings: Settings, _: argparse.Namespace) -> int:
    return _serve(settings, "consumers")


@command("pipeline", "Run the Spark data pipeline: offline storage and the jobs of docs/pipeline.md (spark extra).")
def _pipeline(settings: Settings, _: argparse.Namespace) -> int:
    from hermes.pipeline.runner import run_pipeline

    run_pipeline(settings)
    return 0


def _bench_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("benchmark")
    group.add_argument(
        "--quick", action="store_true", help="the short plan (about 4 minutes) instead of the full one (about 21)"
    )
    group.add_argument("--output", type=Path, default=Path("bench-results"), help="directory for results.json, plots")
    group.add_argument("--docs", type=Path, default=None, help="Markdown file whose generated block to update")


@command(
    "bench",
    "Run the benchmark suite: each scenario beside its ceiling, every message reconciled; writes JSON and plots.",
    _bench_arguments,
)
def _bench(_settings: Settings, args: argparse.Namespace) -> int:
    import json

    from hermes.bench import report, suite
    from hermes.bench.interrupt import stop_at_once

    stop_at_once()

    def progress(text: str) -> None:
        print(f"hermes bench: {text}", file=sys.stderr, flush=True)

    results = suite.run(suite.QUICK if args.quick else suite.FULL, progress)
    written = report.write(results, args.output, args.docs)
    print(json.dumps({"void": results["void"], "void_reasons": results["void_reasons"], **written}, indent=2))
    return 1 if results["void"] else 0


def _users_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("users")
    group.add_argument("action", choices=("add", "set", "remove", "list"), help="what to do")
    group.add_argument("name", nargs="?", help="the user or service account (a bearer token's subject)")
    group.add_argument("--admin", action=argparse.BooleanOptionalAction, default=None, help="the admin role")
    group.add_argument("--owner", action="append", default=None, help="an owner id it manages (repeatable)")
    group.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    group.add_argument("--no-password", action="store_true", help="no password: it signs in with bearer tokens")


@command(
    "users",
    "Add, change, remove or list the users of the APIs (in DATA_DIR/security/users.json; see docs/security.md).",
    _users_arguments,
)
def _users(settings: Settings, args: argparse.Namespace) -> int:
    from hermes.security.accounts import change_users

    for line in change_users(settings.data_dir, args):
        print(line)
    return 0


def _secrets_arguments(parser: argparse.ArgumentParser) -> None:
    from hermes.metadata.secrets import KEYS_VARIABLE

    group = parser.add_argument_group("secrets")
    group.add_argument(
        "action",
        choices=("rotate", "reseal", "key"),
        help="rotate: put a new key first in the key file and encrypt every stored secret with it; reseal: "
        f"encrypt them with the first key (after changing {KEYS_VARIABLE}); key: print a new key",
    )


@command(
    "secrets",
    "Rotate the key of the metadata store's secrets, or encrypt them anew (see docs/security.md).",
    _secrets_arguments,
)
def _secrets(settings: Settings, args: argparse.Namespace) -> int:
    from hermes.metadata.factory import open_repository
    from hermes.metadata.secrets import new_key, rotate

    if args.action == "key":
        print(new_key())
        return 0
    if args.action == "rotate":
        print(f"the new key is first in {rotate(settings.data_dir)}; the old ones still decrypt")
    repository = open_repository(settings)
    try:
        print(f"encrypted the secrets of {repository.reseal_secrets()} subscriptions and OAuth providers anew")
    finally:
        repository.close()
    return 0


def _add_setting(group: argparse._ArgumentGroup, name: str) -> None:
    from hermes.config import ENV_PREFIX, Settings, flag

    field = Settings.model_fields[name]
    hints = [f"env {ENV_PREFIX}{name.upper()}"]
    if field.default_factory is None and field.default is not None:  # a computed or empty default: nothing to show
        hints.append(f"default {str(field.default).lower() if isinstance(field.default, bool) else field.default}")
    args: dict[str, Any] = {
        "dest": name,
        "default": argparse.SUPPRESS,
        "help": f"{field.description} [{'; '.join(hints)}]",
    }
    base = field.annotation
    if typing.get_origin(base) in (typing.Union, types.UnionType):
        base = next(a for a in typing.get_args(base) if a is not type(None))
    if base is bool:
        group.add_argument(flag(name), action=argparse.BooleanOptionalAction, **args)
        return
    # values stay strings here: the settings validate them and name the flag in any error
    choices = typing.get_args(base) if typing.get_origin(base) is typing.Literal else ()
    metavar = "{" + ",".join(choices) + "}" if choices else value_name(name, base, field.description or "")
    group.add_argument(flag(name), metavar=metavar, **args)


def value_name(name: str, kind: object, description: str) -> str:
    """What a flag's value is, for its help (``--consumers-per-subscription COUNT``): named in
    ``config_sections.VALUE_NAMES``, else from the field's unit or type."""
    from hermes.config_sections import VALUE_NAMES

    units = {"Seconds": "SECONDS", "Millis": "MS", "Hours": "HOURS", "Bytes": "BYTES"}
    suffixes = {"_port": "PORT", "_ms": "MS", "_mb": "MIB", "_bytes": "BYTES", "_size": "BYTES", "_url": "URL"}
    suffixes |= {"_file": "FILE", "_dir": "DIR", "_location": "FILE"}
    return (
        VALUE_NAMES.get(name)
        or next((value for suffix, value in suffixes.items() if name.endswith(suffix)), None)
        or next((value for unit, value in units.items() if description.startswith(unit)), None)
        or ("SECONDS" if kind is float and "seconds" in description.lower() else None)
        or {int: "COUNT", float: "NUMBER", Path: "PATH"}.get(kind)  # type: ignore[call-overload]
        or "TEXT"
    )


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> typing.NoReturn:
        raise UsageError(message.removeprefix("argument "))  # one line, not argparse's usage dump


def top_help() -> str:
    """``hermes --help``: every command by its one line, the broker's and then the operator's."""
    top = argparse.ArgumentParser(
        prog="hermes",
        description="Hermes for Python: publish over HTTP, store in Kafka, push to HTTP subscribers. "
        "`hermes COMMAND --help` lists a command's flags.",
    )
    top.add_argument("--version", action="version", version=f"hermes {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_, _) in COMMANDS.items():
        sub.add_parser(name, help=help_)
    for name, help_ in admin_cli.COMMANDS.items():
        sub.add_parser(name, help=help_)
    return top.format_help()


def command_parser(name: str) -> argparse.ArgumentParser:
    """A broker command's parser: the flags most runs need first, then its settings by section, then its own."""
    from hermes.config_sections import ESSENTIALS, sections_of

    help_ = COMMANDS[name][0]
    parser = _Parser(
        prog=f"hermes {name}", description=help_, usage="%(prog)s [flags]", allow_abbrev=False, add_help=False
    )
    parser.add_argument("-h", "--help", action="help", help="show this help and exit")
    sections = sections_of(name)
    first = [field for field in ESSENTIALS if any(field in section.fields for section in sections)]
    if sections:
        config = parser.add_argument_group(
            "first flags",
            "The flags most runs need. Precedence, highest first: flags, HERMES_* environment variables, the "
            "--config file, defaults.",
        )
        config.add_argument(
            "--config",
            type=Path,
            metavar="FILE",
            default=argparse.SUPPRESS,
            help="TOML file with settings (keys as the flags, with underscores) [env HERMES_CONFIG]",
        )
        for field in first:
            _add_setting(config, field)
    for section in sections:
        rest = [field for field in section.fields if field not in first]
        if rest:
            group = parser.add_argument_group(f"settings: {section.title}")
            for field in rest:
                _add_setting(group, field)
    if name in ARGUMENTS:
        ARGUMENTS[name](parser)
    return parser


def _suggestion(word: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(known), n=1)
    return f"; did you mean {close[0]}?" if close else ""


def _unknown(command: str, parser: argparse.ArgumentParser, argument: str) -> str:
    from hermes.config import Settings
    from hermes.config_sections import commands_of

    if not argument.startswith("-"):
        return f"unexpected argument {argument} (see hermes {command} --help)"
    option = argument.split("=", 1)[0]
    name = option.removeprefix("--").replace("-", "_")
    name = name if name in Settings.model_fields else name.removeprefix("no_")  # --no-pipeline
    if name in Settings.model_fields:
        return f"unknown flag {option} for hermes {command} (a setting of: {', '.join(commands_of(name))})"
    known = parser._option_string_actions  # argparse keeps no public list of a parser's flags
    return f"unknown flag {option}" + (_suggestion(option, known) or f" (see hermes {command} --help)")


def parse(argv: Sequence[str]) -> tuple[str, argparse.Namespace]:
    """The broker command ``argv`` (not empty) names, and its flags."""
    command = argv[0]
    if command in ("-h", "--help"):
        print(top_help(), end="")
        raise SystemExit(0)
    if command == "--version":
        print(f"hermes {__version__}")
        raise SystemExit(0)
    if command.startswith("-"):
        raise UsageError(f"{command}: the command comes first: hermes COMMAND [flags] (see hermes --help)")
    if command not in COMMANDS:
        known = [*COMMANDS, *admin_cli.COMMANDS]
        raise UsageError(f"unknown command {command}" + (_suggestion(command, known) or " (see hermes --help)"))
    parser = command_parser(command)
    args, extra = parser.parse_known_args(argv[1:])
    if extra:
        raise UsageError(_unknown(command, parser, extra[0]))
    return command, args


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(top_help(), end="")
        return 2
    if argv[0] in admin_cli.COMMANDS:
        return admin_cli.main(argv)
    try:
        command, args = parse(argv)
        from hermes.config import Settings, load_settings

        values = {k: v for k, v in vars(args).items() if k in Settings.model_fields}
        settings = load_settings(values, getattr(args, "config", None))
    except UsageError as exc:
        for line in exc.message.splitlines():
            print(f"hermes: {line}", file=sys.stderr)
        return 2
    from hermes.config_sections import sections_of
    from hermes.logs import configure_logging, log_path

    serves = bool(sections_of(command))  # a role or hermes run, not the benchmark: it has a data directory
    configure_logging(settings.log_level, log_path(settings.data_dir, command) if serves else None)
    try:
        return COMMANDS[command][1](settings, args)
    except HermesError as exc:
        print(f"hermes: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
