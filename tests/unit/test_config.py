from pathlib import Path

import pytest

from hermes.config import load_settings

pytestmark = pytest.mark.unit


def test_flags_beat_environment_beat_file_beat_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "hermes.toml"
    config.write_text('frontend_port = 1001\nmanagement_port = 1002\nlog_level = "DEBUG"\ncluster_name = "file"\n')
    monkeypatch.setenv("HERMES_MANAGEMENT_PORT", "2002")
    monkeypatch.setenv("HERMES_CLUSTER_NAME", "env")
    settings = load_settings({"cluster_name": "flag"}, config)
    assert settings.frontend_port == 1001  # file
    assert settings.management_port == 2002  # environment beats file
    assert settings.cluster_name == "flag"  # flag beats environment
    assert settings.host == "127.0.0.1"  # default


def test_secrets_do_not_print() -> None:
    settings = load_settings({"kafka_sasl_password": "hunter2"})
    assert "hunter2" not in repr(settings)
