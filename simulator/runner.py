"""Running several configurations over one job stream, and writing what they measured (JSON, SVG charts)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from .charts import utilization_svg, waits_svg
from .config import Configuration
from .meter import bucket_series
from .metrics import summarize, waits_of
from .simulation import Result, SimJob, simulate


@dataclass
class Replay:
    result: Result
    metrics: dict[str, Any]


class ProgressBar:
    """`label [#######.............]  35%` on a stream, rewritten in place; a callable for `simulate`."""

    def __init__(self, label: str, stream: TextIO = sys.stderr, width: int = 30):
        self.label, self.stream, self.width = label, stream, width
        self.started = time.perf_counter()
        self.shown = -1

    def __call__(self, fraction: float) -> None:
        percent = int(fraction * 100)
        if percent == self.shown:
            return
        self.shown = percent
        filled = int(fraction * self.width)
        elapsed = time.perf_counter() - self.started
        self.stream.write(
            f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {percent:3d}% {elapsed:5.1f}s"
        )
        if fraction >= 1.0:
            self.stream.write("\n")
        self.stream.flush()


def replay_configurations(
    configurations: Sequence[Configuration],
    jobs_for: Callable[[Configuration], Sequence[SimJob]],
    *,
    start: float | None,
    end: float | None,
    progress: Callable[[str], Callable[[float], None]] | None = None,
    **options: Any,
) -> list[Replay]:
    """Replay each configuration on its job stream (`simulate` options pass through) and summarize it."""
    replays = []
    for config in configurations:
        jobs = jobs_for(config)
        result = simulate(
            config,
            jobs,
            start=start,
            end=end,
            progress=progress(config.name) if progress else None,
            **options,
        )
        replays.append(Replay(result=result, metrics=summarize(result)))
    return replays


def write_json(path: str | Path, replays: Sequence[Replay], *, meta: dict[str, Any]) -> None:
    document = {**meta, "configurations": [replay.metrics for replay in replays]}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(document, indent=1, default=str) + "\n")


def write_charts(
    directory: str | Path, replays: Sequence[Replay], *, credit: str = "", prefix: str = ""
) -> list[Path]:
    """utilization-<configuration>.svg for each, and waits.svg comparing them; returns the files written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for replay in replays:
        result = replay.result
        config = result.configuration
        times, used, _ = bucket_series(result.meter.series, start=result.start, end=result.end, buckets=336)
        path = directory / f"{prefix}utilization-{config.name}.svg"
        path.write_text(
            utilization_svg(
                title=f"GPUs in use per share - {config.name}",
                times=times,
                gpus_in_use={share.name: used[i] for i, share in enumerate(config.shares)},
                capacity_gpus=config.capacity_gpus(),
                credit=credit,
            )
        )
        written.append(path)
    waits: dict[str, dict[str, list[float]]] = {"all jobs": {}}
    never: dict[str, dict[str, int]] = {"all jobs": {}}
    for replay in replays:
        name = replay.result.configuration.name
        waits["all jobs"][name] = waits_of(replay.result)
        never["all jobs"][name] = replay.metrics["overall"]["jobs"]["never_started"]
        by_share: dict[str, list[float]] = {}
        for outcome in replay.result.outcomes.values():
            wait = outcome.wait_seconds
            if wait is not None:
                by_share.setdefault(outcome.job.share, []).append(wait)
        for item in replay.metrics["shares"]:
            share = item["share"]
            waits.setdefault(share, {})[name] = sorted(by_share.get(share, []))
            never.setdefault(share, {})[name] = item["jobs"]["never_started"]
    path = directory / f"{prefix}waits.svg"
    path.write_text(
        waits_svg(
            title="Wait for first placement, per configuration",
            waits=waits,
            never_started=never,
            credit=credit,
        )
    )
    written.append(path)
    return written
