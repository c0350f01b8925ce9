"""How pytest-xdist shares the suite out between its workers (``tests/conftest.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling


class TierScheduling(LoadScopeScheduling):
    """Whole modules to a worker, and the Spark tier as one scope (its session's SparkSession and servers are
    started once, by the worker that takes it), in the order of the collection: the Spark tier first."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False  # by the number of tests, the Spark tier's would come late

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return "tests/spark/" if module.startswith("tests/spark/") else module
