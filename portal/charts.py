"""Server-rendered charts: numbers in, SVG geometry out (the templates draw it; no JavaScript chart library).

Pure functions over plain values, so they are tested without a database or a browser. SVG attributes, not
inline styles, carry every size, so the charts survive a strict content security policy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol


class Sample(Protocol):
    taken_at: datetime
    limit: int
    usage: int
    borrowed: int
    lent: int


# --- stacked bars -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BarSegment:
    name: str
    value: int
    x: float  # percent of the bar
    width: float  # percent of the bar


def stacked_bar(parts: Sequence[tuple[str, int]], total: int) -> list[BarSegment]:
    """Lay `parts` side by side on a bar of `total` (percent units); parts beyond it are squeezed in."""
    scale = max(total, sum(value for _, value in parts), 1)
    segments, x = [], 0.0
    for name, value in parts:
        width = 100 * max(value, 0) / scale
        segments.append(BarSegment(name=name, value=value, x=round(x, 3), width=round(width, 3)))
        x += width
    return segments


# --- utilization over time --------------------------------------------------------------------------------

# The layers of a share's chart, bottom to top: instances it uses within its limit, capacity of its limit that
# others borrow from it, and instances it borrows above its limit. Lent and borrowed never coexist for one
# share and type (borrowing means the limit is in use), so the stack never exceeds what was really held.
LAYERS = ("owned", "lent", "borrowed")


@dataclass(frozen=True)
class UsageChart:
    width: int
    height: int
    plot_left: int
    plot_bottom: int
    y_max: int
    areas: dict[str, str]  # layer -> SVG path `d`
    limit_path: str
    y_ticks: list[tuple[float, int]]
    x_ticks: list[tuple[float, str]]
    latest: dict[str, int] = field(default_factory=dict)
    latest_at: datetime | None = None

    @property
    def empty(self) -> bool:
        return not self.latest


def _nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50... that is >= value: tidy axis maxima."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= value:
                return step * factor
        step *= 10


def _bucket_values(
    samples: Sequence[Sample], *, start: datetime, end: datetime, buckets: int
) -> list[dict[str, int] | None]:
    """The last sample in each time bucket, carried over buckets without one; None before the first."""
    span = (end - start).total_seconds()
    values: list[dict[str, int] | None] = [None] * buckets
    for sample in samples:
        offset = (sample.taken_at - start).total_seconds()
        if offset < 0 or offset > span:
            continue
        index = min(buckets - 1, int(offset / span * buckets))
        owned = max(0, sample.usage - sample.borrowed)
        values[index] = {
            "owned": owned,
            "lent": sample.lent,
            "borrowed": sample.borrowed,
            "limit": sample.limit,
        }
    # The state a sample records holds until the next one: carry it, and carry the one before the window in.
    previous = None
    earlier = [s for s in samples if s.taken_at < start]
    if earlier:
        last = earlier[-1]
        previous = {
            "owned": max(0, last.usage - last.borrowed),
            "lent": last.lent,
            "borrowed": last.borrowed,
            "limit": last.limit,
        }
    for index, value in enumerate(values):
        if value is None:
            values[index] = previous
        else:
            previous = value
    return values


def _runs(values: list[dict[str, int] | None], key) -> list[tuple[int, int, tuple]]:
    """Merge consecutive buckets with the same key into (first, last + 1, key) runs; gaps (None) end a run."""
    runs: list[tuple[int, int, tuple]] = []
    for index, value in enumerate(values):
        if value is None:
            continue
        k = key(value)
        if runs and runs[-1][1] == index and runs[-1][2] == k:
            runs[-1] = (runs[-1][0], index + 1, k)
        else:
            runs.append((index, index + 1, k))
    return runs


def usage_chart(
    samples: Sequence[Sample],
    *,
    start: datetime,
    end: datetime,
    width: int = 640,
    height: int = 150,
    buckets: int = 240,
) -> UsageChart:
    """A stacked step-area chart of owned, lent and borrowed instances with the limit as a line.

    Samples are downsampled to `buckets` columns (the last sample of each wins, so every column is one
    consistent moment), and runs of equal columns merge, so a week of samples stays a small path.
    """
    # Room for tick labels of up to 30 units: the narrower the chart is shown, the larger its labels are
    # drawn, so that they stay 11 px on screen (`.usage-chart` in app.css).
    plot_left, plot_bottom, top = 40, height - 38, 16
    plot_width, plot_height = width - plot_left - 4, plot_bottom - top
    samples = sorted(samples, key=lambda s: s.taken_at)
    values = _bucket_values(samples, start=start, end=end, buckets=buckets)
    present = [v for v in values if v is not None]
    peak = max((max(v["limit"], v["owned"] + v["lent"] + v["borrowed"]) for v in present), default=0)
    y_max = _nice_ceiling(max(peak, 1))

    def x_at(index: int) -> float:
        return round(plot_left + plot_width * index / buckets, 2)

    def y_at(value: float) -> float:
        return round(plot_bottom - plot_height * value / y_max, 2)

    areas: dict[str, str] = {}
    for depth, layer in enumerate(LAYERS):
        below = LAYERS[:depth]

        def bounds(v, below=below, layer=layer):
            lower = sum(v[name] for name in below)
            return (lower, lower + v[layer])

        parts = []
        for first, last, (lower, upper) in _runs(values, bounds):
            if upper == lower:
                continue
            x0, x1 = x_at(first), x_at(last)
            parts.append(f"M{x0},{y_at(lower)}H{x1}V{y_at(upper)}H{x0}Z")
        areas[layer] = "".join(parts)

    limit_parts = []
    for first, last, (limit,) in _runs(values, lambda v: (v["limit"],)):
        limit_parts.append(f"M{x_at(first)},{y_at(limit)}H{x_at(last)}")
    steps = [0, y_max // 2, y_max] if y_max >= 2 else [0, y_max]
    y_ticks = [(y_at(value), value) for value in sorted(set(steps))]
    span = end - start
    label = "%H:%M" if span <= timedelta(days=1) else "%m-%d"
    x_ticks = [
        (round(plot_left + plot_width * i / 4, 2), (start + span * i / 4).strftime(label)) for i in range(5)
    ]
    latest = dict(present[-1]) if present else {}
    shown = [sample.taken_at for sample in samples if sample.taken_at <= end]
    latest_at = shown[-1] if present and shown else None
    return UsageChart(
        width=width,
        height=height,
        plot_left=plot_left,
        plot_bottom=plot_bottom,
        y_max=y_max,
        areas=areas,
        limit_path="".join(limit_parts),
        y_ticks=y_ticks,
        x_ticks=x_ticks,
        latest=latest,
        latest_at=latest_at,
    )


# --- inlined SVG ---------------------------------------------------------------------------------------

_ACTIVE_CONTENT = re.compile(
    r"<\s*(script|foreignObject|iframe|object|embed)\b|\son\w+\s*=|javascript:", re.IGNORECASE
)


def svg_problem(svg: str) -> str | None:
    """Why an SVG is not safe to put in a page as it is (it must be one <svg> element with no script, event
    handler or embedded document), or None. The chart functions escape every text they draw: this checks."""
    text = svg.strip()
    if not text.startswith("<svg") or not text.endswith("</svg>") or text.count("<svg") != 1:
        return "it is not a single <svg> element"
    found = _ACTIVE_CONTENT.search(text)
    if found:
        return f"it holds active content ({found.group(0).strip()})"
    return None
