"""The replay's charts: text a person can read (11 px at least) and data spread across the chart."""

from __future__ import annotations

import re

from simulator.charts import utilization_svg, waits_svg
from whatif.charts import active_span

HOUR = 3600.0
START = 1_760_000_000.0  # some day in October 2025


def font_sizes(svg: str) -> list[int]:
    return [int(size) for size in re.findall(r'font-size="(\d+)"', svg)]


def test_every_text_of_both_charts_is_at_least_11_px():
    utilization = utilization_svg(
        title="t",
        times=[START + i * 60 for i in range(60)],
        gpus_in_use={"a": [4.0] * 60, "b": [2.0] * 60},
        capacity_gpus=16,
        credit="Philly trace",
    )
    waits = waits_svg(
        title="t",
        waits={"all jobs": {"current": [20.0, 60.0, 300.0], "proposed": [10.0, 30.0]}},
        never_started={"all jobs": {"current": 2}},
        credit="Philly trace",
    )
    assert min(font_sizes(utilization)) >= 11
    assert min(font_sizes(waits)) >= 11


def test_a_short_window_is_labelled_by_the_hour_and_low_use_fills_the_height():
    svg = utilization_svg(
        title="t",
        times=[START + i * 60 for i in range(180)],
        gpus_in_use={"a": [16.0] * 180},
        capacity_gpus=288,
    )
    assert re.search(r">\d\d:00</text>", svg)  # hour ticks on a three-hour window
    assert "on-demand capacity 288 GPUs, above this scale" in svg
    assert 'stroke-dasharray="5,4"' not in svg  # no capacity line squashing 16 GPUs to the bottom


def test_the_chart_spans_the_part_of_the_window_in_which_gpus_are_in_use():
    week = 7 * 24 * HOUR
    series = [(START + week - 2 * HOUR, [4.0], [0.0]), (START + week - HOUR, [0.0], [0.0])]
    first, last = active_span(series, start=START, end=START + week)
    assert START + week - 2 * HOUR - 0.1 * HOUR < first < START + week - 2 * HOUR + 1
    assert last <= START + week and last - first < 2 * HOUR


def svg_width(svg: str) -> int:
    return int(re.search(r'<svg [^>]*width="(\d+)"', svg).group(1))


def test_the_narrow_charts_are_a_phones_width_with_12_px_text_and_wrapped_lines():
    credit = "Philly trace (Jeon et al., ATC 2019), 117,325 jobs over 75 days, replayed on the proposal"
    utilization = utilization_svg(
        title="GPUs in use per share - proposed",
        times=[START + i * 600 for i in range(6 * 24 * 3)],
        gpus_in_use={name: [2.0] * (6 * 24 * 3) for name in ("nlp", "vision", "speech", "research")},
        capacity_gpus=64,
        credit=credit,
        narrow=True,
    )
    waits = waits_svg(
        title="Wait for first placement, current and proposed",
        waits={
            group: {"current": [20.0, 60.0, 300.0], "proposed": [10.0, 30.0]}
            for group in ("all jobs", "nlp", "vision", "speech", "research")
        },
        never_started={"all jobs": {"current": 2}},
        credit=credit,
        narrow=True,
    )
    for svg in (utilization, waits):
        assert svg_width(svg) == 340
        assert min(font_sizes(svg)) >= 12
        # No line of text longer than the chart is wide (about 0.55 em a letter).
        for size, text in re.findall(r'font-size="(\d+)"[^>]*>([^<]*)</text>', svg):
            assert len(text) * 0.55 * int(size) <= 340 - 16, text
    assert len(re.findall(r">[A-Z][a-z][a-z] \d\d</text>", utilization)) <= 4  # a day a tick, four at most
    assert 'transform="rotate(-45' in waits  # share names slanted under their boxes


def test_the_desktop_charts_keep_their_size():
    svg = utilization_svg(
        title="t", times=[START, START + HOUR], gpus_in_use={"a": [1.0, 2.0]}, capacity_gpus=4
    )
    assert svg_width(svg) == 960


def test_an_hour_is_labelled_every_quarter_hour_and_few_groups_spread_across_the_waits_chart():
    svg = utilization_svg(
        title="t", times=[START + i * 60 for i in range(60)], gpus_in_use={"a": [4.0] * 60}, capacity_gpus=4
    )
    assert len(re.findall(r">\d\d:(?:00|15|30|45)</text>", svg)) >= 4
    waits = waits_svg(title="t", waits={g: {"current": [20.0, 60.0]} for g in ("all jobs", "nlp")})
    centres = [float(x) for x in re.findall(r'<line x1="([\d.]+)" x2="\1" y1=', waits)]
    assert max(centres) > 640 / 2  # the second group sits in the right half, not beside the first
