"""Small, dependency-free SVG charts for the HTML report (inline, so the page needs no network).

Each function returns an `<svg>` element as text. Points carry a `<title>`, which browsers
show as a tooltip. Scales are linear; an axis runs from its first round tick to its last, both
at or beyond the data, and carries a title. The viewBox is WIDTH units wide, about the column of
a 700-pixel window, and the page draws a chart at most MAX_SCALE times that wide: its 11 and 12
unit text reads at 11 to 15 CSS px in any window from 700 pixels up. Each interval (its bar or
whisker, caps and open ends) is one `<g class="interval-mark">`, apart from every other one.
"""
from __future__ import annotations

import html
import math
import re
from typing import Callable, Sequence

WIDTH = 640
MAX_SCALE = 1.28  # the page's widest chart: 820 px (html.STYLE), 12-unit text at 15 px as the body's
ROW = 22
TOP = 30  # the first row's centre; objective lines write their labels above it
BOTTOM = 46  # below the last row: tick labels and the axis title
RIGHT = 24
CHAR = 6.6  # the mean advance of a 12 px sans-serif character, for the width of row labels
PALETTE = {"direct": "#4c78a8", "forgeloopBalanced": "#f58518", "forgeloopAdaptive": "#54a24b"}
OUTLIER = "#d62728"
MINUS = "\u2212"


# Unicode's direction controls (embeddings, overrides, isolates, marks): from data, one would reorder the
# text after it on the page ("Trojan Source"); they are shown as their code points instead
_DIRECTION_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def escape(text: str, quote: bool = True) -> str:
    """Text from data as HTML (and SVG) text: `&`, `<`, `>` and quotes escaped, and a direction control
    shown as its code point (`<U+202E>` on the page), never acted on."""
    return _DIRECTION_CONTROLS.sub(lambda found: f"&lt;U+{ord(found.group()):04X}&gt;", html.escape(text, quote))


def ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round ticks, about `count` steps, from at or below `low` to at or above `high`."""
    if high <= low:
        high = low + 1
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = min((m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9)), default=raw)
    first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
    return [round(index * step, 10) + 0.0 for index in range(first, last + 1)]  # + 0.0: no -0.0


def _signed(text: str) -> str:
    return text.replace("-", MINUS, 1) if text.startswith("-") else text


def _rounded(value: float, digits: int = 0) -> float:
    shown = round(value, digits)
    return 0.0 if shown == 0 else shown  # -0.3 shown as 0 is 0, not "-0"


def share(value: float) -> str:
    """A proportion (0..1) as a percentage: 0.4 → "40%"."""
    return _signed(f"{_rounded(value * 100):.0f}%")


def percent(value: float) -> str:
    """A value already in percent: 35 → "35%"."""
    return _signed(f"{_rounded(value):.0f}%")


def points(value: float) -> str:
    """A difference of two proportions in percentage points: -0.1 → "−10 pp", 0 → "0"."""
    shown = _rounded(value * 100)
    return "0" if shown == 0 else _signed(f"{shown:+.0f} pp")


def count(value: float) -> str:
    """A count such as tokens: 150000 → "150k"."""
    if abs(value) >= 1e6:
        return _signed(f"{_rounded(value / 1e6, 1):g}M")
    if abs(value) >= 1e3:
        return _signed(f"{_rounded(value / 1e3):.0f}k")
    return _signed(f"{_rounded(value, 6):g}")


class _Frame:
    """The plot's horizontal scale and its rows: labels on the left, values in [left, WIDTH - RIGHT]."""

    def __init__(self, low: float, high: float, labels: Sequence[str]):
        self.ticks = ticks(low, high)
        self.low, self.high = self.ticks[0], self.ticks[-1]
        longest = max((len(label) for label in labels), default=0)
        self.left = round(min(max(CHAR * longest + 16, 120), WIDTH * 0.5))
        self.rows = len(labels)
        self.height = TOP + ROW * max(self.rows - 1, 0) + 14 + BOTTOM
        self.bottom = self.height - BOTTOM  # the plot's lower edge

    def x(self, value: float) -> float:
        return self.left + (value - self.low) / (self.high - self.low) * (WIDTH - self.left - RIGHT)

    def y(self, index: int) -> int:
        return TOP + ROW * index

    def axis(self, label: Callable[[float], str], title: str) -> str:
        parts = ['<g class="axis">']
        for tick in self.ticks:
            x = self.x(tick)
            parts.append(f'<line x1="{x:.1f}" y1="{TOP - 10}" x2="{x:.1f}" y2="{self.bottom}" stroke="#e5e5e5"/>'
                         f'<text x="{x:.1f}" y="{self.bottom + 14}" text-anchor="middle" class="tick">{escape(label(tick))}</text>')
        middle = (self.left + WIDTH - RIGHT) / 2
        parts.append(f'<text x="{middle:.1f}" y="{self.height - 8}" text-anchor="middle" class="axis-title">{escape(title)}</text>')
        return "".join(parts) + "</g>"

    def label(self, index: int, text: str) -> str:
        """A row's label, right-aligned before the plot; one longer than the room there keeps its start
        and its end (what tells long scenario ids and their modes apart) around an ellipsis, the whole
        of it in the label's tooltip."""
        room = max(8, int((self.left - 12) / CHAR))
        shown = text if len(text) <= room else text[:(room - 1) // 2] + "\u2026" + text[len(text) - room // 2:]
        tip = f"<title>{escape(text)}</title>" if shown != text else ""
        return (f'<text x="{self.left - 8}" y="{self.y(index) + 4}" text-anchor="end" class="label">{escape(shown)}'
                f'{tip}</text>')

    def vertical(self, value: float, text: str, *, anchor: str = "start", color: str = OUTLIER) -> str:
        x = self.x(value)
        shift = 3 if anchor == "start" else -3
        return (f'<line x1="{x:.1f}" y1="{TOP - 14}" x2="{x:.1f}" y2="{self.bottom}" stroke="{color}" stroke-dasharray="5,4"/>'
                f'<text x="{x + shift:.1f}" y="{TOP - 16}" text-anchor="{anchor}" class="tick" fill="{color}">{escape(text)}</text>')


def _svg(frame: _Frame, body: str, title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" aria-label="{escape(title)}" '
        f'viewBox="0 0 {WIDTH} {frame.height}" width="100%" preserveAspectRatio="xMinYMin meet">{body}</svg>'
    )


def strip_chart(groups: Sequence[tuple[str, str, Sequence[float], Sequence[bool]]], axis_title: str, title: str,
                unit: str = "tokens") -> str:
    """One row per (label, mode): every value a dot, the middle half a box, the median a bar;
    outliers in red."""
    values = [v for _, _, vs, _ in groups for v in vs]
    if not values:
        return '<p class="empty">No values.</p>'
    frame = _Frame(min(0.0, min(values)), max(values), [label for label, *_ in groups])
    parts = [frame.axis(count, axis_title), '<g class="data">']
    for index, (label, mode, group_values, outliers) in enumerate(groups):
        y = frame.y(index)
        color = PALETTE.get(mode, "#777")
        parts.append(frame.label(index, label))
        ordered = sorted(group_values)
        if ordered:
            q1, median, q3 = (ordered[int((len(ordered) - 1) * f)] for f in (0.25, 0.5, 0.75))
            parts.append(
                f'<rect x="{frame.x(q1):.1f}" y="{y - 7}" width="{max(frame.x(q3) - frame.x(q1), 1):.1f}" height="14" '
                f'fill="{color}" fill-opacity="0.15" stroke="{color}"/>'
                f'<line x1="{frame.x(median):.1f}" y1="{y - 8}" x2="{frame.x(median):.1f}" y2="{y + 8}" stroke="{color}" stroke-width="2"/>'
            )
        for value, outlier in zip(group_values, outliers):
            fill = OUTLIER if outlier else color
            radius = 4 if outlier else 2.5
            parts.append(
                f'<circle cx="{frame.x(value):.1f}" cy="{y}" r="{radius}" fill="{fill}" fill-opacity="0.8">'
                f"<title>{escape(label)}: {value:g} {escape(unit)}{' (outlier)' if outlier else ''}</title></circle>"
            )
    return _svg(frame, "".join(parts) + "</g>", title)


def overhead_chart(series: Sequence[tuple[str, Sequence[tuple[int, float, bool]]]], lines: Sequence[tuple[float, str]],
                   axis_title: str, title: str) -> str:
    """One row per scenario: each paired run's token overhead (percent) as a dot (low-baseline
    pairs hollow), with vertical objective lines."""
    if not series:
        return '<p class="empty">No comparable pairs.</p>'
    values = [v for _, run_points in series for _, v, _ in run_points] + [value for value, _ in lines]
    frame = _Frame(min(min(values), 0.0), max(values), [label for label, _ in series])
    parts = [frame.axis(percent, axis_title)]
    for position, (value, label) in enumerate(lines):
        # the first of two close lines writes its label to its left, keeping them apart
        parts.append(frame.vertical(value, label, anchor="end" if position == 0 and len(lines) > 1 else "start"))
    zero = frame.x(0)
    parts.append(f'<line x1="{zero:.1f}" y1="{TOP - 10}" x2="{zero:.1f}" y2="{frame.bottom}" stroke="#999"/><g class="data">')
    adaptive = PALETTE["forgeloopAdaptive"]
    for index, (label, run_points) in enumerate(series):
        parts.append(frame.label(index, label))
        for run_index, value, low_baseline in run_points:
            style = f'fill="none" stroke="{adaptive}"' if low_baseline else f'fill="{adaptive}"'
            shown = _signed(f"{value:+g}")
            parts.append(f'<circle cx="{frame.x(value):.1f}" cy="{frame.y(index)}" r="3.5" {style}>'
                         f"<title>run {run_index}: {shown}%{' (low baseline)' if low_baseline else ''}</title></circle>")
    return _svg(frame, "".join(parts) + "</g>", title)


def interval_chart(rows: Sequence[tuple[str, float | None, float | None, float | None]], axis_title: str, title: str, *,
                   low: float | None = None, high: float | None = None, line: tuple[float, str] | None = None,
                   label: Callable[[float], str] = share) -> str:
    """One row per label: the estimate as a dot and its interval as a bar (a value that is missing or
    not finite, as a Hajek mean under an overflowing weight, is not drawn). `label` formats ticks
    and tooltips (`share`, `points`, `percent`, `count`)."""
    if not rows:
        return '<p class="empty">Nothing to show yet.</p>'
    rows = [(name, *(v if v is not None and math.isfinite(v) else None for v in values)) for name, *values in rows]
    values = [v for _, *vs in rows for v in vs if v is not None] + ([line[0]] if line else [])
    frame = _Frame(low if low is not None else min(values + [0.0]), high if high is not None else max(values + [0.0]),
                   [name for name, *_ in rows])
    parts = [frame.axis(label, axis_title)]
    if line is not None:
        parts.append(frame.vertical(*line))
    parts.append('<g class="data">')
    for index, (name, value, lower, upper) in enumerate(rows):
        y = frame.y(index)
        parts.append(frame.label(index, name))
        if lower is not None and upper is not None:
            parts.append(f'<g class="interval-mark"><line class="interval" x1="{frame.x(lower):.1f}" y1="{y}" '
                         f'x2="{frame.x(upper):.1f}" y2="{y}" stroke="#4c78a8" stroke-width="3" stroke-opacity="0.5"/></g>')
        if value is not None:
            interval = "" if lower is None or upper is None else f", 95% interval {label(lower)} to {label(upper)}"
            parts.append(f'<circle cx="{frame.x(value):.1f}" cy="{y}" r="4.5" fill="#4c78a8">'
                         f'<title>{escape(name)}: {escape(label(value) + interval)}</title></circle>')
    return _svg(frame, "".join(parts) + "</g>", title)


CURVE_HEIGHT = 300
CURVE_LEFT = 64  # y tick labels ("100%") and the rotated y title
CURVE_TOP = 16
DODGE = 9  # a series' points sit this far from the next one's at the same x, so whiskers do not hide each other
CAP = 3  # half the width of a whisker's cap: caps of neighbouring series stay DODGE - 2 * CAP apart


def _snug_ticks(low: float, high: float) -> list[float]:
    """Round ticks from at or below `low` to at or above `high`, of the step counts 4 to 8 the one
    that overshoots the data least (fewer ticks on a tie)."""
    candidates = [ticks(low, high, count) for count in range(4, 9)]
    return min(candidates, key=lambda found: ((found[-1] - found[0]) - (high - low), len(found)))


def curve_chart(series: Sequence[tuple[str, Sequence[tuple[float, float, float | None, float | None, str]]]],
                x_title: str, y_title: str, title: str) -> str:
    """A line per series over x (e.g. days), y a share 0..1: each point a dot with its interval as a
    whisker, a legend of the series' colours (SERIES_COLOURS in order) above. `series`: (name,
    [(x, y, low, high, tooltip)]); the vertical axis's ticks carry data-axis="y".
    A series' points are set `DODGE` apart from the next series' at the same x; the x axis reaches
    past the dodged whiskers to a round tick."""
    series = [(name, [p for p in points if p[1] is not None and math.isfinite(p[1])]) for name, points in series]
    series = [(name, points) for name, points in series if points]
    if not series:
        return '<p class="empty">Nothing to show yet.</p>'
    xs = [p[0] for _, points in series for p in points]
    width = WIDTH - CURVE_LEFT - RIGHT
    spread = (len(series) - 1) / 2 * DODGE + CAP  # how far a dodged whisker reaches from its x, in units
    low, high = min(0.0, min(xs)), max(max(xs), 5.0)
    x_ticks = _snug_ticks(low, high)
    for _ in range(6):  # widen until every whisker lies within the axis
        per_unit = width / (x_ticks[-1] - x_ticks[0])
        reach_low, reach_high = min(low, min(xs) - spread / per_unit), max(high, max(xs) + spread / per_unit)
        if x_ticks[0] <= reach_low and reach_high <= x_ticks[-1]:
            break
        x_ticks = _snug_ticks(reach_low, reach_high)
    y_ticks = ticks(0.0, 1.0)
    bottom = CURVE_HEIGHT - BOTTOM

    def x_at(value: float) -> float:
        return CURVE_LEFT + (value - x_ticks[0]) / (x_ticks[-1] - x_ticks[0]) * width

    def y_at(value: float) -> float:
        return bottom - (value - y_ticks[0]) / (y_ticks[-1] - y_ticks[0]) * (bottom - CURVE_TOP)

    parts = ['<g class="axis">']
    for tick in x_ticks:
        x = x_at(tick)
        parts.append(f'<line x1="{x:.1f}" y1="{CURVE_TOP}" x2="{x:.1f}" y2="{bottom}" stroke="#e5e5e5"/>'
                     f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle" class="tick">{escape(count(tick))}</text>')
    parts.append(f'<text x="{CURVE_LEFT + width / 2:.1f}" y="{CURVE_HEIGHT - 8}" text-anchor="middle" '
                 f'class="axis-title">{escape(x_title)}</text>')
    for tick in y_ticks:
        y = y_at(tick)
        parts.append(f'<line x1="{CURVE_LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#e5e5e5"/>'
                     f'<text x="{CURVE_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick" data-axis="y">'
                     f'{escape(share(tick))}</text>')
    middle = (CURVE_TOP + bottom) / 2
    parts.append(f'<text x="16" y="{middle:.1f}" transform="rotate(-90 16 {middle:.1f})" text-anchor="middle" '
                 f'class="axis-title">{escape(y_title)}</text></g><g class="data">')
    legend = []
    for index, (name, points) in enumerate(series):
        colour = SERIES_COLOURS[index % len(SERIES_COLOURS)]
        shift = (index - (len(series) - 1) / 2) * DODGE
        placed = [(x_at(point[0]) + shift, point) for point in sorted(points, key=lambda point: point[0])]
        legend.append(f'<li><i class="dot" style="background:{colour}"></i>{escape(name)}</li>')
        path = " ".join(f"{x:.1f},{y_at(point[1]):.1f}" for x, point in placed)
        parts.append(f'<g class="series"><polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2" '
                     f'stroke-opacity="0.8"/>')
        for x, (_, value, lower, upper, tooltip) in placed:
            if lower is not None and upper is not None:
                y1, y2 = y_at(lower), y_at(upper)
                parts.append(f'<g class="interval-mark"><line class="interval" x1="{x:.1f}" y1="{y1:.1f}" x2="{x:.1f}" '
                             f'y2="{y2:.1f}" stroke="{colour}" stroke-width="1.5"/>'
                             + "".join(f'<line x1="{x - CAP:.1f}" y1="{y:.1f}" x2="{x + CAP:.1f}" y2="{y:.1f}" '
                                       f'stroke="{colour}" stroke-width="1.5"/>' for y in (y1, y2)) + "</g>")
            parts.append(f'<circle cx="{x:.1f}" cy="{y_at(value):.1f}" r="4" fill="{colour}">'
                         f'<title>{escape(tooltip)}</title></circle>')
        parts.append("</g>")
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" aria-label="{escape(title)}" '
           f'viewBox="0 0 {WIDTH} {CURVE_HEIGHT}" width="100%" preserveAspectRatio="xMinYMin meet">'
           + "".join(parts) + "</g></svg>")
    return '<ul class="legend">' + "".join(legend) + "</ul>" + svg


def _open_end(x: float, y: int, direction: int, colour: str) -> str:
    """An arrowhead at the plot's edge: the interval goes on past it (the sample cannot bound it)."""
    return (f'<path class="open-end" d="M{x:.1f},{y} l{-6 * direction},-5 v10 z" fill="{colour}" fill-opacity="0.6">'
            "<title>open: the pairs cannot bound this end</title></path>")


def estimate_chart(rows: Sequence[tuple[str, float | None, float | None, float | None, str]],
                   lines: Sequence[tuple[float, str]], axis_title: str, title: str) -> str:
    """One row per (label, estimate, low, high, colour): the estimate as a dot, its interval as a bar;
    an end that is None while the estimate is known is open, drawn to the plot's edge with an
    arrowhead. Values in percent; `lines` are dashed vertical marks (objectives)."""
    known = [(name, value, low, high, colour) for name, value, low, high, colour in rows if value is not None]
    if not known:
        return '<p class="empty">No comparable pairs.</p>'
    values = [v for _, *vs, _ in known for v in vs if v is not None] + [value for value, _ in lines] + [0.0]
    frame = _Frame(min(values), max(values), [name for name, *_ in known])
    parts = [frame.axis(percent, axis_title)]
    for position, (value, label) in enumerate(lines):
        parts.append(frame.vertical(value, label, anchor="end" if position == 0 and len(lines) > 1 else "start"))
    parts.append('<g class="data">')
    for index, (name, value, low, high, colour) in enumerate(known):
        y = frame.y(index)
        parts.append(frame.label(index, name))
        left = frame.x(frame.low) if low is None else frame.x(low)
        right = frame.x(frame.high) if high is None else frame.x(high)
        parts.append(f'<g class="interval-mark"><line class="interval" x1="{left:.1f}" y1="{y}" x2="{right:.1f}" y2="{y}" '
                     f'stroke="{colour}" stroke-width="3" stroke-opacity="0.45"/>'
                     + (_open_end(left, y, -1, colour) if low is None else "")
                     + (_open_end(right, y, 1, colour) if high is None else "") + "</g>")
        ends = f"{'open' if low is None else percent(low)} to {'open' if high is None else percent(high)}"
        parts.append(f'<circle cx="{frame.x(value):.1f}" cy="{y}" r="4.5" fill="{colour}">'
                     f"<title>{escape(name)}: {escape(_signed(f'{value:+g}'))}%, 95% interval {escape(ends)}</title></circle>")
    return _svg(frame, "".join(parts) + "</g>", title)


TREND_HEIGHT = 300
TREND_LEFT = 64
TREND_TOP = 16
TREND_BOTTOM = 64
TREND_DODGE = 12  # the series' points in one x slot sit this far apart (less when the slot is narrow)
STUB = 18  # an open end: a dashed stub this long from the point towards the plot's edge, then an arrowhead
SERIES_COLOURS = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2", "#9d755d", "#eeca3b")


def _open_stub(x: float, start: float, edge: float, half: float, colour: str, width: float) -> str:
    """An end the data cannot bound: a dashed stub from `start` towards `edge` (no further) and an
    arrowhead `half` wide each side pointing on, past the end of the stub."""
    direction = 1 if edge > start else -1
    end = min(start + STUB, edge) if direction > 0 else max(start - STUB, edge)
    base = end - direction * 1.5 * half
    return (f'<line x1="{x:.1f}" y1="{start:.1f}" x2="{x:.1f}" y2="{end:.1f}" stroke="{colour}" stroke-opacity="0.6" '
            f'stroke-width="{width:g}" stroke-dasharray="3,2"/>'
            f'<path class="open-end" d="M{x:.1f},{end:.1f} L{x - half:.1f},{base:.1f} L{x + half:.1f},{base:.1f} Z" '
            f'fill="{colour}" fill-opacity="0.8"><title>open: the pairs cannot bound this end</title></path>')


def _joined_runs(present: list[tuple], alone: Sequence[bool]) -> list[list[tuple]]:
    """The stretches of consecutive points (x index first) a line may join: both ends of each
    segment at an x position that is the only one of its time."""
    runs: list[list[tuple]] = []
    for point in present:
        if runs and alone[runs[-1][-1][0]] and alone[point[0]]:
            runs[-1].append(point)
        else:
            runs.append([point])
    return [run for run in runs if len(run) > 1]


def trend_chart(series: Sequence[tuple[str, Sequence[tuple[int, float | None, float | None, float | None]]]],
                x_labels: Sequence[str], axis_title: str, x_title: str, title: str,
                x_names: Sequence[str] | None = None, x_heads: Sequence[str] | None = None,
                x_times: Sequence[str] | None = None) -> str:
    """A series per name over categorical x positions (`x_labels`, oldest first; `x_names` name
    them in tooltips; `x_heads`, a line above each label where every one fits its slot): each point
    (x index, value, low, high) a dot with its interval as a whisker; an open end is a short dashed
    stub and an arrowhead. The series' points in a slot are set apart, in SERIES_COLOURS in order.
    `x_times`, the time of each position: a line joins a series' consecutive points only where both
    positions are the one of their time, so positions that share a time (run sets of one date) are
    points, not a series in time (without `x_times`, every point is joined)."""
    x_names = x_labels if x_names is None else x_names
    points_ = [(v, lo, hi) for _, values in series for _, v, lo, hi in values if v is not None]
    if not points_ or not x_labels:
        return '<p class="empty">Nothing to show yet.</p>'
    drawn = [v for triple in points_ for v in triple if v is not None] + [0.0]
    scale = ticks(min(drawn), max(drawn))
    low, high = scale[0], scale[-1]
    bottom = TREND_HEIGHT - TREND_BOTTOM
    step = (WIDTH - TREND_LEFT - RIGHT) / max(len(x_labels), 1)
    lanes = len(series)
    dodge = min(TREND_DODGE, step * 0.7 / (lanes - 1)) if lanes > 1 else 0.0
    half = min(4.0, dodge * 0.35) if lanes > 1 else 4.0  # an arrowhead's half width: neighbours' never meet
    stroke = min(2.0, dodge * 0.25) if lanes > 1 else 2.0
    times = list(x_times) if x_times is not None else [str(index) for index in range(len(x_labels))]
    alone = [times.count(time) == 1 for time in times]

    def centre(index: int) -> float:
        return TREND_LEFT + step * (index + 0.5)

    def y(value: float) -> float:
        return bottom - (value - low) / (high - low) * (bottom - TREND_TOP)

    parts = ['<g class="axis">']
    for tick in scale:
        parts.append(f'<line x1="{TREND_LEFT}" y1="{y(tick):.1f}" x2="{WIDTH - RIGHT}" y2="{y(tick):.1f}" stroke="#e5e5e5"/>'
                     f'<text x="{TREND_LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end" class="tick" data-axis="y">'
                     f'{escape(percent(tick))}</text>')
    shown_every = max(1, math.ceil(len(x_labels) / 6))  # at most 6 labels under the axis
    heads = x_heads if x_heads and max(len(head) for head in x_heads) * CHAR * 11 / 12 <= step - 8 else None
    for index, label in enumerate(x_labels):
        if index % shown_every == 0:
            if heads:
                parts.append(f'<text x="{centre(index):.1f}" y="{bottom + 16}" text-anchor="middle" class="tick">'
                             f"{escape(heads[index])}</text>")
            parts.append(f'<text x="{centre(index):.1f}" y="{bottom + (30 if heads else 16)}" text-anchor="middle" '
                         f'class="tick">{escape(label)}</text>')
    middle = (TREND_LEFT + WIDTH - RIGHT) / 2
    parts.append(f'<text x="{middle:.1f}" y="{TREND_HEIGHT - 10}" text-anchor="middle" class="axis-title">{escape(x_title)}</text>')
    parts.append(f'<text transform="translate(14 {(TREND_TOP + bottom) / 2:.1f}) rotate(-90)" text-anchor="middle" '
                 f'class="axis-title">{escape(axis_title)}</text></g><g class="data">')
    for number, (name, values) in enumerate(series):
        colour = SERIES_COLOURS[number % len(SERIES_COLOURS)]
        shift = (number - (lanes - 1) / 2) * dodge
        present = sorted((i, v, lo, hi) for i, v, lo, hi in values if v is not None)
        for run in _joined_runs(present, alone):
            path = " ".join(f"{centre(i) + shift:.1f},{y(v):.1f}" for i, v, _, _ in run)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for i, v, lo, hi in present:
            x, at = centre(i) + shift, y(v)
            mark = ""
            if lo is not None or hi is not None:  # the bounded part: between the known ends, or from one to the dot
                top, foot = at if hi is None else y(hi), at if lo is None else y(lo)
                mark += (f'<line class="interval" x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{foot:.1f}" '
                         f'stroke="{colour}" stroke-opacity="0.35" stroke-width="{stroke:g}"/>')
            if hi is None:
                mark += _open_stub(x, at, TREND_TOP, half, colour, stroke)
            if lo is None:
                mark += _open_stub(x, at, bottom, half, colour, stroke)
            parts.append(f'<g class="interval-mark">{mark}</g>')
            ends = f"{'open' if lo is None else percent(lo)} to {'open' if hi is None else percent(hi)}"
            parts.append(f'<circle cx="{x:.1f}" cy="{at:.1f}" r="4" fill="{colour}"><title>{escape(name)}, '
                         f"{escape(x_names[i])}: {escape(_signed(f'{v:+g}'))}%, 95% interval {escape(ends)}</title></circle>")
    body = "".join(parts) + "</g>"
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart trend" role="img" aria-label="{escape(title)}" '
            f'viewBox="0 0 {WIDTH} {TREND_HEIGHT}" width="100%" preserveAspectRatio="xMinYMin meet">{body}</svg>')
