"""What the data directory keeps is its owner's alone: the directory 0700, the metadata store, its WAL and the
journal 0600, also when they were made by an older version with the umask's modes; ``hermes secrets`` rotates
the key of the stored secrets (the stores' own behaviour: tests/contract/test_metadata_repository.py)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from hermes.config import load_settings
from hermes.domain.oauth import OAuthProvider
from hermes.domain.topic import Group
from hermes.frontend.journal import Journal
from hermes.metadata.factory import open_repository
from hermes.metadata.secrets import KEYS_VARIABLE, SecretKeys, StoredSecrets, key_file
from hermes.metadata.sqlite import SqliteMetadataRepository
from hermes.runtime import check_data_dir

pytestmark = pytest.mark.unit


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_data_directory_and_its_files_are_private(tmp_path: Path) -> None:
    os.umask(umask := os.umask(0o022))  # the usual umask, whatever the test runner's
    try:
        fresh, old = tmp_path / "fresh" / "data", tmp_path / "old"
        old.mkdir(mode=0o755)
        for data_dir in (fresh, old):
            check_data_dir(load_settings({"data_dir": data_dir}))
            assert _mode(data_dir) == 0o700
        (old / "metadata.sqlite3").touch(mode=0o644)
        repository = SqliteMetadataRepository(old / "metadata.sqlite3", StoredSecrets(SecretKeys(key_file(old))))
        reader = sqlite3.connect(old / "metadata.sqlite3")  # open: the -wal and -shm files stay
        reader.execute("SELECT * FROM groups").fetchall()
        repository.create_group(Group("g"))
        stored = [old / f"metadata.sqlite3{suffix}" for suffix in ("", "-wal", "-shm")]
        assert {path.name: _mode(path) for path in stored} == {path.name: 0o600 for path in stored}
        reader.close()
        repository.close()
        journal = Journal(old / "journal", 1 << 20)
        journal.recover()
        assert [_mode(path) for path in (old / "journal").iterdir()] == [0o600]
        journal.close()
    finally:
        os.umask(umask)


def _hermes(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {name: value for name, value in os.environ.items() if name != KEYS_VARIABLE}
    command = [sys.executable, "-m", "hermes", *args]
    env = {**environment, **env}
    return subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=60)


def test_hermes_secrets_rotate_puts_a_new_key_first_and_reseals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEYS_VARIABLE, raising=False)
    settings = load_settings({"data_dir": tmp_path})
    repository = open_repository(settings)
    repository.create_oauth_provider(OAuthProvider("auth", "http://auth/token", "client", "client-secret-1"))
    keys = SecretKeys.for_data_dir(tmp_path)
    first = keys.keys()
    rotate = _hermes("secrets", "rotate", "--data-dir", str(tmp_path))
    assert "encrypted the secrets of 1 subscriptions and OAuth providers anew" in rotate.stdout, rotate.stderr
    rotated = SecretKeys.for_data_dir(tmp_path).keys()
    assert len(first) == 1 and rotated[1:] == first and rotated[0] not in first
    SecretKeys.for_data_dir(tmp_path).write(rotated[:1])  # the old key dropped: what is stored still reads
    assert open_repository(settings).get_oauth_provider("auth").client_secret == "client-secret-1"
    refused = _hermes("secrets", "rotate", "--data-dir", str(tmp_path), **{KEYS_VARIABLE: rotated[0].decode()})
    assert refused.returncode == 1 and f"the keys come from {KEYS_VARIABLE}" in refused.stderr
    repository.close()
