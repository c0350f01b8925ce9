from pathlib import Path

import pytest

from hermes.cli import COMMANDS
from hermes.config import Settings, load_settings
from hermes.config_sections import SECTIONS
from hermes.errors import UsageError

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


def test_every_setting_belongs_to_one_section_of_existing_commands() -> None:
    named = [name for section in SECTIONS for name in section.fields]
    assert sorted(named) == sorted(Settings.model_fields)  # each once: a new field needs its section
    assert {command for section in SECTIONS for command in section.commands} <= set(COMMANDS)


def test_errors_name_where_the_bad_value_came_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "hermes.toml"
    config.write_text("consumer_commit_interval = 0\nhost = 5\n")
    monkeypatch.setenv("HERMES_TOPIC_PARTITIONS", "two")
    with pytest.raises(UsageError) as raised:
        load_settings({"frontend_port": "-1", "host": "0.0.0.0"}, config)
    assert raised.value.message.splitlines() == [
        "--frontend-port: must be at least 0 (got -1)",
        "HERMES_TOPIC_PARTITIONS: must be a whole number (got two)",
        f"consumer_commit_interval in {config}: must be more than 0 (got 0)",
    ]  # host = 5 in the file is not used: the flag wins


def test_a_config_file_named_by_the_environment_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(UsageError, match=r"^HERMES_CONFIG: no such file: .*missing\.toml$"):
        load_settings({})


def test_an_invalid_secret_is_not_shown() -> None:
    with pytest.raises(UsageError) as raised:
        load_settings({"kafka_sasl_password": 12345})
    assert raised.value.message == "--kafka-sasl-password: must be a string"


def test_settings_that_bound_each_other_must_keep_their_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_CLUSTER_LOAD_HIGH", "0.5")
    with pytest.raises(UsageError) as raised:
        load_settings({"consumer_restart_backoff": 90})
    assert str(raised.value).splitlines() == [
        "cluster_load_low (0.5) must be less than HERMES_CLUSTER_LOAD_HIGH (0.5)",
        "--consumer-restart-backoff (90) must be at most consumer_restart_backoff_max (60)",
    ]
    assert load_settings({"consumer_restart_backoff": 60, "cluster_load_low": 0.4}).cluster_load_low == 0.4
