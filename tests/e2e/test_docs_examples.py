"""Every ``sh`` and ``python`` example of the README and ``docs/`` runs, as a reader would run it, against a real
``hermes run``: so that no example can rot.

The documents run in reading order (README first, then ``docs/`` by name), their examples in order, all against
one broker, so that an example may use what an earlier one created (the quickstart's topic). The only changes
are the addresses: the examples' fixed ports become this run's free ones. An example that cannot run here says
why in a ``<!-- example: skip REASON -->`` comment on the line before it. A comment ``# HTTP/1.1 NNN ...`` in
an example is an expected answer: the output must contain that status line.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hermes.broker.embedded import free_port
from tests.support.hermes import HermesProcess

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^( *)```(\w+)\n(.*?)^\1```\n", re.MULTILINE | re.DOTALL)
_SKIP = re.compile(r"<!-- example: skip (.+?) -->\s*$")
_EXPECTED_STATUS = re.compile(r"^\s*# (HTTP/1\.1 \d{3})", re.MULTILINE)


@dataclass(frozen=True)
class Example:
    document: Path
    line: int
    language: str
    code: str
    skip: str | None

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def examples(document: Path) -> list[Example]:
    text = document.read_text()
    found = []
    for match in _FENCE.finditer(text):
        indent, language, body = match.groups()
        if language not in ("sh", "python"):
            continue
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = _SKIP.search(before)
        line = text.count("\n", 0, match.start()) + 1
        code = textwrap.dedent(body) if indent else body  # a list item's example
        found.append(Example(document, line, language, code, skip.group(1) if skip else None))
    return found


ALL = [example for document in DOCUMENTS for example in examples(document)]


@dataclass
class Addresses:
    frontend: int
    management: int
    kafka: int
    subscriber: int
    data_dir: Path  # the running Hermes', seen by every example as .hermes (make run's data directory)

    def apply(self, code: str) -> str:
        code = code.replace("127.0.0.1:8080", f"127.0.0.1:{self.frontend}")
        code = code.replace("127.0.0.1:8090", f"127.0.0.1:{self.management}")
        code = code.replace("127.0.0.1:9092", f"127.0.0.1:{self.kafka}")
        code = code.replace("127.0.0.1:9999", f"127.0.0.1:{self.subscriber}")
        code = code.replace('("127.0.0.1", 9999)', f'("127.0.0.1", {self.subscriber})')
        return code.replace(".venv/bin/", str(Path(sys.executable).parent) + "/")


def archived_lake(root: Path, topic: str) -> None:
    """A lake holding two archived messages of ``topic``, in the archive's columns and partitions, for the
    examples that read one: written with deltalake, since the pipeline (Spark) takes too long to start here."""
    from datetime import UTC, datetime

    import pyarrow as pa
    from deltalake import write_deltalake

    now = datetime.now(UTC)
    rows = pa.table(
        {
            "message_id": ["m-1", "m-2"],
            "publish_timestamp": pa.array([now, now], pa.timestamp("us", "UTC")),
            "partition": pa.array([0, 0], pa.int32()),
            "offset": pa.array([0, 1], pa.int64()),
            "key": pa.array([None, None], pa.binary()),
            "schema_version": pa.array([None, None], pa.int32()),
            "headers": pa.array([[], []], pa.map_(pa.string(), pa.string())),
            "body": pa.array([b'{"n": 1}', b'{"n": 2}'], pa.binary()),
            "topic": [topic, topic],
            "hour": [now.strftime("%Y-%m-%d-%H")] * 2,
        }
    )
    write_deltalake(str(root), rows, partition_by=["topic", "hour"])


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Addresses]:
    data_dir = tmp_path_factory.mktemp("docs")
    archived_lake(data_dir / "pipeline" / "lake", "com.example.orders")  # the run has no pipeline (--no-pipeline)
    hermes = HermesProcess(data_dir).start()
    yield Addresses(hermes.frontend_port, hermes.management_port, hermes.kafka_port, free_port(), data_dir)
    assert hermes.stop() == 0


@pytest.fixture(scope="module")
def background() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The examples' shells, whose background jobs (the quickstart's subscriber) live until the module ends."""
    shells: list[subprocess.Popen[bytes]] = []
    yield shells
    for shell in shells:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGTERM)
        shell.wait(30)  # reaped: a shell left running failed a later module's test with its ResourceWarning


def test_the_documents_have_examples() -> None:
    assert len([e for e in ALL if e.skip is None]) >= 5


@pytest.mark.parametrize("example", ALL, ids=[e.name for e in ALL])
def test_example_runs(
    example: Example, broker: Addresses, background: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    if example.skip is not None:
        pytest.skip(example.skip)
    code = broker.apply(example.code)
    (tmp_path / ".hermes").symlink_to(broker.data_dir)  # the examples run where make run's data directory is
    argv = ["bash", "-euo", "pipefail", "-c", code] if example.language == "sh" else [sys.executable, "-c", code]
    log = tmp_path / "output"
    with open(log, "wb") as output:  # a file, not a pipe: a background job keeps a pipe open after the shell ends
        shell = subprocess.Popen(argv, cwd=tmp_path, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    background.append(shell)
    shell.wait(timeout=180)  # the Spark examples start a JVM: over 60 s on a loaded machine
    text = log.read_text(errors="replace")
    assert shell.returncode == 0, f"{example.name} failed:\n{text}"
    for status in _EXPECTED_STATUS.findall(example.code):
        assert status in text, f"{example.name}: expected {status!r} in:\n{text}"
