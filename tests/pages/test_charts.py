"""The server-rendered charts: samples in, SVG geometry out; no database."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from portal.charts import stacked_bar, usage_chart

START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


@dataclass
class Sample:
    taken_at: datetime
    limit: int
    usage: int
    borrowed: int = 0
    lent: int = 0


def boxes(d: str) -> list[tuple[float, float, float, float]]:
    """The rectangles of a step-area path as (x0, y_low, x1, y_high)."""
    return [
        tuple(float(v) for v in m) for m in re.findall(r"M([\d.]+),([\d.]+)H([\d.]+)V([\d.]+)H[\d.]+Z", d)
    ]


def test_stacked_bar_lays_parts_side_by_side_in_percent():
    segments = stacked_bar([("owned", 6), ("borrowed", 2), ("idle", 0), ("free", 0)], 8)
    assert [(s.name, s.x, s.width) for s in segments] == [
        ("owned", 0, 75.0),
        ("borrowed", 75.0, 25.0),
        ("idle", 100.0, 0),
        ("free", 100.0, 0),
    ]


def test_stacked_bar_squeezes_parts_that_exceed_the_total():
    segments = stacked_bar([("owned", 4), ("borrowed", 4)], 4)
    assert [s.width for s in segments] == [50.0, 50.0]


def test_usage_chart_without_samples_is_empty():
    chart = usage_chart([], start=START, end=START + HOUR)
    assert chart.empty and chart.areas == {"owned": "", "lent": "", "borrowed": ""} and chart.limit_path == ""


def test_usage_chart_stacks_owned_then_lent_then_borrowed_and_draws_the_limit():
    samples = [
        Sample(START, limit=4, usage=2, lent=2),  # half used, half lent out
        Sample(START + HOUR / 2, limit=4, usage=6, borrowed=2),  # over its limit by two
    ]
    chart = usage_chart(samples, start=START, end=START + HOUR, width=140, height=148, buckets=100)
    assert chart.y_max == 10 and chart.latest == {"owned": 4, "lent": 0, "borrowed": 2, "limit": 4}
    # Plot: x from 40 to 136 (96 wide); y from 110 (0) to 16 (10): 9.4 per instance.
    owned, lent, borrowed = (boxes(chart.areas[name]) for name in ("owned", "lent", "borrowed"))
    assert owned == [(40.0, 110.0, 88.0, 91.2), (88.0, 110.0, 136.0, 72.4)]
    assert lent == [(40.0, 91.2, 88.0, 72.4)]  # on top of owned, only while lent
    assert borrowed == [(88.0, 72.4, 136.0, 53.6)]  # above the limit, only while borrowing
    assert chart.limit_path == "M40.0,72.4H136.0"


def test_usage_chart_carries_each_sample_forward_and_merges_equal_columns():
    # A week of samples every 30 s, all alike: one rectangle per layer, not twenty thousand.
    week = timedelta(days=7)
    samples = [
        Sample(START + timedelta(seconds=30 * i), limit=8, usage=5)
        for i in range(int(week / timedelta(seconds=30)))
    ]
    chart = usage_chart(samples, start=START, end=START + week)
    assert len(boxes(chart.areas["owned"])) == 1
    assert chart.areas["lent"] == "" and chart.areas["borrowed"] == ""
    assert chart.x_ticks[0][1] == START.strftime("%m-%d")


def test_usage_chart_starts_at_the_first_sample_and_ignores_samples_outside_the_window():
    samples = [
        Sample(START - HOUR, limit=9, usage=9),
        Sample(START + HOUR / 2, limit=4, usage=1),
        Sample(START + 2 * HOUR, limit=9, usage=9),
    ]
    chart = usage_chart(samples, start=START, end=START + HOUR, width=140, height=148, buckets=100)
    # The sample before the window carries in; the one after it is ignored.
    (before, after) = boxes(chart.areas["owned"])
    assert before[0] == 40.0 and after[2] == 136.0
    assert chart.latest == {"owned": 1, "lent": 0, "borrowed": 0, "limit": 4}
    assert chart.latest_at == START + HOUR / 2
