"""Estimated start times (behaviour.md#why-pending-and-when-it-will-start): the unchanged engine run forward from the
live state of a queue.

`estimate(snapshot, expectations)` replays the queue from `snapshot.now` with no new arrivals: placed jobs end
at their expected end, STOPPING jobs at their `stop_deadline`, training plans open, drain and close on time,
and the simulator's event loop (`simulation.Simulation`, with its exact shortcuts) asks the engine for a pass
at each event. The start the replay gives a RUNNABLE job is its `earliest`; a second replay in which every
runtime takes its pessimistic value gives its `latest`. Nothing is written: the replay has its own state.

Runtimes are `Runtime`s, quantile tables: a job's declared `duration_seconds`, else what the share's finished
jobs of that type took, else the queue's, else a default (`Expectations`; the learning reads rows, so it
lives in `scheduling.selectors.estimates`). A placed job that has already run for a while is expected to
end at the *conditional* quantile: of the runs that lasted at least as long, the lower quartile (`earliest`)
or the upper one (`latest`), see `TYPICAL`.
"""

from __future__ import annotations

import heapq
import math
import time as wallclock
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import lru_cache
from statistics import NormalDist

from engine import Budget, BudgetScope, Decisions, Entry, Job, JobStatus, Snapshot, schedule
from engine.collector import collector_paused

from .config import (
    EPOCH,
    BudgetConfig,
    Configuration,
    ConfigurationError,
    PlanConfig,
    ShareConfig,
    entry_problem,
    to_datetime,
    validate,
)
from .shortcuts import ShortcutDecider
from .simulation import Kind, ReplayStats, SimJob, Simulation, Status

# Each runtime is taken at its lower quartile for `earliest` and its upper quartile for `latest`. Not the
# median: a start waits for the *first* of several running jobs to end, and the first of several uncertain
# ends comes earlier than each one's median (running every job at its median estimated late: on a Philly
# backtest slice 7 in 9 actual starts fell before the window, README "Estimated start times").
TYPICAL = 0.25
PESSIMISTIC = 0.75
QUANTILE_STEPS = 20  # a Runtime keeps the 0th, 5th, ..., 100th percentiles
DEFAULT_HORIZON_SECONDS = 14 * 86_400
# A placed job already past every run its kind has made is expected to end within this fraction of its
# typical runtime (at least a minute): it is late, and late jobs end soon more often than not.
OVERDUE_FRACTION = 0.25
STOPPING = "STOPPING"
RESOLUTION = 0.1  # the forward replay passes at least every 10% of the time ahead (`pass_clock`)


@dataclass(frozen=True, slots=True)
class Runtime:
    """A runtime distribution as evenly spaced quantiles: `quantiles[i]` is the (i / steps)-th, seconds."""

    quantiles: tuple[float, ...]

    @classmethod
    def of(cls, seconds: Iterable[float]) -> Runtime:
        """The distribution of observed runtimes (at least one)."""
        ordered = sorted(max(0.0, float(value)) for value in seconds)
        if not ordered:
            raise ValueError("a runtime needs at least one observation")
        return cls(tuple(_quantile(ordered, i / QUANTILE_STEPS) for i in range(QUANTILE_STEPS + 1)))

    @classmethod
    def exactly(cls, seconds: float) -> Runtime:
        return cls((float(seconds), float(seconds)))

    @classmethod
    def around(cls, seconds: float, sigma: float) -> Runtime:
        """A declared duration that is right only on the median: lognormal with this sigma around it."""
        if sigma <= 0:
            return cls.exactly(seconds)
        normal = NormalDist()
        points = [
            normal.inv_cdf(min(max(i / QUANTILE_STEPS, 0.001), 0.999)) for i in range(QUANTILE_STEPS + 1)
        ]
        return cls(tuple(seconds * math.exp(sigma * z) for z in points))

    def at(self, probability: float) -> float:
        steps = len(self.quantiles) - 1
        position = min(max(probability, 0.0), 1.0) * steps
        low = min(int(position), steps - 1) if steps else 0
        if not steps:
            return self.quantiles[0]
        fraction = position - low
        return self.quantiles[low] + (self.quantiles[low + 1] - self.quantiles[low]) * fraction

    def below(self, seconds: float) -> float:
        """The probability of a run shorter than `seconds` (the inverse of `at`)."""
        values = self.quantiles
        steps = len(values) - 1
        if not steps or seconds <= values[0]:
            return 0.0
        if seconds >= values[-1]:
            return 1.0
        i = bisect_right(values, seconds) - 1
        span = values[i + 1] - values[i]
        return (i + ((seconds - values[i]) / span if span else 0.0)) / steps

    def remaining(self, elapsed: float, probability: float) -> float:
        """Seconds still to run, at this quantile of the runs that lasted at least `elapsed` seconds."""
        if elapsed >= self.quantiles[-1]:
            return max(60.0, OVERDUE_FRACTION * self.at(TYPICAL))
        done = self.below(elapsed)
        return max(0.0, self.at(done + probability * (1.0 - done)) - elapsed)


