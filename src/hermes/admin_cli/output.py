"""How the operator commands print what the APIs answer: ``json`` as the API said it, or a ``table`` for people."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO


def show(value: Any, output: str, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    if output == "json":
        out.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    elif value is not None:
        out.write(table(value))


def table(value: Any) -> str:
    """A list of names: one a line; an object: a field a line; a list of objects: columns of their fields."""
    if isinstance(value, Mapping):
        width = max((len(str(key)) for key in value), default=0)
        return "".join(f"{key:<{width}}  {_cell(item)}\n" for key, item in value.items())
    if isinstance(value, Sequence) and not isinstance(value, str):
        rows = list(value)
        if rows and all(isinstance(row, Mapping) for row in rows):
            return _columns(rows)
        return "".join(f"{_cell(row)}\n" for row in rows)
    return f"{_cell(value)}\n"


def _columns(rows: list[Mapping[str, Any]]) -> str:
    names: list[str] = []
    for row in rows:
        names += [name for name in row if name not in names]
    cells = [[_cell(row.get(name, "")) for name in names] for row in rows]
    widths = [max(len(name), *(len(line[i]) for line in cells)) for i, name in enumerate(names)]
    lines = [names, *cells]
    return "".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() + "\n" for line in lines)


def _cell(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
