"""Backtest of the estimated start times: estimate from snapshots of a replay, compare with what it then did.

The replay runs once (`simulation.Simulation`); at regular instants the snapshot its next pass reads is kept,
exactly what a live pass would load. From each, `estimate.estimate` gives every RUNNABLE job a window, and the
start the replay then actually gave the job (its next admission) is the truth. Users do not know their
runtimes exactly, so the estimator is given the trace's runtimes times seeded lognormal noise (sigma
`NOISE_SIGMA`, the median right, one job in three off by more than 1.6x) as declared durations, and knows that
spread (`Expectations.declared_sigma`). Arrivals after the snapshot are unknown to it, as they are live.

The naive baseline: a job's position in its share's queue times the share's mean runtime (of the same noisy
durations) from the snapshot; its band, the position times the share's p90 runtime.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine import Job, JobStatus, Snapshot, schedule
from engine.order import queue_key

from .config import Configuration
from .estimate import Expectations, estimate
from .simulation import Kind, SimJob, Simulation

NOISE_SIGMA = 0.5
WAITED_FOR_FRACTION = 600.0  # errors as a fraction of the wait only for jobs that waited longer than this


def noisy_durations(jobs: Sequence[SimJob], *, sigma: float, seed: int) -> dict[int, float]:
    """What users declare: the true runtime times exp(N(0, sigma)), drawn per job from the seed."""
    declared = {}
    for job in jobs:
        if job.duration is not None:
            draw = random.Random(f"{seed}:{job.id}").gauss(0.0, sigma)
            declared[job.id] = max(1.0, job.duration * math.exp(draw))
    return declared


class _SnapshotTaker:
    """A decider that keeps the whole queue's snapshot of the first pass at or after each instant."""

    def __init__(self, decider, snapshots, instants: Sequence[float]):
        self.decider = decider
        self.snapshots = snapshots
        self.instants = sorted(instants)
        self.taken: list[Snapshot] = []
        self.stats = decider.stats

    def decide(self, index: int, now: float):
        if self.instants and now >= self.instants[0]:
            while self.instants and now >= self.instants[0]:
                self.instants.pop(0)
            self.taken.append(self.snapshots.whole(now))
        return self.decider.decide(index, now)


@dataclass
class Errors:
    """Absolute errors (seconds), errors over the actual wait, and whether the start fell in the band."""

    absolute: list[float] = field(default_factory=list)
    late: int = 0  # actual start after the band
    relative: list[float] = field(default_factory=list)
    inside: list[bool] = field(default_factory=list)

    def add(self, guess: float, low: float, high: float, actual: float, waited: float) -> None:
        self.absolute.append(abs(guess - actual))
        if waited > WAITED_FOR_FRACTION:
            self.relative.append(abs(guess - actual) / waited)
        self.inside.append(low - 1e-6 <= actual <= high + 1e-6)
        self.late += actual > high + 1e-6

    def summary(self) -> dict:
        return {
            "jobs": len(self.absolute),
            "median_minutes": _percentile(self.absolute, 0.5) / 60,
            "p90_minutes": _percentile(self.absolute, 0.9) / 60,
            "median_fraction": _percentile(self.relative, 0.5),
            "p90_fraction": _percentile(self.relative, 0.9),
            "coverage": sum(self.inside) / len(self.inside) if self.inside else 0.0,
            "after_band": self.late / len(self.inside) if self.inside else 0.0,
        }


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


@dataclass
class Backtest:
    configuration: str
    snapshots: int
    estimate: dict
    baseline: dict
    never: int  # estimated never (or beyond the horizon) although the replay started them
    seconds: float