def _quantile(ordered: list[float], probability: float) -> float:
    position = probability * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


DEFAULT_RUNTIME = Runtime.of([3600.0])


@dataclass(frozen=True)
class Expectations:
    """How long jobs run: declared durations by job id, else learned by (share id, type), then by type for the
    whole queue, then `default`. `declared_sigma` > 0 says declared durations are only right on the median."""

    declared: Mapping[int, float] = field(default_factory=dict)
    learned: Mapping[tuple[int, str], Runtime] = field(default_factory=dict)
    queue: Mapping[str, Runtime] = field(default_factory=dict)
    default: Runtime = DEFAULT_RUNTIME
    declared_sigma: float = 0.0

    def runtime(self, job_id: int, share_id: int, instance_type: str) -> Runtime:
        declared = self.declared.get(job_id)
        if declared is not None:
            return Runtime.around(declared, self.declared_sigma)
        return self.learned.get((share_id, instance_type)) or self.queue.get(instance_type) or self.default


@dataclass(frozen=True, slots=True)
class Estimate:
    """When a RUNNABLE job is likely to start: `earliest` and `latest` are None when it never would."""

    job_id: int
    earliest: datetime | None
    latest: datetime | None
    basis: str


@dataclass
class EstimateRun:
    estimates: dict[int, Estimate]
    seconds: float
    passes: int
    replays: list[ReplayStats] = field(default_factory=list)  # the earliest replay's, then the latest's


def estimate(
    snapshot: Snapshot,
    expectations: Expectations,
    *,
    only: Iterable[int] | None = None,
    pass_interval: float = 5.0,
    horizon_seconds: float = DEFAULT_HORIZON_SECONDS,
    time_limit: float | None = None,
    resolution: float = RESOLUTION,
    verify_shortcuts: bool = False,
    lean: bool = True,
) -> EstimateRun:
    """Estimate the start of every RUNNABLE job of `snapshot` (or of the `only` ones).

    Two forward replays with no arrivals: runtimes at their lower quartile (`earliest`), then at their upper quartile
    (`latest`).
    Past `time_limit` seconds (both replays together) a replay stops where it is: a job it had not started
    by then gets no window, only "not before" the moment reached. `verify_shortcuts` (for tests) runs every
    pass on the whole queue as well and raises on any difference (`simulation.simulate`).

    `lean` (the default) decides exactly the same passes for less: the engine works out no pending reasons,
    the holdings of shares with in-share preemption are given as real jobs (`shortcuts`, point 1), and the
    second replay takes the first one's first pass when both start it from the same state. `lean=False` is
    the replay as it was first written, kept for the benchmark's comparison.
    """
    started = wallclock.perf_counter()
    deadline = None if time_limit is None else started + time_limit
    wanted = {job.id for job in snapshot.jobs if job.status == JobStatus.RUNNABLE}
    if only is not None:
        wanted &= set(only)
    estimates: dict[int, Estimate] = {}
    never = _never_reasons(snapshot, wanted)
    for job_id, reason in never.items():
        estimates[job_id] = Estimate(job_id, None, None, f"never: {reason}")
    wanted -= set(never)
    passes = 0
    replays: list[ReplayStats] = []
    try:
        configuration = _configuration(snapshot)
    except ConfigurationError as error:
        for job_id in wanted:
            estimates[job_id] = Estimate(job_id, None, None, f"no estimate: {error}")
        wanted = set()
    if wanted:
        first_pass = _FirstPass() if lean else None  # what the earliest replay hands the latest one
        with collector_paused():  # 10-15% of an estimate's CPU, in a worker
            typical, pessimistic = (
                _forward(
                    snapshot,
                    configuration,
                    expectations,
                    wanted,
                    probability,
                    pass_interval,
                    horizon_seconds,
                    deadline,
                    resolution,
                    verify_shortcuts,
                    lean,
                    first_pass,
                )
                for probability in (TYPICAL, PESSIMISTIC)
            )
        passes = typical.passes + pessimistic.passes
        replays = [typical.stats, pessimistic.stats]
        held_back = _held_back_until(snapshot)
        for job_id in sorted(wanted):
            found = _combine(job_id, typical, pessimistic, snapshot.now, horizon_seconds)
            reset = held_back.get(job_id)
            if reset is not None and found.earliest is not None and found.earliest >= reset[1]:
                around = _clock(found.earliest.timestamp(), snapshot.now.timestamp())
                found = replace(
                    found,
                    basis=f"after the budget of share {reset[0]} resets "
                    f"({_clock(reset[1].timestamp(), snapshot.now.timestamp())}), around {around}",
                )
            estimates[job_id] = found
    return EstimateRun(estimates, wallclock.perf_counter() - started, passes, replays)


