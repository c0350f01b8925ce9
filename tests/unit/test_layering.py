"""The import layering of docs/architecture.md, checked on the real import graph (every import statement under
src/hermes, read with ast, including those inside functions). A new import between packages fails here until
the map allows it: change the map (and the doc) on purpose, or put the code where it belongs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SRC = Path(__file__).resolve().parents[2] / "src" / "hermes"

_BASE = {"children", "errors", "tasks"}
# Which of hermes' packages (and top-level modules) each may import; itself always.
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "tasks": set(),
    "children": {"tasks"},
    "domain": _BASE,
    "config_errors": _BASE,
    "config": _BASE | {"config_errors"},
    "config_sections": {"config"},
    "datadir": _BASE,
    "event_loop": _BASE,
    "http": _BASE,
    "jars": _BASE,
    "logs": _BASE,
    "security": _BASE | {"config"},
    "broker": _BASE | {"config", "datadir", "domain", "jars"},
    "metadata": _BASE | {"config", "domain"},
    "tracker": _BASE | {"broker", "domain"},
    "telemetry": _BASE | {"domain"},
    "consumers": _BASE
    | {"broker", "cluster", "config", "domain", "http", "metadata", "security", "telemetry", "tracker"},
    "frontend": _BASE
    | {"broker", "cluster", "config", "datadir", "domain", "event_loop", "http", "logs", "metadata"}
    | {"offload", "security", "telemetry", "tracker"},
    "management": _BASE | {"broker", "cluster", "config", "domain", "http", "metadata", "security", "ui"},
    # the web console: the management and publishing APIs over HTTP only, never the management package
    "ui": _BASE,
    # distributed mode's membership and assignment: a consumers node steers its supervisor
    "cluster": _BASE | {"config", "consumers", "domain", "http", "metadata"},
    "pipeline": _BASE | {"broker", "config", "domain", "http", "jars", "logs", "metadata", "security"},
    # large messages: the offload service on the frontend's port, and its blob stores
    "offload": _BASE | {"broker", "domain", "frontend", "http", "metadata"},
    "runtime": _BASE
    | {"banner", "broker", "cluster", "config", "consumers", "datadir", "domain", "frontend", "http", "management"}
    | {"metadata", "pipeline", "security"},
    "banner": {"logs", "metadata", "runtime"},
    "bench": _BASE | {"broker", "config", "domain", "http", "jars", "pipeline", "security"},
    "client": _BASE,  # the public APIs' client: nothing of the server
    "admin_cli": _BASE | {"client"},  # the operator's commands, over the public APIs only
    "cli": _BASE
    | {"__version__", "bench", "config", "config_sections", "event_loop", "frontend", "logs", "pipeline", "runtime"}
    | {"admin_cli", "metadata", "security"},
    "__main__": {"cli"},
}
# Single modules allowed one more edge, and why.
EXCEPTIONS = {
    ("frontend/workers.py", "runtime"),  # each worker process runs the frontend role through runtime.serve
    ("management/services.py", "pipeline"),  # the tracking tables' reader (pipeline/traces.py, no pyspark)
    ("bench/key_path.py", "frontend"),  # times the frontend's idempotency keys in-process, stage by stage
}
# Third-party modules only some places may import.
ONLY_IN = {
    # the bench modules measure the plain client beside Hermes (Kafka alone, retransmission without Spark)
    "confluent_kafka": ("broker/", "bench/kafka_alone.py", "bench/lake_retransmission.py"),
    "kazoo": ("metadata/", "cluster/"),
    "sqlite3": ("metadata/",),
    "pyspark": ("pipeline/",),
    "httpx": ("client/",),  # the client's HTTP library; the broker speaks aiohttp (http/)
    # the otel extra: imported only when tracing is on (and by its benchmark's OTLP receiver)
    "opentelemetry": ("telemetry/spans.py", "telemetry/publish_spans.py", "bench/publish_overhead.py"),
}
# The domain is pure: none of these.
IO_MODULES = {"asyncio", "aiohttp", "socket", "ssl", "subprocess", "threading", "signal", "sqlite3", "pathlib"}
IO_MODULES |= {"httptools", "prometheus_client", "duckdb", "pyarrow", "pyspark", "kazoo", "confluent_kafka"}


def _imports() -> list[tuple[str, str]]:
    """(module path relative to src/hermes, imported module) for every import statement."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        where = path.relative_to(SRC).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), where)):
            if isinstance(node, ast.Import):
                found += [(where, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module == "hermes":  # from hermes import x: x is the module
                    found += [(where, f"hermes.{alias.name}") for alias in node.names]
                else:
                    found.append((where, node.module))
    return found


def _package(where: str) -> str:
    return where.split("/", maxsplit=1)[0].removesuffix(".py")


IMPORTS = _imports()


def test_hermes_packages_import_only_what_the_map_allows() -> None:
    wrong = []
    for where, module in IMPORTS:
        if not module.startswith("hermes."):
            continue
        own, target = _package(where), module.split(".")[1]
        if target != own and target not in MAY_IMPORT[own] and (where, target) not in EXCEPTIONS:
            wrong.append(f"{where} imports {module}")
    assert not wrong, "\n".join(wrong)
    assert {_package(where) for where, _ in IMPORTS} <= MAY_IMPORT.keys(), "a new package needs its row"


def test_third_party_clients_stay_in_their_adapters() -> None:
    wrong = [
        f"{where} imports {module}"
        for where, module in IMPORTS
        if (allowed := ONLY_IN.get(module.split(".")[0])) is not None and not where.startswith(allowed)
    ]
    assert not wrong, "\n".join(wrong)


def test_the_domain_does_no_io() -> None:
    wrong = [
        f"{where} imports {module}"
        for where, module in IMPORTS
        if where.startswith("domain/") and module.split(".")[0] in IO_MODULES
    ]
    assert not wrong, "\n".join(wrong)
    assert any(where.startswith("domain/") for where, _ in IMPORTS), "the walk found the domain"
