"""The what-if page's charts, drawn by the replay's own chart functions (`simulator.charts`), as
SVG text to put in the page, and the check that makes that safe. Pure Python, like the simulator.

GPUs in use are averaged per time slice here rather than with `simulator.meter.bucket_series`, which gives a
whole remaining interval to one slice when a slice edge falls between two floating-point values (a spike of
many times the capacity on short windows).
"""

from __future__ import annotations

from collections.abc import Sequence

from portal.charts import svg_problem
from simulator.charts import utilization_svg, waits_svg
from simulator.metrics import waits_of
from simulator.runner import Replay

CHART_SLICES = 240
# Each chart twice: as a desktop shows it, and `<name>_narrow` for a phone, whose text stays readable there.
NARROW_AND_WIDE = (("", False), ("_narrow", True))


def mean_gpus_per_slice(
    series: Sequence[tuple[float, Sequence[float], Sequence[float]]], *, start: float, end: float, slices: int
) -> tuple[list[float], list[list[float]]]:
    """Time-weighted mean GPUs in use per share in `slices` equal slices of [start, end): (slice middles,
    per share a value per slice). `series` holds (time, GPUs in use per share, borrowed per share) from each
    change on, as `UsageMeter.series` records it."""
    width = (end - start) / slices if end > start else 1.0
    shares = len(series[0][1]) if series else 0
    used = [[0.0] * slices for _ in range(shares)]
    for index, (at, in_use, _) in enumerate(series):
        until = series[index + 1][0] if index + 1 < len(series) else end
        at, until = max(at, start), min(until, end)
        if until <= at:
            continue
        first = min(slices - 1, int((at - start) / width))
        last = min(slices - 1, int((until - start) / width))
        for slot in range(first, last + 1):
            low = max(at, start + slot * width)
            high = until if slot == slices - 1 else min(until, start + (slot + 1) * width)
            if high <= low:
                continue
            weight = (high - low) / width
            for share in range(shares):
                if in_use[share]:
                    used[share][slot] += in_use[share] * weight
    return [start + (i + 0.5) * width for i in range(slices)], used


def active_span(
    series: Sequence[tuple[float, Sequence[float], Sequence[float]]], *, start: float, end: float
) -> tuple[float, float]:
    """The part of [start, end) in which GPUs are in use, with a little room either side, so a window mostly
    empty (a week of which the jobs took an hour) draws its data across the chart, not in a sliver of it."""
    busy = [at for at, in_use, _ in series if any(in_use)]
    if not busy:
        return start, end
    first = max(start, busy[0])
    last = min(end, max(series[-1][0], busy[-1]))
    if last <= first:
        return start, end
    room = (last - first) * 0.03
    return max(start, first - room), min(end, last + room)


def chart_svgs(replays: Sequence[Replay], *, credit: str = "") -> dict[str, str]:
    """`utilization_<configuration>` for each replay and `waits` comparing them, as SVG text, each also as
    `<name>_narrow`, drawn for a phone's width."""
    charts = {}
    # One time axis for every replay, so the current and proposed charts line up.
    spans = [active_span(r.result.meter.series, start=r.result.start, end=r.result.end) for r in replays]
    start, end = (min(s for s, _ in spans), max(e for _, e in spans)) if spans else (0.0, 1.0)
    for replay in replays:
        result = replay.result
        config = result.configuration
        times, used = mean_gpus_per_slice(result.meter.series, start=start, end=end, slices=CHART_SLICES)
        for suffix, narrow in NARROW_AND_WIDE:
            charts[f"utilization_{config.name}{suffix}"] = utilization_svg(
                title=f"GPUs in use per share - {config.name}",
                times=times,
                gpus_in_use={share.name: used[i] for i, share in enumerate(config.shares)},
                capacity_gpus=config.capacity_gpus(),
                credit=credit,
                narrow=narrow,
            )
    waits: dict[str, dict[str, list[float]]] = {"all jobs": {}}
    never: dict[str, dict[str, int]] = {"all jobs": {}}
    for replay in replays:
        name = replay.result.configuration.name
        waits["all jobs"][name] = waits_of(replay.result)
        never["all jobs"][name] = replay.metrics["overall"]["jobs"]["never_started"]
        by_share: dict[str, list[float]] = {}
        for outcome in replay.result.outcomes.values():
            if outcome.wait_seconds is not None:
                by_share.setdefault(outcome.job.share, []).append(outcome.wait_seconds)
        for item in replay.metrics["shares"]:
            waits.setdefault(item["share"], {})[name] = sorted(by_share.get(item["share"], []))
            never.setdefault(item["share"], {})[name] = item["jobs"]["never_started"]
    for suffix, narrow in NARROW_AND_WIDE:
        charts[f"waits{suffix}"] = waits_svg(
            title="Wait for first placement, current and proposed",
            waits=waits,
            never_started=never,
            credit=credit,
            narrow=narrow,
        )
    for name, svg in charts.items():
        problem = svg_problem(svg)
        if problem:
            raise ValueError(f"chart {name} cannot be shown: {problem}")
    return charts
