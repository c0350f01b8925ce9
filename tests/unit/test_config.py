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


def test_the_fetch_wait_grows_with_the_active_subscriptions_up_to_its_maximum(tmp_path: Path) -> None:
    embedded = load_settings({"data_dir": tmp_path})
    assert embedded.fetch_wait_for(1) == 25  # off by default
    growing = load_settings({"data_dir": tmp_path, "consumer_fetch_wait_per_subscription_ms": 5})
    assert [growing.fetch_wait_for(n) for n in (0, 1, 2, 5, 100)] == [5, 5, 10, 25, 25]
    external = load_settings({"data_dir": tmp_path, "kafka_bootstrap_servers": "kafka:9092"})
    assert external.fetch_wait_for(1) == 500
    tuned = load_settings(
        {"data_dir": tmp_path, "consumer_fetch_wait_ms": 100, "consumer_fetch_wait_per_subscription_ms": 2}
    )
    assert [tuned.fetch_wait_for(n) for n in (1, 30, 60)] == [2, 60, 100]


def test_the_session_timeout_suits_the_broker(tmp_path: Path) -> None:
    assert load_settings({"data_dir": tmp_path}).session_timeout_ms == 2000  # Tansu: joins take half of it
    external = load_settings({"data_dir": tmp_path, "kafka_bootstrap_servers": "kafka:9092"})
    assert external.session_timeout_ms == 6000  # Kafka refuses less by default
    chosen = load_settings(
        {"data_dir": tmp_path, "kafka_bootstrap_servers": "k:9092", "consumer_session_timeout_ms": 9000}
    )
    assert chosen.session_timeout_ms == 9000