def _held_back_until(snapshot: Snapshot) -> dict[int, tuple[str, datetime]]:
    """RUNNABLE jobs of shares whose budget of scope ALL is spent: the share's name and when it resets."""
    spent = {
        share.id: (share.name, share.budget.resets_at)
        for share in snapshot.shares
        if share.budget is not None and share.budget.scope == BudgetScope.ALL and share.budget.spent
    }
    return {
        job.id: spent[job.share_id]
        for job in snapshot.jobs
        if job.status == JobStatus.RUNNABLE and job.share_id in spent
    }


def _never_reasons(snapshot: Snapshot, wanted: set[int]) -> dict[int, str]:
    """Jobs that no replay could place: their queue or share is disabled."""
    if not snapshot.queue_enabled:
        return {
            job_id: "no entry can fit while the queue or its environment is disabled" for job_id in wanted
        }
    disabled = {share.id: share.name for share in snapshot.shares if not share.enabled}
    return {
        job.id: f"share {disabled[job.share_id]} is disabled"
        for job in snapshot.jobs
        if job.id in wanted and job.share_id in disabled
    }


# --- the forward replay ------------------------------------------------------------------------------------


@dataclass
class _Forward:
    """What one forward replay gave: starts, what placed them, and why the others never started."""

    starts: dict[int, float]
    placed_on: dict[int, tuple[str, str | None, bool]]  # job -> (type, plan, by preemption)
    ends: dict[str, list[float]]  # type -> sorted times at which a job on it ended
    never: dict[int, str]
    passes: int
    cut_at: float | None = None  # the replay stopped here on its time cap
    stats: ReplayStats | None = None


