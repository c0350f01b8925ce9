"""What ``hermes users`` does: add, set, remove and list the entries of the users file. Passwords are typed
twice at a terminal or read from standard input; there is no default one."""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from hermes.errors import UsageError
from hermes.security.passwords import hash_password
from hermes.security.users import ADMIN, User, UserStore


def change_users(data_dir: Path, args: argparse.Namespace) -> Iterator[str]:
    """Applies ``args`` (the command's flags) to the users file; yields the lines to print."""
    store = UserStore.in_data_dir(data_dir)
    if args.action == "list":
        for user in store.users().values():
            login = "password" if user.password_hash else "bearer token only"
            roles, owners = ",".join(sorted(user.roles)) or "-", ",".join(sorted(user.owners)) or "-"
            yield f"{user.name}\troles={roles}\towners={owners}\t{login}"
        return
    if not args.name:
        raise UsageError(f"users {args.action} needs a NAME")
    existing = store.get(args.name)
    if args.action == "remove":
        if not store.remove(args.name):
            raise UsageError(f"no user {args.name}")
        yield f"removed {args.name}"
        return
    if args.action == "add" and existing is not None:
        raise UsageError(f"{args.name} exists already; change it with `hermes users set`")
    if args.action == "set" and existing is None:
        raise UsageError(f"no user {args.name}; add it with `hermes users add`")
    user = existing or User(args.name)
    if args.admin is not None:
        user = replace(user, roles=user.roles | {ADMIN} if args.admin else user.roles - {ADMIN})
    if args.owner is not None:
        user = replace(user, owners=frozenset(args.owner))
    if args.no_password:
        user = replace(user, password_hash=None)
    elif args.password_stdin or args.action == "add":
        user = replace(user, password_hash=hash_password(_password(args.password_stdin)))
    store.save(user)
    yield f"{'added' if existing is None else 'changed'} {args.name}"


def _password(from_stdin: bool) -> str:
    if from_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            raise UsageError("the two passwords differ")
    if len(password) < 12:
        raise UsageError("a password has at least 12 characters")
    return password
