"""Publishing with publisher authentication: the closed-loop maximum (wrk) and CPU per publish of one frontend
process, without credentials to a topic anyone may publish to, and with Basic credentials to a topic whose
``auth`` names the publisher (the scrypt check is paid once, then the remembered credential is a digest and a
look-up). Its own broker and data directory, with a users file; the issue's target: within 10% of without.
The two take turns, round after round, each round in the reverse order of the one before, and the figures are the
medians over rounds of Basic's ratio to the run without of the same round (``rounds``, as scenario 1c): run one
after the other, the ratio moved from 0.996 to 0.877 between two runs with nothing changed on its path.

``python -m hermes.bench.publish_auth [SECONDS [ROUNDS [CONNECTIONS]]]`` runs it alone and prints its JSON."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import secrets
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

from hermes.bench import wrk
from hermes.bench.interrupt import alone
from hermes.bench.load import JSON_HEADERS
from hermes.bench.publish import BODY
from hermes.bench.rounds import alternated, median_ratio, summary
from hermes.bench.system import Management, System
from hermes.security.passwords import hash_password
from hermes.security.users import ADMIN, User, UserStore

PUBLISHER = "bench-publisher"


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    """A setting every child process reads (the role processes take different flags)."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


async def _prepare(system: System, admin: dict[str, str], publisher: dict[str, str]) -> tuple[str, str]:
    """The two topics, and one publish with the publisher's credentials: the frontend checks them (scrypt, which
    takes seconds on a loaded machine) before the measurement, as it would once per publisher in production."""
    async with aiohttp.ClientSession(headers=admin) as session:
        api = Management(session, system.management)
        anyone = await api.topic("benchauth", "open")
        restricted = await api.topic("benchauth", "signed", auth={"enabled": True, "publishers": [PUBLISHER]})
        url = f"{system.frontend}/topics/{restricted}"
        async with session.post(url, data=BODY, headers={**publisher, **JSON_HEADERS}) as response:
            if response.status not in (201, 202):
                raise RuntimeError(f"the publisher's first publish: {response.status} {await response.text()}")
    return anyone, restricted


def publish_auth(seconds: float, concurrency: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hermes-bench-auth-") as directory:
        data_dir = Path(directory)
        passwords = {"root": secrets.token_urlsafe(16), PUBLISHER: secrets.token_urlsafe(16)}
        users = UserStore.in_data_dir(data_dir)
        users.save(User("root", hash_password(passwords["root"]), frozenset({ADMIN})))
        users.save(User(PUBLISHER, hash_password(passwords[PUBLISHER])))
        with _environment("HERMES_PUBLISH_AUTHENTICATION", "optional"), System(data_dir) as system:
            publisher = _basic(PUBLISHER, passwords[PUBLISHER])
            anyone, restricted = asyncio.run(_prepare(system, _basic("root", passwords["root"]), publisher))
            pid = system.processes["frontend"].pid
            targets = {
                "without_auth": (f"{system.frontend}/topics/{anyone}", {}),
                "with_basic": (f"{system.frontend}/topics/{restricted}", publisher),
            }

            def run(variant: str) -> dict[str, Any]:
                url, headers = targets[variant]
                load = os.getloadavg()[0]
                return {**wrk.run(url, BODY, seconds, concurrency, pid, headers), "load": round(load, 1)}

            for url, headers in targets.values():  # warm-up: connections, caches, the producer's metadata
                wrk.run(url, BODY, 1.0, concurrency, headers=headers)
            runs = alternated(tuple(targets), rounds, run)
    return {
        "seconds": seconds,
        "rounds": rounds,
        "concurrency": concurrency,
        "generator": wrk.command(concurrency),
        **{variant: summary(variant_runs) for variant, variant_runs in runs.items()},
        "cpu_ratio": median_ratio(runs["with_basic"], runs["without_auth"], "server_cpu_us"),
        "throughput_ratio": median_ratio(runs["with_basic"], runs["without_auth"], "throughput"),
    }


if __name__ == "__main__":
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    connections = int(sys.argv[3]) if len(sys.argv) > 3 else 128  # hermes bench's
    alone(lambda: print(json.dumps(publish_auth(seconds, connections, rounds), indent=2)))
