"""Small, dependency-free SVG charts for the HTML report (inline, so the page needs no network).

Each function returns an `<svg>` element as text. Points carry a `<title>`, which browsers
show as a tooltip. Scales are linear; axes get five or so round ticks.
"""
from __future__ import annotations

import math
from html import escape
from typing import Sequence

WIDTH = 860
ROW = 22
LEFT = 330
RIGHT = 30
PALETTE = {"direct": "#4c78a8", "forgeloopBalanced": "#f58518", "forgeloopAdaptive": "#54a24b"}
OUTLIER = "#d62728"


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        high = low + 1
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = min((m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw), default=raw)
    start = math.floor(low / step) * step
    ticks, value = [], start
    while value <= high + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    return ticks


def _number(value: float, percent: bool = False) -> str:
    if percent:
        return f"{value * 100:.0f}%" if abs(value) <= 1.5 else f"{value:.0f}%"
    if abs(value) >= 1e6:
        return f"{value / 1e6:.1f}M"
    if abs(value) >= 1e3:
        return f"{value / 1e3:.0f}k"
    return f"{value:g}"


class _Axis:
    def __init__(self, low: float, high: float, width: int = WIDTH):
        ticks = _ticks(low, high)
        self.low, self.high = min(ticks[0], low), max(ticks[-1], high)
        self.ticks = ticks
        self.width = width

    def x(self, value: float) -> float:
        span = self.high - self.low or 1
        return LEFT + (value - self.low) / span * (self.width - LEFT - RIGHT)

    def grid(self, top: int, bottom: int, label=_number) -> str:
        parts = []
        for tick in self.ticks:
            x = self.x(tick)
            parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="#e5e5e5"/>')
            parts.append(f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle" class="tick">{escape(label(tick))}</text>')
        return "".join(parts)


def _svg(height: int, body: str, title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{escape(title)}" '
        f'viewBox="0 0 {WIDTH} {height}" width="100%" preserveAspectRatio="xMinYMin meet">{body}</svg>'
    )


def strip_chart(groups: Sequence[tuple[str, str, Sequence[float], Sequence[bool]]], unit: str, title: str) -> str:
    """One row per (label, mode): every value a dot, the middle half a box, the median a bar;
    outliers in red."""
    values = [v for _, _, vs, _ in groups for v in vs]
    if not values:
        return "<p class=empty>No values.</p>"
    axis = _Axis(min(0.0, min(values)), max(values))
    height = 30 + ROW * len(groups) + 30
    parts = [axis.grid(20, height - 30)]
    for index, (label, mode, group_values, outliers) in enumerate(groups):
        y = 30 + ROW * index
        color = PALETTE.get(mode, "#777")
        parts.append(f'<text x="{LEFT - 8}" y="{y + 4}" text-anchor="end" class="label">{escape(label)}</text>')
        ordered = sorted(group_values)
        if ordered:
            q1, median, q3 = (ordered[int((len(ordered) - 1) * f)] for f in (0.25, 0.5, 0.75))
            parts.append(
                f'<rect x="{axis.x(q1):.1f}" y="{y - 7}" width="{max(axis.x(q3) - axis.x(q1), 1):.1f}" height="14" '
                f'fill="{color}" fill-opacity="0.15" stroke="{color}"/>'
                f'<line x1="{axis.x(median):.1f}" y1="{y - 8}" x2="{axis.x(median):.1f}" y2="{y + 8}" stroke="{color}" stroke-width="2"/>'
            )
        for value, outlier in zip(group_values, outliers):
            fill = OUTLIER if outlier else color
            radius = 4 if outlier else 2.5
            parts.append(
                f'<circle cx="{axis.x(value):.1f}" cy="{y}" r="{radius}" fill="{fill}" fill-opacity="0.8">'
                f"<title>{escape(label)}: {value:g} {escape(unit)}{' (outlier)' if outlier else ''}</title></circle>"
            )
    parts.append(f'<text x="{WIDTH - RIGHT}" y="{height - 2}" text-anchor="end" class="tick">{escape(unit)}</text>')
    return _svg(height, "".join(parts), title)


def overhead_chart(series: Sequence[tuple[str, Sequence[tuple[int, float, bool]]]], lines: Sequence[tuple[float, str]], title: str) -> str:
    """One row per scenario: each paired run's token overhead (percent) as a dot (low-baseline
    pairs hollow), with vertical objective lines."""
    values = [v for _, points in series for _, v, _ in points] + [value for value, _ in lines]
    if not series:
        return "<p class=empty>No comparable pairs.</p>"
    axis = _Axis(min(min(values), 0.0), max(values))
    height = 30 + ROW * len(series) + 30
    parts = [axis.grid(20, height - 30, lambda t: f"{t:g}%")]
    for position, (value, label) in enumerate(lines):
        x = axis.x(value)
        anchor, shift = ("end", -3) if position == 0 and len(lines) > 1 else ("start", 3)  # keep close labels apart
        parts.append(f'<line x1="{x:.1f}" y1="16" x2="{x:.1f}" y2="{height - 30}" stroke="{OUTLIER}" stroke-dasharray="5,4"/>'
                     f'<text x="{x + shift:.1f}" y="14" text-anchor="{anchor}" class="tick" fill="{OUTLIER}">{escape(label)}</text>')
    zero = axis.x(0)
    parts.append(f'<line x1="{zero:.1f}" y1="20" x2="{zero:.1f}" y2="{height - 30}" stroke="#999"/>')
    for index, (label, points) in enumerate(series):
        y = 30 + ROW * index
        parts.append(f'<text x="{LEFT - 8}" y="{y + 4}" text-anchor="end" class="label">{escape(label)}</text>')
        for run_index, value, low_baseline in points:
            style = f'fill="none" stroke="{PALETTE["forgeloopAdaptive"]}"' if low_baseline else f'fill="{PALETTE["forgeloopAdaptive"]}"'
            parts.append(f'<circle cx="{axis.x(value):.1f}" cy="{y}" r="3.5" {style}>'
                         f"<title>run {run_index}: {value:+g}%{' (low baseline)' if low_baseline else ''}</title></circle>")
    return _svg(height, "".join(parts), title)


def interval_chart(rows: Sequence[tuple[str, float | None, float | None, float | None]], title: str, *,
                   low: float | None = None, high: float | None = None, line: tuple[float, str] | None = None,
                   percent: bool = True) -> str:
    """One row per label: the estimate as a dot and its interval as a bar (a value that is missing or
    not finite, as a Hajek mean under an overflowing weight, is not drawn)."""
    if not rows:
        return "<p class=empty>Nothing to show yet.</p>"
    rows = [(label, *(v if v is not None and math.isfinite(v) else None for v in values)) for label, *values in rows]
    values = [v for _, *vs in rows for v in vs if v is not None] + ([line[0]] if line else [])
    axis = _Axis(low if low is not None else min(values + [0.0]), high if high is not None else max(values + [0.0]))
    height = 30 + ROW * len(rows) + 30
    parts = [axis.grid(20, height - 30, lambda t: _number(t, percent))]
    if line is not None:
        x = axis.x(line[0])
        parts.append(f'<line x1="{x:.1f}" y1="16" x2="{x:.1f}" y2="{height - 30}" stroke="{OUTLIER}" stroke-dasharray="5,4"/>'
                     f'<text x="{x + 3:.1f}" y="14" class="tick" fill="{OUTLIER}">{escape(line[1])}</text>')
    for index, (label, value, lower, upper) in enumerate(rows):
        y = 30 + ROW * index
        parts.append(f'<text x="{LEFT - 8}" y="{y + 4}" text-anchor="end" class="label">{escape(label)}</text>')
        if lower is not None and upper is not None:
            parts.append(f'<line x1="{axis.x(lower):.1f}" y1="{y}" x2="{axis.x(upper):.1f}" y2="{y}" stroke="#4c78a8" stroke-width="3" stroke-opacity="0.5"/>')
        if value is not None:
            shown = _number(value, percent) if percent else f"{value:g}"
            interval = "" if lower is None or upper is None else f" [{_number(lower, percent)}, {_number(upper, percent)}]"
            parts.append(f'<circle cx="{axis.x(value):.1f}" cy="{y}" r="4.5" fill="#4c78a8"><title>{escape(label)}: {shown}{interval}</title></circle>')
    return _svg(height, "".join(parts), title)