def _forward(
    snapshot: Snapshot,
    configuration: Configuration,
    expectations: Expectations,
    wanted: set[int],
    probability: float,
    pass_interval: float,
    horizon_seconds: float,
    deadline: float | None,
    resolution: float,
    verify_shortcuts: bool = False,
    lean: bool = True,
    first_pass: _FirstPass | None = None,
) -> _Forward:
    now = snapshot.now.timestamp()
    share_names = {share.id: share.name for share in snapshot.shares}
    disabled = {share.id for share in snapshot.shares if not share.enabled}
    placed: list[tuple[Job, float]] = []
    known = first_pass.jobs if first_pass is not None else None
    sim_jobs: list[SimJob] = [] if known is None else known[0]
    runnable: dict[int, Job] = {} if known is None else known[1]
    for job in snapshot.jobs:
        if job.status == JobStatus.RUNNABLE:
            if job.share_id in disabled or known is not None:
                continue  # never placed while its share is disabled, and never in anyone's way
            runnable[job.id] = job
            sim_jobs.append(_sim_job(job, share_names, configuration))
        elif job.placement is not None:
            placed.append((job, _expected_end(job, expectations, probability, now)))
            if known is None:
                sim_jobs.append(_sim_job(job, share_names, configuration))
    if first_pass is not None:
        first_pass.jobs = (sim_jobs, runnable)
    simulation = _ForwardSimulation(
        configuration,
        sim_jobs,
        start=now,
        end=now + horizon_seconds,
        pass_interval=pass_interval,
        pass_times=pass_clock(now, pass_interval, horizon_seconds, resolution) if resolution > 0 else None,
        check=False,
        schedule_function=_decide if lean else schedule,
        startup_seconds=0.0,
        progress=None,
        shortcuts=True,
        verify_shortcuts=verify_shortcuts,
        metered=False,
    )
    simulation.prepare(
        placed=placed,
        runnable=runnable,
        wanted=wanted,
        runtime=lambda job_id, share_id, type_: expectations.runtime(job_id, share_id, type_).at(probability),
        deadline=deadline,
        lean=lean,
        first_pass=first_pass,
    )
    result = simulation.run()
    starts: dict[int, float] = {}
    placed_on: dict[int, tuple[str, str | None, bool]] = {}
    preemptors = {r.preemptor_job_id for r in result.records if r.preemptor_job_id is not None}
    for record in result.records:
        if record.kind == Kind.ADMITTED and record.job_id in wanted and record.job_id not in starts:
            starts[record.job_id] = record.time
            placed_on[record.job_id] = (
                record.instance_type,
                record.training_plan,
                record.job_id in preemptors,
            )
    never: dict[int, str] = {}
    for job_id in wanted:
        outcome = result.outcomes[job_id]
        if job_id in starts:
            continue
        if outcome.status == Status.REJECTED:
            never[job_id] = outcome.reason
        elif outcome.status == Status.FAILED and outcome.reason == "PENDING_TIMEOUT":
            never[job_id] = f"it waits longer than its max_pending_seconds, at {_clock(outcome.finished_at)}"
    cut_at = simulation.reached if simulation.cut_short else None
    ends = simulation.ends_by_type()
    simulation.release()
    return _Forward(starts, placed_on, ends, never, result.stats.passes_run, cut_at, result.stats)


def _decide(snapshot: Snapshot) -> Decisions:
    """The engine's pass without its pending reasons: the replay reads only decisions (the same either way)."""
    return schedule(snapshot, explain=False)


def _configuration(snapshot: Snapshot) -> Configuration:
    """The queue as the simulator's configuration (validated: a queue the rules let through passes)."""
    names = {share.id: share.name for share in snapshot.shares}
    return validate(
        Configuration(
            name="estimate",
            capacity=dict(snapshot.capacity),
            shares=tuple(
                ShareConfig(
                    name=share.name,
                    strategy=share.strategy,
                    limits=dict(share.limits),
                    borrow_limit=share.borrow_limit,
                    in_share_preemption=share.in_share_preemption,
                    enabled=share.enabled,
                    budget=_budget_config(share.budget),
                )
                for share in snapshot.shares
            ),
            plans=tuple(
                PlanConfig(
                    name=plan.name,
                    instance_type=plan.instance_type,
                    instance_count=plan.instance_count,
                    start=plan.start_time.timestamp(),
                    end=plan.end_time.timestamp(),
                    shares=tuple(sorted(names[i] for i in plan.share_ids if i in names)),
                )
                for plan in snapshot.plans
            ),
            ordering=snapshot.ordering,
            plan_drain_seconds=snapshot.plan_drain_seconds,
            share_ids={share.name: share.id for share in snapshot.shares},
        )
    )


def _budget_config(budget: Budget | None) -> BudgetConfig | None:
    """A live share's budget for the forward replay, with what it has spent so far in the period: the replay
    counts on from there, and a spent budget holds the share back until its reset."""
    if budget is None:
        return None
    return BudgetConfig(
        gpu_hours=budget.gpu_hours,
        period=budget.period,
        scope=budget.scope,
        spent_at_start=budget.used_gpu_hours,
    )


