"""Opens the metadata repository the settings name."""

from __future__ import annotations

from hermes.config import Settings
from hermes.metadata.repository import MetadataRepository


def open_repository(settings: Settings) -> MetadataRepository:
    if settings.metadata_store == "zookeeper":
        from hermes.metadata.zookeeper import ZookeeperMetadataRepository  # kazoo is an optional extra

        return ZookeeperMetadataRepository(settings.zookeeper_connect, settings.zookeeper_root)
    from hermes.metadata.sqlite import SqliteMetadataRepository

    return SqliteMetadataRepository(settings.data_dir / "metadata.sqlite3", settings.metadata_poll_interval)
