"""Opens the metadata repository the settings name."""

from __future__ import annotations

from pathlib import Path

from hermes.config import Settings
from hermes.metadata.repository import MetadataRepository


def sqlite_path(settings: Settings) -> Path:
    return settings.data_dir / "metadata.sqlite3"


def open_repository(settings: Settings) -> MetadataRepository:
    if settings.metadata_store == "zookeeper":
        from hermes.metadata.zookeeper import ZookeeperMetadataRepository  # kazoo is an optional extra

        return ZookeeperMetadataRepository(settings.zookeeper_connect, settings.zookeeper_root)
    from hermes.metadata.sqlite import SqliteMetadataRepository

    return SqliteMetadataRepository(sqlite_path(settings), settings.metadata_poll_interval)