def _sim_job(job: Job, share_names: Mapping[int, str], configuration: Configuration) -> SimJob:
    retries = job.preemption_retries_before_termination
    if retries is not None:
        retries = max(0, retries - job.preemption_count)
    entries = job.entries
    if job.placement is not None and not entries:
        entries = ((_placement_entry(job)),)
    return SimJob(
        id=job.id,
        share=share_names[job.share_id],
        submitted_at=job.submitted_at.timestamp(),
        entries=entries,
        duration=None,  # the forward replay pushes each completion itself, by the type the job is placed on
        priority=job.priority,
        max_pending_seconds=job.max_pending_seconds,
        preemption_retries_before_termination=retries,
    )


def _placement_entry(job: Job) -> Entry:
    placement = job.placement
    return Entry(placement.instance_type, placement.instance_count, placement.training_plan)


def _expected_end(job: Job, expectations: Expectations, probability: float, now: float) -> float:
    """When a placed job is expected to end: a STOPPING job at its deadline, the others by their runtime."""
    # A STOPPING job (behaviour.md#a-jobs-life, graceful stops) keeps its capacity until the executor reports it stopped
    # or its grace period ends; the guard lets this module run on an engine that has no such status yet.
    stop_deadline = getattr(job, "stop_deadline", None)
    if str(job.status) == STOPPING and stop_deadline is not None:
        return max(now, stop_deadline.timestamp())
    placement = job.placement
    runtime = expectations.runtime(job.id, job.share_id, placement.instance_type)
    elapsed = max(0.0, now - placement.scheduled_at.timestamp())
    return now + runtime.remaining(elapsed, probability)


def pass_clock(now: float, interval: float, horizon: float, resolution: float) -> list[float]:
    """When the forward replay passes: every `interval` seconds at first, then every `resolution` of the
    time ahead, so a start an hour away is known to the minute and one a week away to some hours.

    A live pass runs every few seconds, so a start the replay gives at the next tick of this thinner clock
    is late by less than a tick; far ahead that is a small part of the wait, and it lets the completions of
    a busy queue share passes (a pass over thousands of waiting jobs is what the estimate spends its time
    on).
    """
    times = [now]
    moment = now
    while moment < now + horizon:
        moment += max(interval, resolution * (moment - now))
        times.append(moment)
    return times


