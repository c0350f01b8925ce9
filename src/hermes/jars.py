"""The Java archives that ``make setup`` fetched with Maven (``jars/NAME.pom.xml``): the embedded Kafka broker and
Spark's Kafka connector. They live in the environment Hermes is installed in; nothing is downloaded at run time."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hermes.errors import StartupError

JARS_DIR_ENV = "HERMES_JARS_DIR"


def jars_dir(name: str) -> Path:
    """The directory of the ``name`` jars; HERMES_JARS_DIR overrides the environment's share/hermes/jars."""
    root = Path(os.environ.get(JARS_DIR_ENV) or Path(sys.prefix) / "share" / "hermes" / "jars")
    directory = root / name
    if not any(directory.glob("*.jar")):
        raise StartupError(f"the {name} jars are missing in {directory}: run `make setup`")
    return directory


def jar_paths(name: str) -> list[Path]:
    return sorted(jars_dir(name).glob("*.jar"))


def jars_classpath(name: str) -> str:
    return os.pathsep.join(str(path) for path in jar_paths(name))
