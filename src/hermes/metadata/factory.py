"""Opens the metadata repository the settings name."""

from __future__ import annotations

from pathlib import Path

from hermes.config import Settings
from hermes.metadata.repository import MetadataRepository
from hermes.metadata.secrets import SecretKeys, StoredSecrets


def sqlite_path(settings: Settings) -> Path:
    return settings.data_dir / "metadata.sqlite3"


def open_repository(settings: Settings) -> MetadataRepository:
    secrets = StoredSecrets(SecretKeys.for_data_dir(settings.data_dir))
    if settings.metadata_store == "zookeeper":
        from hermes.metadata.zookeeper import ZookeeperMetadataRepository  # kazoo is an optional extra

        return ZookeeperMetadataRepository(
            settings.zookeeper_connect, secrets, settings.zookeeper_root, settings.cluster_session_timeout
        )
    from hermes.metadata.sqlite import SqliteMetadataRepository

    return SqliteMetadataRepository(sqlite_path(settings), secrets, settings.metadata_poll_interval)
