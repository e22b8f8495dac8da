"""The replay's charts as SVG written by hand (no plotting dependency; the pages can inline them as they are).

- `utilization_svg`: GPUs in use over time, stacked by share, with the environment's on-demand capacity;
- `waits_svg`: wait-time distributions, one box per configuration side by side, for all jobs and per share
  (box p25-p75, line p50, whiskers p5-p95, dot p99, on a log scale).

Each draws at a desktop's size, or with `narrow=True` at a phone's (NARROW_WIDTH wide, fewer ticks, legends
below, long lines wrapped, larger text): a chart scales down to the width of the screen, and a 960-pixel chart
shown 350 pixels wide would shrink its 11-pixel text to 4.
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
HALO = 'stroke="white" stroke-width="3" paint-order="stroke"'
NARROW_WIDTH = 340
NARROW_TEXT = 12  # shown at no less than 11 px down to a 330-pixel-wide chart


def _wrap(text: str, size: int, width: float) -> list[str]:
    """`text` in lines of at most `width` pixels at font `size` (a sans-serif letter is about 0.55 em)."""
    most = max(8, int(width / (0.55 * size)))
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= most:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines or [""]


def _svg(width: int, height: int, body: list[str], size: int = 11) -> str:
    return (
        "\n".join(
            [
                f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                f'viewBox="0 0 {width} {height}" {FONT} font-size="{size}">',
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
    narrow: bool = False,
) -> str:
    """GPUs in use per share over time (time-weighted means per slice), stacked, with the capacity line."""
    shares = list(gpus_in_use)
    size = NARROW_TEXT if narrow else 11
    credit_lines = _wrap(credit, size, NARROW_WIDTH - 16) if credit and narrow else [credit] if credit else []
    if narrow:
        # The legend goes under the time axis, two shares a line; the plot takes the whole width.
        title_lines = _wrap(title, 14, NARROW_WIDTH - 16)
        legend_rows = math.ceil(len(shares) / 2)
        left, right, top = 54, 10, 24 + 18 * len(title_lines)
        bottom = 30 + 18 * legend_rows + 16 * len(credit_lines) + 8
        width, height = NARROW_WIDTH, top + 200 + bottom
    else:
        title_lines = [title]
        width, height = 960, 420
        left, right, top, bottom = 60, 170, 36, 70
    plot_w, plot_h = width - left - right, height - top - bottom
    axis_x = 12 if narrow else 16  # the axis title, clear of the tick labels
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

    body = [
        _text(8 if narrow else left, 22 + 18 * i, line, size=14, extra='font-weight="bold"')
        for i, line in enumerate(title_lines)
    ]
    step = _nice_step(y_max, ticks=4 if narrow else 5)
    value = 0.0
    while value <= y_max:
        body.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" '
            f'stroke="#e5e5e5"/>'
        )
        body.append(_text(left - 6, y(value) + 4, f"{value:g}", anchor="end", size=size))
        value += step
    for t, label in _time_ticks(start, end, most=4 if narrow else 10):
        body.append(
            f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{top + plot_h}" y2="{top + plot_h + 4}" '
            f'stroke="#666"/>'
        )
        body.append(_text(x(t), top + plot_h + 17, label, anchor="middle", size=size))
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
        if narrow:
            legend_x, legend_y = 8 + (width - 16) / 2 * (index % 2), top + plot_h + 30 + 18 * (index // 2)
        else:
            legend_x, legend_y = left + plot_w + 16, top + 14 * index
        body.append(f'<rect x="{legend_x:.1f}" y="{legend_y}" width="10" height="10" fill="{color}"/>')
        body.append(_text(legend_x + 15, legend_y + 9 + (size - 11) / 2, share, size=size))
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
                size=size,
                extra=HALO,  # readable where use rises above the capacity, over the areas
            )
        )
    else:
        body.append(
            _text(
                left + plot_w - 4,
                top + 15,
                f"{'capacity' if narrow else 'on-demand capacity'} {capacity_gpus:g} GPUs, above this scale",
                anchor="end",
                size=size,
            )
        )
    body.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>')
    body.append(
        _text(
            axis_x,
            top + plot_h / 2,
            "GPUs in use",
            anchor="middle",
            size=size,
            extra=f'transform="rotate(-90 {axis_x} {top + plot_h / 2:.1f})"',
        )
    )
    for i, line in enumerate(credit_lines):
        x0 = 8 if narrow else left
        body.append(
            _text(x0, height - 14 - 16 * (len(credit_lines) - 1 - i), line, size=size, extra='fill="#555"')
        )
    return _svg(width, height, body, size)


def _time_ticks(start: float, end: float, most: int = 10) -> list[tuple[float, str]]:
    """Up to about `most` ticks on whole days (`Oct 09`), on whole hours (`14:00`) for a window of two days
    or less, or on quarter hours for three hours or less, so a short window is labelled too."""
    span = end - start
    if span > 2 * 86400:
        unit, fmt = 86400.0, "%b %d"
    elif span > 3 * 3600:
        unit, fmt = 3600.0, "%H:%M"
    else:
        unit, fmt = 900.0, "%H:%M"  # a window of an hour or two has a tick every quarter hour
    first = math.ceil(start / unit) * unit
    count = int((end - first) // unit) + 1
    every = max(1, math.ceil(count / most))
    if unit == 3600.0:
        every = next((n for n in (1, 2, 3, 4, 6, 12, 24) if n >= every), every)
    elif unit == 900.0:
        every = next((n for n in (1, 2, 4, 8) if n >= every), every)
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
    narrow: bool = False,
) -> str:
    """`waits[group][configuration]`: sorted waits in seconds; a box per configuration, side by side."""
    groups = list(waits)
    configs: list[str] = []
    for by_config in waits.values():
        configs += [c for c in by_config if c not in configs]
    note = "box p25-p75, line p50, whiskers p5-p95, dot p99; small numbers under a group: jobs never started"
    size = NARROW_TEXT if narrow else 11
    if narrow:
        # Slimmer boxes, group names slanted under them, the legend one configuration a line, notes wrapped.
        box_w, gap = 10, 14
        group_w = len(configs) * box_w + gap
        title_lines = _wrap(title, 14, NARROW_WIDTH - 16)
        note_lines = _wrap(note, size, NARROW_WIDTH - 16)
        credit_lines = _wrap(credit, size, NARROW_WIDTH - 16) if credit else []
        left, right = 54, 10
        top = 24 + 18 * len(title_lines) + 16 * len(configs) + 4
        longest = max((len(group) for group in groups), default=0)
        labels_h = 0.55 * size * longest * 0.71 + size + 8  # a label slanted at 45 degrees
        bottom = round(44 + labels_h + 16 * (len(note_lines) + len(credit_lines)) + 8)
        width = max(NARROW_WIDTH, left + right + len(groups) * group_w)
        height = top + 220 + bottom
    else:
        box_w, gap = 14, 18
        group_w = len(configs) * box_w + gap
        title_lines, note_lines = [title], [note]
        credit_lines = [credit] if credit else []
        left, right, top, bottom = 60, 20, 54, 104
        width = max(640, left + right + len(groups) * group_w)
        height = 440
    plot_h = height - top - bottom
    axis_x = 12 if narrow else 16  # the axis title, clear of the tick labels
    # The groups share the plot's whole width, however few they are.
    group_w = max(group_w, (width - left - right) / max(1, len(groups)))
    boxes_w = len(configs) * box_w
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

    body = [
        _text(8 if narrow else left, 22 + 18 * i, line, size=14, extra='font-weight="bold"')
        for i, line in enumerate(title_lines)
    ]
    for index, config in enumerate(configs):
        color = CONFIG_COLORS[index % len(CONFIG_COLORS)]
        if narrow:
            key_x, key_y = 8, 14 + 18 * len(title_lines) + 16 * index
        else:
            key_x, key_y = left + 150 * index, 32
        body.append(f'<rect x="{key_x}" y="{key_y}" width="10" height="10" fill="{color}"/>')
        body.append(_text(key_x + 14, key_y + 9 + (size - 11) / 2, config, size=size))
    for seconds, label in WAIT_TICKS:
        if seconds <= 10**high:
            body.append(
                f'<line x1="{left}" x2="{width - right}" y1="{y(seconds):.1f}" y2="{y(seconds):.1f}" '
                f'stroke="#e5e5e5"/>'
            )
            body.append(_text(left - 6, y(seconds) + 4, label, anchor="end", size=size))
    for g, group in enumerate(groups):
        x0 = left + g * group_w + (group_w - boxes_w) / 2
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
                        # Under the group's name; on a phone, between the plot and the slanted names.
                        top + plot_h + (16 if narrow else 32) + (13 if narrow else 12) * (c % 2),
                        str(missing),
                        anchor="middle",
                        size=size,
                        extra=f'fill="{color}"',
                    )
                )
        if narrow:
            label_x, label_y = x0 + boxes_w / 2 + 4, top + plot_h + 44
            body.append(
                _text(
                    label_x,
                    label_y,
                    group,
                    anchor="end",
                    size=size,
                    extra=f'transform="rotate(-45 {label_x:.1f} {label_y:.1f})"',
                )
            )
        else:
            body.append(_text(x0 + boxes_w / 2, top + plot_h + 16, group, anchor="middle"))
    body.append(
        f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{plot_h}" fill="none" '
        f'stroke="#999"/>'
    )
    body.append(
        _text(
            axis_x,
            top + plot_h / 2,
            "wait (first placement - arrival)",
            anchor="middle",
            size=size,
            extra=f'transform="rotate(-90 {axis_x} {top + plot_h / 2:.1f})"',
        )
    )
    notes = note_lines + credit_lines
    for i, line in enumerate(notes):
        y0 = height - 14 - (16 if narrow else 18) * (len(notes) - 1 - i)
        body.append(_text(8 if narrow else left, y0, line, size=size, extra='fill="#555"'))
    return _svg(width, height, body, size)