class _ForwardSimulation(Simulation):
    """The replay started from a live state: placed jobs seeded as running, and stopped once every job whose
    start is wanted has started or never will, or a time cap passed."""

    def prepare(self, *, placed, runnable, wanted, runtime, deadline, lean=False, first_pass=None) -> None:
        self.runtime = runtime
        self.wanted_left = set(wanted)
        self.runnable_since = {job.id: job.runnable_since for job in runnable.values()}
        self.deadline = deadline
        self.cut_short = False
        self.reached = self.start
        self.placed_type: dict[int, str] = {}
        self.ended: list[tuple[float, str]] = []
        # Read at the replay's start, so the same in both replays (`_FirstPass` hands them on)
        self.problems: dict[tuple[str, tuple[Entry, ...]], str | None] = {}
        self.entry_problems: dict[tuple[str, Entry], str | None] = {}
        # job id -> the job as it first arrives: the same in both replays (`_FirstPass` hands them on)
        self.arrived: dict[int, Job] = {}
        if first_pass is not None:
            self.problems, self.entry_problems = first_pass.problems, first_pass.entry_problems
            self.arrived = first_pass.arrived
        if lean and isinstance(self.decider, ShortcutDecider):
            # A busy queue's passes would mostly preempt a summed holding of such a share, then nobody among
            # its real jobs: each pass run twice (`shortcuts`, point 1).
            self.decider.reducer.real_in_share = True
        if first_pass is not None:
            self.decider = _SharedFirstPass(self.decider, self, first_pass)
        now = self.start
        for job, ends_at in placed:
            outcome = self.outcomes[job.id]
            placement = job.placement
            outcome.status = Status.RUNNING
            outcome.attempt = 1
            outcome.first_placed_at = placement.scheduled_at.timestamp()
            outcome.placement = (
                placement.instance_type,
                placement.instance_count,
                placement.training_plan,
                placement.scheduled_at.timestamp(),
            )
            self.unfinished[job.id] = job
            self.placed.add(job)
            self.meter.change(
                now, job.share_id, placement.instance_type, placement.training_plan, placement.instance_count
            )
            if self.budgets is not None:
                self.budgets.change(
                    now,
                    job.share_id,
                    placement.instance_type,
                    placement.training_plan,
                    placement.instance_count,
                )
            self.placed_type[job.id] = placement.instance_type
            self.completions.append((ends_at, job.id, 1))
        self.completions.sort()

    def _submission_problem(self, job: SimJob) -> str | None:
        """A live job passed validation when it was submitted; an entry that could no longer run (its share's
        limit lowered, its plan expired) only never fits, and the job is `never` only when none can run."""
        if job.share not in self.share_configs:
            return super()._submission_problem(job)
        key = (job.share, job.entries)  # read at the replay's start: the same for every job of the share
        if key not in self.problems:
            problems = [self._entry_problem(job.share, entry) for entry in job.entries]
            self.problems[key] = "no entry can ever run: " + "; ".join(problems) if all(problems) else None
        return self.problems[key]

    def _entry_problem(self, share: str, entry: Entry) -> str | None:
        key = (share, entry)  # many preference lists share their entries
        if key not in self.entry_problems:
            self.entry_problems[key] = entry_problem(
                self.config, self.share_configs[share], entry, self.start
            )
        return self.entry_problems[key]

    def _runnable_job(self, outcome):
        job_id = outcome.job.id
        since = self.runnable_since.get(job_id)
        if since is None or outcome.attempt != 0:
            return super()._runnable_job(outcome)
        # Its first arrival, from the snapshot: nothing of the replay has touched it yet.
        outcome.runnable_since = since.timestamp()
        job = self.arrived.get(job_id)
        if job is None:
            job = self.arrived[job_id] = super()._runnable_job(outcome)
        return job

    def _admit(self, admission, index: int, now: float) -> None:
        super()._admit(admission, index, now)
        self.wanted_left.discard(admission.job_id)
        self.placed_type[admission.job_id] = admission.instance_type
        outcome = self.outcomes[admission.job_id]
        seconds = self.runtime(admission.job_id, admission.share_id, admission.instance_type)
        heapq.heappush(self.completions, (now + seconds, admission.job_id, outcome.attempt))

    def _stop(self, outcome, at: float, status: str, reason: str) -> None:
        if status == Status.SUCCEEDED:
            self.ended.append((at, self.placed_type[outcome.job.id]))
        else:
            self.wanted_left.discard(outcome.job.id)
        super()._stop(outcome, at, status, reason)

    def _next_event(self):
        if not self.wanted_left:
            return None
        if self.deadline is not None and wallclock.perf_counter() > self.deadline:
            self.cut_short = True
            return None
        return super()._next_event()

    def _apply(self, decisions, index: int, now: float) -> bool:
        self.reached = now
        return super()._apply(decisions, index, now)

    def ends_by_type(self) -> dict[str, list[float]]:
        ends: dict[str, list[float]] = {}
        for at, type_ in self.ended:
            ends.setdefault(type_, []).append(at)
        for times in ends.values():
            times.sort()
        return ends


@dataclass
class _FirstPass:
    """The first pass of the first replay, for the second: both replays start from the snapshot and differ
    only in when jobs end, so a first pass that comes before any job ended sees the same queue in both."""

    key: tuple | None = None  # (pass index, time, the ids of the jobs in the queue then)
    decisions: Decisions | None = None
    # Where the last replay's passes that preempted started (`ShortcutDecider.preempting_start`): the same
    # holdings borrow and the same groups stay stuck in both replays, and any start is as exact.
    preempting_start: tuple | None = None
    # Which jobs (entries) could never run, judged at the snapshot's time for both replays
    problems: dict = field(default_factory=dict)
    entry_problems: dict = field(default_factory=dict)
    # The replay's jobs (`SimJob`s, and the RUNNABLE ones of the snapshot by id) and the RUNNABLE jobs as
    # they first arrive (`_ForwardSimulation._runnable_job`): built from the snapshot alike in both replays
    jobs: tuple[list, dict] | None = None
    arrived: dict = field(default_factory=dict)


