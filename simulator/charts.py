"""The replay's charts as SVG written by hand (no plotting dependency; the pages can inline them as they are).

- `utilization_svg`: GPUs in use over time, stacked by share, with the environment's on-demand capacity;
- `waits_svg`: wait-time distributions, one box per configuration side by side, for all jobs and per share
  (box p25-p75, line p50, whiskers p5-p95, dot p99, on a log scale).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape

from .metrics import percentile

SHARE_COLORS = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
    "#1f77b4",
    "#8c564b",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#c5b0d5",
    "#c49c94",
)
CONFIG_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2")
FONT = 'font-family="Helvetica, Arial, sans-serif"'


def _svg(width: int, height: int, body: list[str]) -> str:
    return (
        "\n".join(
            [
                f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                f'viewBox="0 0 {width} {height}" {FONT} font-size="11">',
                f'<rect width="{width}" height="{height}" fill="white"/>',
                *body,
                "</svg>",
            ]
        )
        + "\n"
    )


def _text(x: float, y: float, text: str, *, anchor: str = "start", size: int = 11, extra: str = "") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" {extra}>'
        f"{escape(text)}</text>"
    )


def _nice_step(span: float, ticks: int = 5) -> float:
    raw = span / max(1, ticks)
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= factor * magnitude:
            return factor * magnitude
    return 10 * magnitude


def utilization_svg(
    *,
    title: str,
    times: Sequence[float],
    gpus_in_use: Mapping[str, Sequence[float]],
    capacity_gpus: float,
    credit: str = "",
) -> str:
    """GPUs in use per share over time (time-weighted means per slice), stacked, with the capacity line."""
    width, height = 960, 420
    left, right, top, bottom = 60, 170, 36, 70
    plot_w, plot_h = width - left - right, height - top - bottom
    shares = list(gpus_in_use)
    totals = [sum(gpus_in_use[s][i] for s in shares) for i in range(len(times))]
    # The data fills the chart: when use stays under half the capacity, the scale ends above the use and the
    # capacity line is named instead of drawn near the top of an empty chart.
    peak = max([*totals, 1.0])
    capacity_shown = capacity_gpus <= 2 * peak
    y_max = (max(capacity_gpus, peak) if capacity_shown else peak) * 1.08
    start, end = (times[0], times[-1]) if times else (0.0, 1.0)
    half = (end - start) / max(1, len(times) - 1) / 2
    start, end = start - half, end + half

    def x(t: float) -> float:
        return left + (t - start) / (end - start) * plot_w

    def y(v: float) -> float:
        return top + plot_h - v / y_max * plot_h

    body = [_text(left, 22, title, size=14, extra='font-weight="bold"')]
    step = _nice_step(y_max)
    value = 0.0
    while value <= y_max:
        body.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" '
            f'stroke="#e5e5e5"/>'
        )
        body.append(_text(left - 6, y(value) + 4, f"{value:g}", anchor="end"))
        value += step
    for t, label in _time_ticks(start, end):
        body.append(
            f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{top + plot_h}" y2="{top + plot_h + 4}" '
            f'stroke="#666"/>'
        )
        body.append(_text(x(t), top + plot_h + 17, label, anchor="middle"))
    base = [0.0] * len(times)
    for index, share in enumerate(shares):
        values = gpus_in_use[share]
        upper = [b + v for b, v in zip(base, values, strict=True)]
        points = [(x(t), y(u)) for t, u in zip(times, upper, strict=True)]
        points += [(x(t), y(b)) for t, b in reversed(list(zip(times, base, strict=True)))]
        color = SHARE_COLORS[index % len(SHARE_COLORS)]
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
        body.append(
            f'<polygon points="{path}" fill="{color}" fill-opacity="0.85" stroke="none">'
            f"<title>{escape(share)}</title></polygon>"
        )
        base = upper
        legend_y = top + 14 * index
        body.append(f'<rect x="{left + plot_w + 16}" y="{legend_y}" width="10" height="10" fill="{color}"/>')
        body.append(_text(left + plot_w + 31, legend_y + 9, share))
    if capacity_shown:
        body.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y(capacity_gpus):.1f}" y2="{y(capacity_gpus):.1f}" '
            f'stroke="black" stroke-dasharray="5,4"/>'
        )
        body.append(
            _text(
                left + plot_w - 4,
                y(capacity_gpus) - 5,
                f"on-demand capacity {capacity_gpus:g} GPUs",
                anchor="end",
            )
        )
    else:
        body.append(
            _text(
                left + plot_w - 4,
                top + 15,
                f"on-demand capacity {capacity_gpus:g} GPUs, above this scale",
                anchor="end",
            )
        )
    body.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>')
    body.append(
        _text(
            16,
            top + plot_h / 2,
            "GPUs in use",
            anchor="middle",
            extra=f'transform="rotate(-90 16 {top + plot_h / 2:.1f})"',
        )
    )
    if credit:
        body.append(_text(left, height - 14, credit, size=11, extra='fill="#555"'))
    return _svg(width, height, body)


def _time_ticks(start: float, end: float) -> list[tuple[float, str]]:
    """Up to about ten ticks on whole days (`Oct 09`), or on whole hours (`14:00`) for a window of two days
    or less, so a short window is labelled too."""
    span = end - start
    if span > 2 * 86400:
        unit, fmt = 86400.0, "%b %d"
    else:
        unit, fmt = 3600.0, "%H:%M"
    first = math.ceil(start / unit) * unit
    count = int((end - first) // unit) + 1
    every = max(1, math.ceil(count / 10))
    if unit == 3600.0:
        every = next((n for n in (1, 2, 3, 4, 6, 12, 24) if n >= every), every)
    return [
        (first + k * unit, datetime.fromtimestamp(first + k * unit, UTC).strftime(fmt))
        for k in range(0, count, every)
        if first + k * unit <= end
    ]


WAIT_TICKS = ((10, "10s"), (60, "1m"), (600, "10m"), (3600, "1h"), (86400, "1d"), (864000, "10d"))


def waits_svg(
    *,
    title: str,
    waits: Mapping[str, Mapping[str, Sequence[float]]],
    never_started: Mapping[str, Mapping[str, int]] | None = None,
    credit: str = "",
) -> str:
    """`waits[group][configuration]`: sorted waits in seconds; a box per configuration, side by side."""
    groups = list(waits)
    configs: list[str] = []
    for by_config in waits.values():
        configs += [c for c in by_config if c not in configs]
    box_w, gap = 14, 18
    group_w = len(configs) * box_w + gap
    left, right, top, bottom = 60, 20, 54, 104
    width = max(640, left + right + len(groups) * group_w)
    height = 440
    plot_h = height - top - bottom
    low, high = (
        math.log10(10),
        math.log10(
            max(
                3600.0,
                max((v[-1] for by_config in waits.values() for v in by_config.values() if v), default=10.0),
            )
        ),
    )

    def y(seconds: float) -> float:
        value = math.log10(max(seconds, 10.0))
        return top + plot_h - (value - low) / (high - low) * plot_h

    body = [_text(left, 22, title, size=14, extra='font-weight="bold"')]
    for index, config in enumerate(configs):
        color = CONFIG_COLORS[index % len(CONFIG_COLORS)]
        body.append(f'<rect x="{left + 150 * index}" y="32" width="10" height="10" fill="{color}"/>')
        body.append(_text(left + 150 * index + 14, 41, config))
    for seconds, label in WAIT_TICKS:
        if seconds <= 10**high:
            body.append(
                f'<line x1="{left}" x2="{width - right}" y1="{y(seconds):.1f}" y2="{y(seconds):.1f}" '
                f'stroke="#e5e5e5"/>'
            )
            body.append(_text(left - 6, y(seconds) + 4, label, anchor="end"))
    for g, group in enumerate(groups):
        x0 = left + gap / 2 + g * group_w
        for c, config in enumerate(configs):
            values = waits[group].get(config, ())
            cx = x0 + c * box_w + box_w / 2
            color = CONFIG_COLORS[c % len(CONFIG_COLORS)]
            if values:
                p5, p25, p50, p75, p95, p99 = (percentile(values, q) for q in (5, 25, 50, 75, 95, 99))
                body.append(
                    f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(p95):.1f}" y2="{y(p5):.1f}" stroke="{color}"/>'
                )
                body.append(
                    f'<rect x="{cx - box_w / 2 + 2:.1f}" y="{y(p75):.1f}" width="{box_w - 4}" '
                    f'height="{max(1.0, y(p25) - y(p75)):.1f}" fill="{color}" fill-opacity="0.55" '
                    f'stroke="{color}"><title>{escape(group)} / {escape(config)}: p50 {p50:.0f}s, '
                    f"p95 {p95:.0f}s, p99 {p99:.0f}s, {len(values)} jobs</title></rect>"
                )
                body.append(
                    f'<line x1="{cx - box_w / 2 + 2:.1f}" x2="{cx + box_w / 2 - 2:.1f}" y1="{y(p50):.1f}" '
                    f'y2="{y(p50):.1f}" stroke="black" stroke-width="1.5"/>'
                )
                body.append(f'<circle cx="{cx:.1f}" cy="{y(p99):.1f}" r="2" fill="{color}"/>')
            missing = (never_started or {}).get(group, {}).get(config, 0)
            if missing:
                body.append(
                    _text(
                        cx,
                        top + plot_h + 32 + 12 * (c % 2),
                        str(missing),
                        anchor="middle",
                        size=11,
                        extra=f'fill="{color}"',
                    )
                )
        body.append(_text(x0 + (group_w - gap) / 2, top + plot_h + 16, group, anchor="middle"))
    body.append(
        f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{plot_h}" fill="none" '
        f'stroke="#999"/>'
    )
    body.append(
        _text(
            16,
            top + plot_h / 2,
            "wait (first placement - arrival)",
            anchor="middle",
            extra=f'transform="rotate(-90 16 {top + plot_h / 2:.1f})"',
        )
    )
    note = "box p25-p75, line p50, whiskers p5-p95, dot p99; small numbers under a group: jobs never started"
    body.append(_text(left, height - 32, note, size=11, extra='fill="#555"'))
    if credit:
        body.append(_text(left, height - 14, credit, size=11, extra='fill="#555"'))
    return _svg(width, height, body)
