"""The benchmark's own ``hermes run`` processes start beside each other and beside other runs: each names every
port a run binds, none of them a default."""

from __future__ import annotations

import pytest

from hermes.bench.system import port_flags, run_ports
from hermes.broker.embedded import ephemeral_ports
from hermes.config import Settings
from hermes.config_sections import commands_of

pytestmark = pytest.mark.unit


def test_a_bench_run_sets_every_port_of_hermes_run() -> None:
    ports = run_ports()
    run_flags = {name for name in Settings.model_fields if name.endswith("_port") and "run" in commands_of(name)}
    assert {f"{role.replace('-', '_')}_port" for role in ports} == run_flags
    assert ports["embedded-broker"] not in ephemeral_ports()
    assert len({port for port in ports.values() if port}) == len([port for port in ports.values() if port])
    defaults = {role: Settings.model_fields[f"{role.replace('-', '_')}_port"].default for role in ports}
    assert all(ports[role] != defaults[role] for role in ports)


def test_the_flags_name_each_port() -> None:
    assert port_flags({"frontend": 8081, "pipeline": 0}) == ["--frontend-port", "8081", "--pipeline-port", "0"]