class _SharedFirstPass:
    """A decider that takes the first pass from `first` when the queue is the one `first` was decided on,
    or decides it and keeps it there; every later pass is the wrapped decider's."""

    def __init__(self, decider, simulation: Simulation, first: _FirstPass):
        self.decider = decider
        self.simulation = simulation
        self.first = first
        self.done = False
        if first.preempting_start is not None and hasattr(decider, "preempting_start"):
            decider.preempting_start = first.preempting_start

    def decide(self, index: int, now: float) -> Decisions:
        if self.done:
            decisions = self.decider.decide(index, now)
            self.first.preempting_start = getattr(self.decider, "preempting_start", None)
            return decisions
        self.done = True
        key = (index, now, frozenset(self.simulation.unfinished))
        first = self.first
        if first.key == key:
            return first.decisions
        decisions = self.decider.decide(index, now)
        if first.key is None:
            first.key, first.decisions = key, decisions
        return decisions


# --- the words ---------------------------------------------------------------------------------------------


def _combine(
    job_id: int, typical: _Forward, pessimistic: _Forward, now: datetime, horizon: float
) -> Estimate:
    if job_id in typical.never:
        return Estimate(job_id, None, None, f"never: {typical.never[job_id]}")
    start = typical.starts.get(job_id)
    if start is None and typical.cut_at is not None:
        return Estimate(
            job_id,
            None,
            None,
            f"not before {_clock(typical.cut_at, now.timestamp())}: the estimate stopped there",
        )
    if start is None:
        beyond = now + timedelta(seconds=horizon)
        return Estimate(
            job_id, None, None, f"not before {_clock(beyond.timestamp())}: beyond the estimate's horizon"
        )
    late = pessimistic.starts.get(job_id)
    earliest = to_datetime(start)
    latest = to_datetime(max(start, late)) if late is not None else None
    return Estimate(job_id, earliest, latest, _basis(job_id, typical, now.timestamp(), start))


def _basis(job_id: int, forward: _Forward, now: float, start: float) -> str:
    instance_type, plan, by_preemption = forward.placed_on[job_id]
    around = _clock(start, now)
    if plan is not None:
        return f"on training plan {plan} ({instance_type}), around {around}"
    ends = forward.ends.get(instance_type, [])
    ahead = bisect_right(ends, start) - bisect_right(ends, now)
    if by_preemption and not ahead:
        return f"by reclaiming or preempting on {instance_type}, around {around}"
    if not ahead:
        return f"fits on {instance_type} at the next pass, around {around}"
    # Jobs holding (or placed on) the type before it, of any share: not the jobs waiting before it in its share,
    # which its queue position counts.
    jobs = "1 job" if ahead == 1 else f"{ahead} jobs"
    end = "ends" if ahead == 1 else "end"
    return f"once {jobs} on {instance_type} (running or placed before it) {end}, around {around}"


@lru_cache(maxsize=4096)  # thousands of jobs start at the same few hundred passes
def _clock(seconds: float, now: float | None = None) -> str:
    """A time for a one-line basis: HH:MM UTC, with the day when it is not the day of `now`."""
    moment = EPOCH + timedelta(seconds=seconds)
    if now is not None and moment.date() == (EPOCH + timedelta(seconds=now)).date():
        return moment.strftime("%H:%M UTC")
    return moment.strftime("%a %d %b %H:%M UTC")


def what_if(
    snapshot: Snapshot,
    expectations: Expectations,
    job: Job,
    *,
    pass_interval: float = 5.0,
    time_limit: float | None = None,
    resolution: float = RESOLUTION,
) -> Estimate:
    """The estimate for `job` if it were submitted now: the snapshot with it added as the newest RUNNABLE job."""
    newest = max((j.id for j in snapshot.jobs), default=0) + 1
    added = replace(
        job,
        id=newest,
        submitted_at=snapshot.now,
        runnable_since=snapshot.now,
        status=JobStatus.RUNNABLE,
        placement=None,
    )
    with_job = replace(snapshot, jobs=(*snapshot.jobs, added))
    run = estimate(
        with_job,
        expectations,
        only=[newest],
        pass_interval=pass_interval,
        time_limit=time_limit,
        resolution=resolution,
    )
    found = run.estimates[newest]
    return replace(found, job_id=job.id)


__all__ = [
    "ConfigurationError",
    "Estimate",
    "EstimateRun",
    "Expectations",
    "Runtime",
    "estimate",
    "what_if",
]
