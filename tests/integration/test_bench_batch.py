"""The BATCH throughput scenario of the benchmark suite, small, against real Hermes: it runs and reconciles."""

from __future__ import annotations

import asyncio
import os

import pytest

from hermes.bench.batch import batch_throughput
from tests.support.hermes import InProcessHermes

pytestmark = pytest.mark.integration


def test_the_batch_scenario_drains_and_reconciles_every_message(hermes: InProcessHermes) -> None:
    result = asyncio.run(
        batch_throughput(
            hermes.management_url,
            hermes.frontend_url,
            messages=450,
            batch_size=100,
            ceiling_seconds=0.5,
            consumer_pid=os.getpid(),  # Hermes runs in this process
        )
    )
    assert result["published"] == 450 and result["delivered"] >= 450
    assert result["missing"] == 0 and result["mangled"] == 0 and not result["void"]
    assert result["batches"] >= 5 and result["largest_batch"] == 100
    assert result["throughput"] > 0 and result["raw_batch_post_loop"] > 0
    assert result["consumer_cpu_us"] > 0
