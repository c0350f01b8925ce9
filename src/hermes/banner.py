"""The lines a Hermes process prints once started: what runs in it, where, and where its state and log are."""

from __future__ import annotations

import os

from hermes.logs import log_file
from hermes.metadata.factory import sqlite_path
from hermes.runtime import Hermes, Role


def banner(hermes: Hermes) -> str:
    settings = hermes.settings
    rows: list[tuple[str, str]] = []
    for role in (Role.MANAGEMENT, Role.FRONTEND, Role.CONSUMERS):
        server = hermes.servers.get(role)
        url = hermes.url(role) if server is not None else ""
        if role == Role.CONSUMERS and role in hermes.roles:  # alone, it serves health and metrics only
            rows.append((role, "delivering in this process" + (f"; health and metrics at {url}" if url else "")))
        elif url:
            rows.append((role, url))
            if role == Role.MANAGEMENT and settings.ui:
                rows.append(("console", f"{url}/ui/"))
    rows += [
        ("Kafka", _kafka(hermes)),
        ("metadata", _metadata(hermes)),
        ("auth", hermes.security.describe() if hermes.security is not None else "off"),
        ("pipeline", hermes.pipeline_status),
        ("data dir", str(settings.data_dir.absolute())),
        ("log", str(log_file() or "stderr only")),
    ]
    title = f"{hermes.name} is running (pid {os.getpid()}); Ctrl-C stops it"
    return "\n".join([title, *(f"  {name:<10}  {value}" for name, value in rows)])


def _kafka(hermes: Hermes) -> str:
    assert hermes.connection is not None
    address = hermes.connection.bootstrap_servers
    if hermes.broker is not None:
        return f"{address} (embedded Apache Kafka, files in {hermes.broker.directory.absolute()})"
    if hermes.settings.kafka_bootstrap_servers is None:
        return f"{address} (the embedded broker of a hermes run)"
    return f"{address} (external)"


def _metadata(hermes: Hermes) -> str:
    settings = hermes.settings
    if settings.metadata_store == "zookeeper":
        return f"ZooKeeper {settings.zookeeper_connect}{settings.zookeeper_root}"
    return f"SQLite {sqlite_path(settings).absolute()}"
