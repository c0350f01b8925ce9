"""The live chart of a subscription page: the metrics the API answered each time the page asked (every two
seconds while it is open), kept for the last minutes and drawn as SVG polylines (no chart library)."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

WINDOW = 300.0  # seconds of history a chart shows
SERIES = {  # name -> (label, colour); each chart draws some of them
    "delivered": ("delivered/s", "#2b6cb0"),
    "codes2xx": ("2xx/s", "#2f855a"),
    "codes4xx": ("4xx/s", "#b7791f"),
    "codes5xx": ("5xx/s", "#c53030"),
    "lag": ("lag", "#6b46c1"),
}
COUNTED = ("delivered", "codes2xx", "codes4xx", "codes5xx")  # per second from the totals' growth between samples
CHARTS = (("Delivery rate", ("delivered",)), ("Status codes", COUNTED[1:]), ("Lag", ("lag",)))


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


@dataclass
class History:
    samples: deque[tuple[float, dict[str, float]]] = field(default_factory=deque)
    _totals: dict[str, float] = field(default_factory=dict)

    def add(self, metrics: dict[str, Any], now: float) -> None:
        if self.samples and now - self.samples[-1][0] < 1.0:  # two viewers of one page: one sample a second
            return
        totals = metrics.get("totals") or {}
        counts = {name: _number(totals.get(name)) for name in COUNTED}
        values = {"lag": _number(metrics.get("lag"))}
        elapsed = now - self.samples[-1][0] if self.samples else 0.0
        for name, count in counts.items():  # a restart's lower total counts as no growth
            values[name] = max(0.0, count - self._totals[name]) / elapsed if elapsed else 0.0
        self._totals = counts
        self.samples.append((now, values))
        while self.samples and now - self.samples[0][0] > WINDOW:
            self.samples.popleft()


class MetricsHistory:
    """Per subscription (``group.topic$name``), forgotten once nobody has looked for the whole window."""

    def __init__(self) -> None:
        self._histories: dict[str, History] = {}

    def add(self, subscription: str, metrics: dict[str, Any]) -> History:
        now = time.monotonic()
        for name in [k for k, h in self._histories.items() if h.samples and now - h.samples[-1][0] > WINDOW]:
            del self._histories[name]
        history = self._histories.setdefault(subscription, History())
        history.add(metrics, now)
        return history


def svg(history: History, title: str, names: tuple[str, ...], width: int = 320, height: int = 120) -> str:
    """One chart: the window's ``names`` series against time, the newest on the right."""
    top = max([1.0, *(values[n] for _, values in history.samples for n in names)])
    now = history.samples[-1][0] if history.samples else 0.0
    plot_height = height - 20
    lines = []
    for name in names:
        label, colour = SERIES[name]
        points = " ".join(
            f"{width - (now - at) / WINDOW * width:.1f},{plot_height - values[name] / top * (plot_height - 4):.1f}"
            for at, values in history.samples
        )
        latest = history.samples[-1][1][name] if history.samples else 0.0
        lines.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>'
            f'<text x="{4 + 90 * names.index(name)}" y="{height - 4}" fill="{colour}" font-size="11"'
            f' class="legend" data-series="{name}">{label} {latest:.3g}</text>'
        )
    return (
        f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img"'
        f' aria-label="{title}"><title>{title}, last {WINDOW / 60:g} minutes</title>'
        f'<rect width="{width}" height="{plot_height}" fill="#f7fafc" stroke="#cbd5e0"/>'
        f'<text x="{width - 4}" y="12" text-anchor="end" font-size="10" fill="#4a5568">{top:g}</text>'
        + "".join(lines)
        + "</svg>"
    )
