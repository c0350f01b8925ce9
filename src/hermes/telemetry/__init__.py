"""OpenTelemetry tracing (``--tracing``, docs/tracing.md): ``spans.py`` holds the spans, and the SDK is imported
only when tracing is on (the ``otel`` extra). With tracing off, the W3C trace context still travels with messages
(``domain/trace_context.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermes.errors import UsageError

if TYPE_CHECKING:
    from hermes.telemetry.spans import Tracing


def start_tracing(enabled: bool, role: str) -> Tracing | None:
    """The role's tracing when ``--tracing`` is on; close it when the role stops."""
    if not enabled:
        return None
    try:
        from hermes.telemetry.spans import Tracing
    except ImportError as exc:
        raise UsageError(f"--tracing needs the OpenTelemetry SDK: pip install 'hermes-broker[otel]' ({exc})") from None
    return Tracing(role)
