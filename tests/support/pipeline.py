"""Running pipeline jobs in the test process, on the shared SparkSession, beside an in-process Hermes."""

from __future__ import annotations

from typing import Any

import pytest

from hermes.pipeline.lake import Lake
from hermes.pipeline.runner import PipelineContext
from tests.support.hermes import InProcessHermes


def pipeline_context(
    spark: Any, hermes: InProcessHermes, tmp_path_factory: pytest.TempPathFactory, **settings: Any
) -> PipelineContext:
    """What the ``hermes pipeline`` process would give its jobs: Hermes' settings (with ``settings`` changed),
    broker connection and metadata repository, a fresh lake and fresh checkpoints."""
    running = hermes.hermes
    assert running.connection is not None and running.repository is not None
    return PipelineContext(
        settings=running.settings.model_copy(update=settings),
        spark=spark,
        connection=running.connection,
        repository=running.repository,
        lake=Lake(str(tmp_path_factory.mktemp("lake"))),
        checkpoints=str(tmp_path_factory.mktemp("checkpoints")),
        trigger_interval=1.0,
        max_records_per_batch=None,
        retention_interval=3600.0,
    )
