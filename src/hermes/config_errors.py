"""Settings errors in our words, not Pydantic's: what a value must be, and what a config file got wrong."""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from hermes.errors import UsageError

_MUST_BE = {
    "less_than_equal": "must be at most {le}",
    "less_than": "must be less than {lt}",
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be more than {gt}",
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "path_type": "must be a path",
    "literal_error": "must be one of {expected}",
}


def read_config_file(path: Path, origin: str) -> dict[str, Any]:
    """The settings of a TOML file; ``origin`` (the flag or variable that named it) is named when it is missing."""
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except FileNotFoundError:
        raise UsageError(f"{origin}: no such file: {path}") from None
    except OSError as exc:
        raise UsageError(f"{origin}: cannot read {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from None


def problem(error: ErrorDetails, fields: dict[str, FieldInfo]) -> str:
    """What is wrong with one value, e.g. ``must be at most 65535 (got 70000)``."""
    name = str(error["loc"][0]) if error["loc"] else ""
    if error["type"] == "extra_forbidden":
        close = difflib.get_close_matches(name, fields, n=1)
        return "unknown setting" + (f"; did you mean {close[0]}?" if close else "")
    template = _MUST_BE.get(error["type"])
    context = {key: _show(value) for key, value in error.get("ctx", {}).items()}
    text = template.format(**context) if template else error["msg"]
    field = fields.get(name)
    if field is not None and SecretStr in _types(field.annotation):
        return text  # a secret's value is never shown
    got = str(error["input"]) or repr(error["input"])  # an empty value shows as ''
    return f"{text} (got {got})"


def _show(bound: Any) -> str:
    """0 rather than 0.0, and DEBUG, INFO or ERROR rather than 'DEBUG', 'INFO' or 'ERROR'."""
    return f"{bound:g}" if isinstance(bound, float) else str(bound).replace("'", "")


def _types(annotation: Any) -> tuple[Any, ...]:
    return (annotation, *getattr(annotation, "__args__", ()))
