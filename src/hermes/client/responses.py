"""What the APIs answer, read back: a publish's outcome, and errors as the project's error types (``hermes.errors``)
carrying the API's own message."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from hermes import errors
from hermes.errors import HermesError

MESSAGE_ID_HEADER = "Hermes-Message-Id"


@dataclass(frozen=True)
class PublishResult:
    """``accepted``: 202, the broker had not acknowledged the message in time; the frontend keeps it and sends it
    on (no need to publish again). 201: the broker has it."""

    message_id: str
    status: int
    replayed: bool = False  # a repeat of an Idempotency-Key: the first publish's answer, nothing stored now

    @property
    def accepted(self) -> bool:
        return self.status == 202

    @classmethod
    def read(cls, status: int, headers: Mapping[str, str], _body: bytes) -> PublishResult:
        return cls(headers.get(MESSAGE_ID_HEADER, ""), status, headers.get("Idempotent-Replayed") == "true")


def _error_classes() -> dict[tuple[str, int], type[HermesError]]:
    """By code and status: a code may stand for two errors told apart by their status (an unknown subscription is
    Hermes' 400 on Hermes' paths and a 404 on ours)."""
    found: dict[tuple[str, int], type[HermesError]] = {}
    pending: list[type[HermesError]] = [HermesError]
    while pending:
        cls = pending.pop()
        found.setdefault((cls.code, cls.status), cls)
        pending += cls.__subclasses__()
    return found


_ERRORS = _error_classes()
_BY_CODE = {code: cls for (code, _), cls in reversed(_ERRORS.items())}  # the first found of a code
# By the answer's status when its code is not one of ours (another Hermes, or a proxy in between)
_BY_STATUS: dict[int, type[HermesError]] = {
    400: errors.ValidationError,
    401: errors.Unauthorized,
    403: errors.Forbidden,
    404: errors.NotFoundError,
    406: errors.OperationDisabled,
    413: errors.PayloadTooLarge,
    415: errors.UnsupportedMediaType,
    503: errors.ServiceUnavailable,
}


def raise_for_error(status: int, headers: Mapping[str, str], body: bytes, path: str) -> None:
    """Raises the error an answer of 400 or above stands for, with the API's message (or the path and status)."""
    if status < 400:
        return
    code, message = "", f"HTTP {status} from {path}"
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        code, message = str(parsed.get("code", "")), str(parsed.get("message") or message)
    cls = _ERRORS.get((code, status)) or _BY_CODE.get(code) or _BY_STATUS.get(status)
    if cls is errors.TooManyFailedLogins:
        raise errors.TooManyFailedLogins(message, retry_after=_seconds(headers.get("Retry-After")))
    if cls is None:  # the base error, with the answer's status and code
        error = HermesError(message)
        error.status, error.code = status, code or error.code
        raise error
    raise cls(message)


def _seconds(value: str | None) -> float:
    try:
        return max(0.0, float(value)) if value else 0.0
    except ValueError:
        return 0.0
