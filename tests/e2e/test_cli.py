"""The ``hermes`` command as a new user meets it: each command's help, the version, and one clear line (exit 2,
no traceback) for a mistyped flag or command, a bad setting or a missing config file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import hermes
from hermes.cli import COMMANDS

pytestmark = pytest.mark.e2e


def _hermes(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hermes", *args], capture_output=True, text=True, timeout=60, check=False, env=env
    )


def test_version() -> None:
    result = _hermes("--version")
    assert (result.returncode, result.stdout) == (0, f"hermes {hermes.__version__}\n")


def test_each_command_help_lists_only_its_own_settings() -> None:
    helps = {command: _hermes(command, "--help").stdout for command in COMMANDS}
    assert not any("PydanticUndefined" in text for text in helps.values())
    assert "--frontend-port" in helps["frontend"] and "--kafka-bootstrap-servers" in helps["frontend"]
    for other in ("--spark-master", "--consumer-commit-interval", "--management-port", "--embedded-broker-heap-mb"):
        assert other not in helps["frontend"]
    assert "--spark-master" in helps["pipeline"] and "--frontend-port" not in helps["pipeline"]
    assert "--spark-master" in helps["run"] and "--consumers-port" not in helps["run"]
    assert "--consumers-port" in helps["consumers"]
    top = _hermes("--help").stdout
    assert all(command in top for command in COMMANDS) and "--frontend-port" not in top


def test_a_mistyped_flag_is_one_line_with_a_suggestion() -> None:
    result = _hermes("run", "--frontend-prot", "8081")
    assert result.returncode == 2
    assert result.stderr == "hermes: unknown flag --frontend-prot; did you mean --frontend-port?\n"


def test_a_flag_of_another_command_says_whose_it_is() -> None:
    result = _hermes("frontend", "--spark-master", "local[1]")
    assert result.returncode == 2
    assert result.stderr == "hermes: unknown flag --spark-master for hermes frontend (a setting of: run, pipeline)\n"


def test_a_mistyped_command_is_one_line_with_a_suggestion() -> None:
    result = _hermes("rnu")
    assert (result.returncode, result.stderr) == (2, "hermes: unknown command rnu; did you mean run?\n")


def test_an_invalid_flag_value_names_the_flag() -> None:
    result = _hermes("run", "--frontend-port", "70000")
    assert (result.returncode, result.stderr) == (2, "hermes: --frontend-port: must be at most 65535 (got 70000)\n")


def test_an_invalid_environment_variable_names_it() -> None:
    result = _hermes("frontend", env={"PATH": "/usr/bin:/bin", "HERMES_LOG_LEVEL": "LOUD"})
    assert result.returncode == 2
    assert result.stderr == "hermes: HERMES_LOG_LEVEL: must be one of DEBUG, INFO, WARNING or ERROR (got LOUD)\n"


def test_a_missing_config_file_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "hermes.toml"
    result = _hermes("run", "--config", str(missing))
    assert (result.returncode, result.stderr) == (2, f"hermes: --config: no such file: {missing}\n")


def test_config_file_errors_name_the_file_and_key(tmp_path: Path) -> None:
    config = tmp_path / "hermes.toml"
    config.write_text('frontend_port = 70000\nlog_levle = "DEBUG"\n')
    result = _hermes("run", "--config", str(config))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"hermes: frontend_port in {config}: must be at most 65535 (got 70000)",
        f"hermes: log_levle in {config}: unknown setting; did you mean log_level?",
    ]


def test_a_config_file_that_is_not_toml_is_an_error(tmp_path: Path) -> None:
    config = tmp_path / "hermes.toml"
    config.write_text("frontend_port: 8081\n")
    result = _hermes("run", "--config", str(config))
    assert result.returncode == 2
    assert result.stderr.startswith(f"hermes: {config}: not valid TOML: ")
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1


def test_run_help_leads_with_the_first_flags_and_names_each_value() -> None:
    from hermes.cli import command_parser

    text = command_parser("run").format_help()
    first, rest = text.split("settings: ", 1)
    assert "--data-dir DIR" in first and "--frontend-port PORT" in first and "--kafka-bootstrap-servers" in first
    assert "--data-dir" not in rest and "--consumer-commit-interval" not in first
    for named in ("--consumers-per-subscription COUNT", "--auth-failed-logins-per-minute COUNT"):
        assert named in rest
    assert "--consumer-commit-interval SECONDS" in rest and "--frontend-ack-leader-timeout MS" in rest