def backtest(
    configuration: Configuration,
    jobs: Sequence[SimJob],
    *,
    start: float,
    end: float,
    every: float,
    sigma: float = NOISE_SIGMA,
    seed: int = 1,
    pass_interval: float = 30.0,
    time_limit: float | None = 30.0,
) -> Backtest:
    """Replay `jobs` from `start` to `end`, estimate from a snapshot every `every` seconds, and score."""
    simulation = Simulation(
        configuration,
        jobs,
        start=start,
        end=end,
        pass_interval=pass_interval,
        pass_times=None,
        check=False,
        schedule_function=schedule,
        startup_seconds=0.0,
        progress=None,
        shortcuts=True,
        verify_shortcuts=False,
    )
    instants = [start + every * (i + 1) for i in range(int((end - start) // every))]
    taker = _SnapshotTaker(simulation.decider, simulation.snapshots, instants)
    simulation.decider = taker
    result = simulation.run()
    admissions: dict[int, list[float]] = {}
    for record in result.records:
        if record.kind == Kind.ADMITTED:
            admissions.setdefault(record.job_id, []).append(record.time)
    declared = noisy_durations(jobs, sigma=sigma, seed=seed)
    expectations = Expectations(declared=declared, declared_sigma=sigma)
    ours, naive = Errors(), Errors()
    never = 0
    seconds = 0.0
    for snapshot in taker.taken:
        now = snapshot.now.timestamp()
        run = estimate(snapshot, expectations, pass_interval=pass_interval, time_limit=time_limit)
        seconds += run.seconds
        baseline = _baseline(snapshot, declared)
        for job_id, found in run.estimates.items():
            actual = next((t for t in admissions.get(job_id, ()) if t >= now), None)
            if actual is None:
                continue  # the replay did not start it before its window ended: no truth to compare with
            waited = actual - now
            if found.earliest is None:
                never += 1
                continue
            earliest = found.earliest.timestamp()
            latest = found.latest.timestamp() if found.latest is not None else earliest
            ours.add(earliest, earliest, latest, actual, waited)
            guess, high = baseline[job_id]
            naive.add(guess, guess, high, actual, waited)
    return Backtest(configuration.name, len(taker.taken), ours.summary(), naive.summary(), never, seconds)


def _baseline(snapshot: Snapshot, declared: dict[int, float]) -> dict[int, tuple[float, float]]:
    """Position in the share's queue times the share's mean (and p90) declared runtime, from `now`."""
    now = snapshot.now.timestamp()
    runtimes: dict[int, list[float]] = {}
    queues: dict[int, list[Job]] = {}
    for job in snapshot.jobs:
        if job.id in declared:
            runtimes.setdefault(job.share_id, []).append(declared[job.id])
        if job.status == JobStatus.RUNNABLE:
            queues.setdefault(job.share_id, []).append(job)
    every = [value for values in runtimes.values() for value in values] or [3600.0]
    guesses = {}
    for share_id, queue in queues.items():
        values = runtimes.get(share_id) or every
        mean = statistics.fmean(values)
        p90 = _percentile(values, 0.9)
        for position, job in enumerate(sorted(queue, key=queue_key), start=1):
            guesses[job.id] = (now + position * mean, now + position * max(mean, p90))
    return guesses


def backtest_table(results: Sequence[Backtest]) -> str:
    """One line per configuration and method: jobs, errors in minutes and as a fraction of the wait, coverage."""
    header = (
        f"{'configuration':<22} {'method':<9} {'jobs':>6} {'median min':>10} {'p90 min':>9} "
        f"{'median/wait':>11} {'p90/wait':>9} {'in band':>8}"
    )
    lines = [header]
    for result in results:
        for method, figures in (("estimate", result.estimate), ("baseline", result.baseline)):
            lines.append(
                f"{result.configuration:<22} {method:<9} {figures['jobs']:>6} "
                f"{figures['median_minutes']:>10.1f} {figures['p90_minutes']:>9.1f} "
                f"{figures['median_fraction']:>11.2f} {figures['p90_fraction']:>9.2f} "
                f"{figures['coverage']:>8.0%}"
            )
        lines.append(
            f"{'':<22} {result.snapshots} snapshots, {result.never} started jobs estimated never or beyond the "
            f"horizon, {result.seconds:.1f} s estimating"
        )
    return "\n".join(lines)
