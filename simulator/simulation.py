"""The discrete-event replay: jobs arrive, passes of the unchanged engine place and preempt them, jobs finish.

Virtual time only, no database. Events are job arrivals, completions and cancellations, training plan
boundaries, pending-timeout deadlines and pass ticks. Passes run on a clock (every `pass_interval` seconds
from `start`, or at the given `pass_times`); whatever happened since the last pass is seen by the next one,
which is how the live system batches a burst of submissions into the pass that follows.

After each pass its decisions are applied exactly as `scheduling.passes.snapshot.decisions_write` writes
them: drains first, then preemptions, timeouts and admissions. An admitted job is RUNNING at once (plus
`startup_seconds`, like the simulated executor) and completes `duration` seconds later; a preempted or
drained job goes back to RUNNABLE keeping its submission time, and its work is thrown away: it restarts from
zero when placed again.

With a stop delay (`Configuration.stop_seconds` > 0, the environment's stop_grace_seconds) every placed job is
taken by the executor, so a preempted, drained or cancelled job is STOPPING for that long, holding its
capacity, before it is RUNNABLE (or FAILED, CANCELLED); the engine nominates its preemptor, and the
nomination is carried on the RUNNABLE job between passes. With 0 (the default) jobs stop at once, as before.

A pass is skipped only when it provably decides nothing: the previous pass decided nothing and no event has
happened since. The engine reads `now` only for plan windows and pending timeouts, and both are events here,
so such a pass would see the same snapshot and make the same (empty) decisions. `shortcuts` extends this to
events nobody waiting can use, and gives the engine smaller snapshots that lead to the same decisions. Pass
indexes stay those of the clock, so the record of a replay is the record of a live system passing at every
tick.

The loop asks one decider for each pass: `WholeQueueDecider`, the plain replay (the whole queue's snapshot to
`engine.schedule`), or `shortcuts.ShortcutDecider`, which falls back to it wherever its proofs do not hold.
"""

from __future__ import annotations

import heapq
import math
import time as wallclock
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from engine import (
    Decisions,
    Entry,
    Job,
    JobStatus,
    Nomination,
    Ordering,
    Placement,
    Share,
    Snapshot,
    Strategy,
    schedule,
)
from engine.housekeeping import pending_too_long_after
from engine.submission import MAX_PREFERENCES, preference_count_allowed, repeated_entries

from .budgets import BudgetMeter
from .config import EPOCH, Configuration, entry_problem, to_datetime, validate
from .invariants import InvariantViolation, PassChecker
from .meter import Unmetered, UsageMeter
from .shortcuts import (
    PlacedJobs,
    ReducedSnapshot,
    Reducer,
    RunnableGroups,
    ShortcutDecider,
    saturation_key,
    shortcuts_cover,
)

ScheduleFunction = Callable[[Snapshot], Decisions]


@dataclass(frozen=True, slots=True)
class SimJob:
    """`share` names its quota share; `duration` is its run time once placed (None: forever)."""

    id: int
    share: str
    submitted_at: float
    entries: tuple[Entry, ...]
    duration: float | None
    priority: int = 0
    max_pending_seconds: int | None = None
    preemption_retries_before_termination: int | None = None
    cancelled_at: float | None = None
    gpus: int = 0  # GPUs the job asked for, as the trace says (0: not known)
    relocate: bool = False  # it may move to an earlier entry (the configuration's `relocate` lets every job)


class Kind:
    """What a record says happened; the names of the live system's events and status reasons."""

    ADMITTED = "ADMITTED"
    PREEMPTED_RECLAIM = "PREEMPTED_RECLAIM"
    PREEMPTED_IN_SHARE = "PREEMPTED_IN_SHARE"
    PREEMPTED_LIMIT_REDUCED = "PREEMPTED_LIMIT_REDUCED"
    PLAN_EXPIRING = "PLAN_EXPIRING"
    PENDING_TIMEOUT = "PENDING_TIMEOUT"
    NOMINATED = "NOMINATED"
    RELOCATING = "RELOCATING"


@dataclass(frozen=True, slots=True)
class Record:
    """One decision of one pass; `pass_index` counts the clock's ticks from 0, skipped ones too."""

    pass_index: int
    time: float
    kind: str
    job_id: int
    share: str
    instance_type: str | None = None
    instance_count: int | None = None
    training_plan: str | None = None
    entry_index: int | None = None
    borrowed: int = 0
    preemptor_job_id: int | None = None
    fails: bool = False


class Status:
    RUNNABLE = "RUNNABLE"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    REJECTED = "REJECTED"
    NOT_ARRIVED = "NOT_ARRIVED"


@dataclass(slots=True)
class JobOutcome:
    """What became of one job by the end of the replay."""

    job: SimJob
    status: str = Status.NOT_ARRIVED
    reason: str = ""
    first_placed_at: float | None = None
    finished_at: float | None = None
    preemptions: int = 0
    drains: int = 0
    lost_gpu_seconds: float = 0.0  # work thrown away by preemptions
    drained_gpu_seconds: float = 0.0  # work thrown away by plan drains
    stopping_gpu_seconds: float = 0.0  # capacity held while STOPPING (the cost of graceful stops)
    # once STOPPING ends: the status and reason it takes (RUNNABLE: back to the queue)
    after_stopping: tuple[str, str] | None = None
    # the current attempt: (instance type, count, plan, placed at), and its number for stale completions
    placement: tuple[str, int, str | None, float] | None = None
    attempt: int = 0
    runnable_since: float = 0.0
    # Relocation: moves, the run time its checkpoints kept (a moved job resumes; a preempted one starts over),
    # the entry it moves to while it stops, and GPU-seconds its attempts ran on the plan it moved onto.
    relocations: int = 0
    done_seconds: float = 0.0
    relocating_to: int | None = None
    moving: bool = False  # moved, and not placed since
    moved_onto_plan: bool = False
    moved_onto_plan_gpu_seconds: float = 0.0

    @property
    def wait_seconds(self) -> float | None:
        """First placement minus arrival."""
        return None if self.first_placed_at is None else self.first_placed_at - self.job.submitted_at


@dataclass
class ReplayStats:
    """How the replay spent its time: passes on the clock, run (reduced or whole), skipped, and seconds."""

    passes_on_clock: int = 0
    passes_run: int = 0
    passes_reduced: int = 0
    passes_preempting: int = 0
    passes_whole: int = 0
    reduced_retries: int = 0
    # why a pass that preempts was run again: `shortcuts.Verdict` values other than "exact"
    preempting_retries: dict[str, int] = field(default_factory=dict)
    passes_skipped_after_events: int = 0
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    engine_seconds: float = 0.0
    # seconds deciding passes (engine and reduction, retries included) by how the pass was decided:
    # "reduced" (shortcuts 1, 2), "preempting" (shortcut 3) or "whole"
    seconds_by_pass: dict[str, float] = field(default_factory=dict)


@dataclass
class Result:
    configuration: Configuration
    start: float
    end: float
    records: list[Record]
    outcomes: dict[int, JobOutcome]
    meter: UsageMeter | Unmetered
    share_ids: dict[str, int]
    stats: ReplayStats
    unknown_shares: dict[str, int] = field(default_factory=dict)
    budgets: BudgetMeter | None = None  # the budgeted shares' consumption (None: no share has a budget)

    @property
    def jobs(self) -> int:
        return len(self.outcomes)


class PassClock:
    """When passes run: every `interval` seconds from `origin`, or at the given times."""

    def __init__(self, *, origin: float, interval: float | None = None, times: Sequence[float] | None = None):
        if times is not None:
            self.times: list[float] | None = sorted(times)
        else:
            if interval is None or interval <= 0:
                raise ValueError("the pass interval must be positive")
            self.times = None
        self.origin = origin
        self.interval = interval

    def at(self, index: int) -> float | None:
        if self.times is not None:
            return self.times[index] if index < len(self.times) else None
        return self.origin + index * self.interval

    def first_index(self, moment: float, *, strictly_after: bool = False) -> int:
        """The first pass at or after `moment` (strictly after, when asked)."""
        if self.times is not None:
            return (bisect_right if strictly_after else bisect_left)(self.times, moment)
        ticks = (moment - self.origin) / self.interval
        index = math.floor(ticks) + 1 if strictly_after else math.ceil(ticks)
        return max(0, index)


class Snapshots:
    """The engine's snapshot of the simulation's queue at a pass: whole, or reduced by the shortcuts."""

    def __init__(self, simulation: Simulation):
        self.simulation = simulation

    def whole(self, now: float) -> Snapshot:
        return self.of(now, self.simulation.unfinished.values())

    def of(self, now: float, jobs: Iterable[Job], reduced: ReducedSnapshot | None = None) -> Snapshot:
        sim = self.simulation
        shares = sim.shares if reduced is None else reduced.shares
        if sim.budgets is not None and sim.budgeted:
            shares = sim.with_budgets(shares, now)
        return Snapshot(
            now=to_datetime(now),
            capacity=sim.capacity if reduced is None else reduced.capacity,
            shares=shares,
            jobs=tuple(jobs),
            plans=sim.plans,
            ordering=sim.config.ordering,
            plan_drain_seconds=sim.config.plan_drain_seconds,
            idle_capacity_assignment=sim.config.idle_capacity_assignment,
            preemption_min_runtime_seconds=sim.config.preemption_min_runtime_seconds,
            relocation_min_runtime_seconds=sim.config.relocation_min_runtime_seconds,
            max_relocations_per_pass=sim.config.max_relocations_per_pass if sim.may_relocate else 0,
        )


class WholeQueueDecider:
    """The plain replay: each pass is the engine's decisions on the whole queue's snapshot."""

    def __init__(self, schedule: ScheduleFunction, snapshots: Snapshots, stats: ReplayStats):
        self.schedule = schedule
        self.snapshots = snapshots
        self.stats = stats

    def decide(self, index: int, now: float) -> Decisions:
        self.stats.passes_whole += 1
        return self.schedule(self.snapshots.whole(now))


class Simulation:
    """One replay of `jobs` against one configuration. Use `simulate`."""

    def __init__(
        self,
        configuration: Configuration,
        jobs: Sequence[SimJob],
        *,
        start: float | None,
        end: float | None,
        pass_interval: float,
        pass_times: Sequence[float] | None,
        check: bool,
        schedule_function: ScheduleFunction,
        startup_seconds: float,
        progress: Callable[[float], None] | None,
        shortcuts: bool,
        verify_shortcuts: bool,
        metered: bool = True,
        consumption: bool = False,
    ):
        self.config = validate(configuration)
        self.schedule = schedule_function
        self.startup = startup_seconds
        self.progress = progress
        # The shortcuts' proofs assume the FIFO head order and victims that stay candidates as time passes;
        # under FAIR_SHARE or with a protection from early preemption every pass is the whole queue's.
        shortcuts = shortcuts and shortcuts_cover(self.config)
        self.shortcuts = shortcuts
        self.verify = verify_shortcuts and shortcuts
        self.share_ids = {share.name: configuration.share_id(share.name) for share in configuration.shares}
        self.share_configs = {share.name: share for share in configuration.shares}
        self.shares = tuple(
            Share(
                id=self.share_ids[s.name],
                name=s.name,
                strategy=s.strategy,
                limits=dict(s.limits),
                borrow_limit=s.borrow_limit,
                in_share_preemption=s.in_share_preemption,
                enabled=s.enabled,
                lending_limits=dict(s.lending_limits),
                fair_share_weight=s.fair_share_weight,
            )
            for s in configuration.shares
        )
        self.share_by_id = {share.id: share for share in self.shares}
        self.in_share_preempting = frozenset(share.id for share in self.shares if share.in_share_preemption)
        self.plans = tuple(self.config.engine_plans.values())
        self.capacity = dict(configuration.capacity)
        self.arrivals = sorted(jobs, key=lambda job: (job.submitted_at, job.id))
        if len({job.id for job in self.arrivals}) != len(self.arrivals):
            raise ValueError("job ids must be unique")
        if any(job.id <= 0 for job in self.arrivals):
            raise ValueError("job ids must be positive")
        first = self.arrivals[0].submitted_at if self.arrivals else 0.0
        self.start = first if start is None else start
        self.end = end
        if pass_times is not None:
            self.clock = PassClock(origin=self.start, times=pass_times)
        else:
            self.clock = PassClock(origin=self.start, interval=pass_interval)
        self.outcomes: dict[int, JobOutcome] = {job.id: JobOutcome(job=job) for job in self.arrivals}
        self.next_arrival = 0
        self.cancels = sorted(
            (job.cancelled_at, job.id) for job in self.arrivals if job.cancelled_at is not None
        )
        self.next_cancel = 0
        self.completions: list[tuple[float, int, int]] = []  # (time, job id, attempt)
        self.stop_seconds = self.config.stop_seconds
        self.stop_ends: list[tuple[float, int]] = []  # (time, job id) of STOPPING jobs
        # Jobs STOPPING or nominated: while there are any, the shortcuts' proofs do not hold (see `_arrive`).
        self.settling: set[int] = set()
        # Running jobs that may move to an earlier entry: while there are any, every pass runs on the whole
        # queue (the shortcuts' proofs do not cover relocation) and no pass is skipped after an event.
        self.relocatable: set[int] = set()
        self.may_relocate = configuration.relocate or any(job.relocate for job in jobs)
        self.wakes: list[tuple[float, bool]] = []  # (time, only a pass strictly after sees it)
        for plan in configuration.plans:
            for boundary in (plan.start, plan.end - configuration.plan_drain_seconds, plan.end):
                heapq.heappush(self.wakes, (boundary, False))
        self.records: list[Record] = []
        self.unknown_shares: dict[str, int] = {}
        # What the next snapshot holds (by job id), indexed for the shortcuts.
        self.unfinished: dict[int, Job] = {}
        self.groups = RunnableGroups(
            strict_fifo=configuration.ordering == Ordering.STRICT_FIFO,
            by_priority={share.id for share in self.share_by_id.values() if share.in_share_preemption},
        )
        self.placed = PlacedJobs(self.share_by_id)
        # RUNNABLE jobs with a max_pending_seconds -> the moment they have waited longer than that
        self.timeout_watch: dict[int, datetime] = {}
        self.waiting: dict[tuple, int] = {}  # saturation key -> RUNNABLE jobs
        self.waiting_on_type: dict[str, set[tuple]] = {}
        self.waiting_on_plan: dict[str, set[tuple]] = {}
        self.saturated: set[tuple] = set()
        self.needs_pass = False
        self.stats = ReplayStats()
        self.snapshots = Snapshots(self)
        whole = WholeQueueDecider(self.schedule, self.snapshots, self.stats)
        self.decider: WholeQueueDecider | ShortcutDecider = (
            ShortcutDecider(
                whole,
                Reducer(
                    shares=self.share_by_id,
                    capacity=self.capacity,
                    plans=self.plans,
                    epoch=EPOCH,
                    plan_drain_seconds=configuration.plan_drain_seconds,
                ),
                unfinished=self.unfinished,
                placed=self.placed,
                groups=self.groups,
                timeout_watch=self.timeout_watch,
                verify=verify_shortcuts,
                settling=self.settling,
                relocatable=self.relocatable,
                graceful_stops=self.stop_seconds > 0,
            )
            if shortcuts
            else whole
        )
        # `metered=False`: a replay that reads only its records (the start-time estimator's) keeps no
        # account of usage over time.
        self.meter = (
            Unmetered()
            if not metered
            else UsageMeter(
                share_ids=[share.id for share in self.shares],
                capacity=self.capacity,
                limits={share.id: share.limits for share in self.shares},
                strategies={share.id: share.strategy for share in self.shares},
                gpus={type_: configuration.gpus_of(type_) for type_ in self._all_types()},
                start=self.start,
                lending_limits={share.id: share.lending_limits for share in self.shares},
            )
        )
        # GPU-hour budgets (`simulator.budgets`): each pass's shares carry their budget's state. With
        # `consumption`, every share's GPU-hours per month are kept too, budget or not.
        budgets = {self.share_ids[s.name]: s.budget for s in configuration.shares if s.budget is not None}
        self.budgets = (
            BudgetMeter(
                budgets=budgets,
                limits={share.id: share.limits for share in self.shares},
                gpus={type_: configuration.gpus_of(type_) for type_ in self._all_types()},
                start=self.start,
                every_share=consumption,
            )
            if budgets or consumption
            else None
        )
        self.budgeted = bool(budgets)
        self.budget_wakes: set[tuple[int, float]] = set()
        self.checker = (
            PassChecker(
                configuration.name,
                capacity=self.capacity,
                shares=self.shares,
                plans=self.plans,
                drain_seconds=configuration.plan_drain_seconds,
            )
            if check
            else None
        )

    def with_budgets(self, shares: tuple[Share, ...], now: float) -> tuple[Share, ...]:
        """The shares with their budgets' state at `now`. A spent budget's reset wakes the replay: the pass
        then may place what none could before (`shortcuts`, point 4, skips passes only until an event)."""
        budgets = self.budgets
        with_state = []
        for share in shares:
            budget = budgets.budget_of(share.id, now)
            if budget is None:
                with_state.append(share)
                continue
            with_state.append(replace(share, budget=budget))
            reset = budgets.resets_at(share.id)
            if budget.spent and (share.id, reset) not in self.budget_wakes:
                self.budget_wakes.add((share.id, reset))
                heapq.heappush(self.wakes, (reset, False))
        return tuple(with_state)

    def _all_types(self) -> set[str]:
        types = set(self.capacity)
        for job in self.arrivals:
            types.update(entry.instance_type for entry in job.entries)
        types.update(plan.instance_type for plan in self.config.plans)
        return types

    # --- the loop ----------------------------------------------------------------------------------------

    def run(self) -> Result:
        started, cpu_started = wallclock.perf_counter(), wallclock.process_time()
        stats = self.stats
        last_index = -1
        decided = False
        last_time = self.start
        span = (self.end - self.start) if self.end is not None else None
        while True:
            if decided:
                index = last_index + 1
            else:
                upcoming = self._next_event()
                if upcoming is None:
                    break
                moment, strictly_after = upcoming
                index = max(last_index + 1, self.clock.first_index(moment, strictly_after=strictly_after))
            now = self.clock.at(index)
            if now is None or (self.end is not None and now >= self.end):
                break
            self._events_until(now)
            last_index, last_time = index, now
            if not decided and not self.needs_pass and self.shortcuts and not self.relocatable:
                stats.passes_skipped_after_events += 1
                if self.verify:
                    self._verify_nothing_to_decide(index, now)
                continue
            tick = wallclock.perf_counter()
            preempting, whole = stats.passes_preempting, stats.passes_whole
            decisions = self.decider.decide(index, now)
            spent = wallclock.perf_counter() - tick
            stats.engine_seconds += spent
            kind = (
                "whole"
                if stats.passes_whole > whole
                else "preempting"
                if stats.passes_preempting > preempting
                else "reduced"
            )
            stats.seconds_by_pass[kind] = stats.seconds_by_pass.get(kind, 0.0) + spent
            stats.passes_run += 1
            decided = self._apply(decisions, index, now)
            if not decided or (self.shortcuts and self._settled(decisions)):
                if decided and self.verify:
                    self._verify_nothing_to_decide(index, now)
                decided = False
                self.saturated = set(self.waiting)
                self.needs_pass = False
            if self.progress is not None and stats.passes_run % 250 == 0:
                done = (now - self.start) / span if span else self.next_arrival / max(1, len(self.arrivals))
                self.progress(min(1.0, done))
        finish = self.end if self.end is not None else max(last_time, self._last_finish())
        self._events_until(finish)
        self.meter.advance(finish)
        if self.budgets is not None:
            self.budgets.advance(finish)
        for outcome in self.outcomes.values():  # attempts still running on a plan they moved onto
            if outcome.moved_onto_plan and outcome.placement is not None:
                instance_type, count, _, placed_at = outcome.placement
                ran = max(0.0, finish - placed_at - self.startup)
                outcome.moved_onto_plan_gpu_seconds += ran * count * self.config.gpus_of(instance_type)
        if self.progress is not None:
            self.progress(1.0)
        stats.passes_on_clock = self.clock.first_index(finish) if self.end is not None else last_index + 1
        stats.wall_seconds = wallclock.perf_counter() - started
        stats.cpu_seconds = wallclock.process_time() - cpu_started
        return Result(
            configuration=self.config,
            start=self.start,
            end=finish,
            records=self.records,
            outcomes=self.outcomes,
            meter=self.meter,
            share_ids=self.share_ids,
            stats=stats,
            unknown_shares=self.unknown_shares,
            budgets=self.budgets,
        )

    def release(self) -> None:
        """Drop the replay's state once what is wanted of it was read. It refers to itself through its deciders
        (and they to it), so without this only the cyclic collector frees it, walking all of it first."""
        vars(self).clear()

    def _next_event(self) -> tuple[float, bool] | None:
        """The earliest thing that may change what a pass decides, and whether only a later pass sees it."""
        candidates: list[tuple[float, bool]] = []
        if self.next_arrival < len(self.arrivals):
            candidates.append((self.arrivals[self.next_arrival].submitted_at, False))
        self._drop_stale_completions()
        if self.completions:
            candidates.append((self.completions[0][0], False))
        if self.next_cancel < len(self.cancels):
            candidates.append((self.cancels[self.next_cancel][0], False))
        if self.stop_ends:
            candidates.append((self.stop_ends[0][0], False))
        if self.wakes:
            candidates.append(self.wakes[0])
        return min(candidates) if candidates else None

    def _drop_stale_completions(self) -> None:
        """Completions of attempts that were preempted, drained or cancelled never happen."""
        completions = self.completions
        while completions:
            _, job_id, attempt = completions[0]
            outcome = self.outcomes[job_id]
            if outcome.status == Status.RUNNING and outcome.attempt == attempt:
                return
            heapq.heappop(completions)

    def _last_finish(self) -> float:
        return max(
            (o.finished_at for o in self.outcomes.values() if o.finished_at is not None), default=self.start
        )

    def _events_until(self, now: float, *, arrivals: bool = True) -> None:
        """Apply, in time order, the completions, cancellations and arrivals at or before `now`."""
        while True:
            self._drop_stale_completions()
            candidates = []
            if self.completions and self.completions[0][0] <= now:
                candidates.append((self.completions[0][0], 0))
            if self.next_cancel < len(self.cancels) and self.cancels[self.next_cancel][0] <= now:
                candidates.append((self.cancels[self.next_cancel][0], 1))
            if self.stop_ends and self.stop_ends[0][0] <= now:
                candidates.append((self.stop_ends[0][0], 3))
            if (
                arrivals
                and self.next_arrival < len(self.arrivals)
                and self.arrivals[self.next_arrival].submitted_at <= now
            ):
                candidates.append((self.arrivals[self.next_arrival].submitted_at, 2))
            if not candidates:
                break
            moment, which = min(candidates)
            if which == 2:
                # Arrivals touch no completion, cancellation or stop: every one up to the next of those (or
                # `now`) comes first, in submission order.
                others = [candidate for candidate in candidates if candidate[1] != 2]
                until = min(others) if others else (now, 3)
                arrivals, index = self.arrivals, self.next_arrival
                while index < len(arrivals) and (arrivals[index].submitted_at, 2) < until:
                    self._arrive(arrivals[index])
                    index += 1
                    self.next_arrival = index
                continue
            if which == 0:
                _, job_id, _ = heapq.heappop(self.completions)
                self._stop(self.outcomes[job_id], moment, Status.SUCCEEDED, "completed")
            elif which == 1:
                _, job_id = self.cancels[self.next_cancel]
                self.next_cancel += 1
                self._cancel(self.outcomes[job_id], moment)
            else:
                _, job_id = heapq.heappop(self.stop_ends)
                self._end_stopping(self.outcomes[job_id], moment)
        wakes = self.wakes
        while wakes and (wakes[0][0] < now or (wakes[0][0] == now and not wakes[0][1])):
            heapq.heappop(wakes)
            self.needs_pass = True

    # --- jobs --------------------------------------------------------------------------------------------

    def _arrive(self, job: SimJob) -> None:
        """Submission, validated as the live system validates it (behaviour.md#a-jobs-life)."""
        outcome = self.outcomes[job.id]
        if outcome.status != Status.NOT_ARRIVED:  # cancelled before it arrived
            return
        problem = self._submission_problem(job)
        if problem is not None:
            outcome.status, outcome.reason = Status.REJECTED, problem
            return
        outcome.status = Status.RUNNABLE
        outcome.runnable_since = job.submitted_at
        engine_job = self._runnable_job(outcome)
        self._enqueue(engine_job)
        # Shortcut 4 (a group that failed fails again) does not cover earmarks: with jobs STOPPING or
        # nominated, a newcomer may be nominated where its group was not.
        if self.settling or saturation_key(engine_job) not in self.saturated:
            self.needs_pass = True

    def _submission_problem(self, job: SimJob) -> str | None:
        share = self.share_configs.get(job.share)
        if share is None:
            self.unknown_shares[job.share] = self.unknown_shares.get(job.share, 0) + 1
            return f"no quota share named {job.share} in configuration {self.config.name}"
        if not share.enabled:
            return f"share {share.name} is disabled and accepts no jobs"
        if not preference_count_allowed(len(job.entries)):
            return f"{len(job.entries)} preference entries; 1 to {MAX_PREFERENCES} are allowed"
        if repeated_entries([(e.instance_type, e.training_plan) for e in job.entries]):
            return "a (type, plan) pair is repeated in the preference list"
        for entry in job.entries:
            problem = entry_problem(self.config, share, entry, job.submitted_at)
            if problem is not None:
                return f"an entry could never run: {problem}"
        return None

    def _cancel(self, outcome: JobOutcome, at: float) -> None:
        if outcome.status == Status.NOT_ARRIVED:
            outcome.status, outcome.reason, outcome.finished_at = (
                Status.CANCELLED,
                "cancelled before submission",
                at,
            )
        elif outcome.status == Status.STOPPING:
            outcome.after_stopping = (Status.CANCELLED, "cancelled")
        elif outcome.status == Status.RUNNING and self.stop_seconds > 0:
            self._begin_stopping(outcome, at, (Status.CANCELLED, "cancelled"))
        elif outcome.status in (Status.RUNNABLE, Status.RUNNING):
            if outcome.status == Status.RUNNABLE and (
                self.groups.strict_fifo or outcome.job.id in self.settling
            ):
                self.needs_pass = True  # it may have held its share's queue, or an earmark
            self.settling.discard(outcome.job.id)
            self._stop(outcome, at, Status.CANCELLED, "cancelled")

    def _runnable_job(self, outcome: JobOutcome) -> Job:
        job = outcome.job
        return Job(
            id=job.id,
            share_id=self.share_ids[job.share],
            priority=job.priority,
            submitted_at=to_datetime(job.submitted_at),
            entries=job.entries,
            runnable_since=to_datetime(outcome.runnable_since),
            max_pending_seconds=job.max_pending_seconds,
            preemption_count=outcome.preemptions,
            preemption_retries_before_termination=job.preemption_retries_before_termination,
            relocate=self.config.relocate or job.relocate,
            nomination=(
                None
                if outcome.relocating_to is None
                else Nomination(outcome.relocating_to, frozenset({job.id}))
            ),
        )

    def _enqueue(self, job: Job) -> None:
        """`job` is RUNNABLE: in the next snapshot, its group and the watches."""
        self.unfinished[job.id] = job
        self.groups.add(job)
        key = saturation_key(job)
        count = self.waiting.get(key, 0)
        self.waiting[key] = count + 1
        if not count:
            for entry in job.entries:
                index = self.waiting_on_plan if entry.training_plan else self.waiting_on_type
                index.setdefault(entry.training_plan or entry.instance_type, set()).add(key)
        if job.max_pending_seconds is not None:
            self.timeout_watch[job.id] = pending_too_long_after(job)
            heapq.heappush(self.wakes, (job.runnable_since.timestamp() + job.max_pending_seconds, True))

    def _dequeue(self, job: Job) -> None:
        self.groups.remove(job)
        key = saturation_key(job)
        count = self.waiting[key] - 1
        if count:
            self.waiting[key] = count
        else:
            del self.waiting[key]
            for entry in job.entries:
                index = self.waiting_on_plan if entry.training_plan else self.waiting_on_type
                index[entry.training_plan or entry.instance_type].discard(key)
        self.timeout_watch.pop(job.id, None)

    def _release(self, outcome: JobOutcome, at: float) -> float:
        """Free the job's capacity at `at`; returns the GPU-seconds its attempt ran."""
        job = self.unfinished[outcome.job.id]
        self.placed.remove(job)
        self.relocatable.discard(job.id)
        instance_type, count, plan, placed_at = outcome.placement
        self.meter.change(at, job.share_id, instance_type, plan, -count)
        if self.budgets is not None:
            self.budgets.change(at, job.share_id, instance_type, plan, -count)
        if self.checker is not None:
            self.checker.release(job.share_id, instance_type, plan, count)
        outcome.placement = None
        ran = max(0.0, at - placed_at - self.startup)
        if outcome.moved_onto_plan:
            outcome.moved_onto_plan_gpu_seconds += ran * count * self.config.gpus_of(instance_type)
            outcome.moved_onto_plan = False
        return ran * count * self.config.gpus_of(instance_type)

    def _release_matters(self, instance_type: str, plan: str | None) -> bool:
        """Could capacity freed on this type (or plan) let a waiting job fit or preempt (shortcut 4)?"""
        if plan is not None:
            return bool(self.waiting_on_plan.get(plan))
        for share_id, entries, _ in self.waiting_on_type.get(instance_type, ()):
            share = self.share_by_id[share_id]
            if not share.enabled:
                continue
            if share.strategy == Strategy.LEND_AND_BORROW or share.in_share_preemption:
                return True
            room = share.limits.get(instance_type, 0) - self.placed.usage.get((share_id, instance_type), 0)
            if any(
                e.training_plan is None and e.instance_type == instance_type and e.instance_count <= room
                for e in entries
            ):
                return True
        return False

    def _stop(self, outcome: JobOutcome, at: float, status: str, reason: str) -> None:
        job = self.unfinished.get(outcome.job.id)
        if outcome.placement is not None:
            instance_type, _, plan, _ = outcome.placement
            self._release(outcome, at)
            if not self.needs_pass and (self.settling or self._release_matters(instance_type, plan)):
                self.needs_pass = True
        elif job is not None:
            self._dequeue(job)
        outcome.status, outcome.reason, outcome.finished_at = status, reason, at
        self.unfinished.pop(outcome.job.id, None)

    def _back_to_queue(self, outcome: JobOutcome, now: float) -> None:
        outcome.status = Status.RUNNABLE
        outcome.runnable_since = now
        self._enqueue(self._runnable_job(outcome))
        if outcome.relocating_to is not None:
            self.settling.add(outcome.job.id)  # nominated: its new entry stays earmarked for it

    def _begin_stopping(self, outcome: JobOutcome, now: float, then: tuple[str, str]) -> None:
        """The executor stops the job gracefully: STOPPING for `stop_seconds`, holding its capacity."""
        job = self.unfinished[outcome.job.id]
        self.unfinished[job.id] = replace(
            job, status=JobStatus.STOPPING, stop_deadline=to_datetime(now + self.stop_seconds)
        )
        outcome.status = Status.STOPPING
        outcome.after_stopping = then
        instance_type, count, plan, _ = outcome.placement
        outcome.stopping_gpu_seconds += self.stop_seconds * count * self.config.gpus_of(instance_type)
        if self.checker is not None:
            self.checker.stopping(plan, count)
        self.settling.add(job.id)
        heapq.heappush(self.stop_ends, (now + self.stop_seconds, job.id))

    def _end_stopping(self, outcome: JobOutcome, at: float) -> None:
        """The job has stopped: its capacity is free, and it is RUNNABLE again (or FAILED, CANCELLED)."""
        _, count, plan, _ = outcome.placement
        if self.checker is not None:
            self.checker.stopping(plan, -count)
        self._release(outcome, at)
        self.settling.discard(outcome.job.id)
        self.needs_pass = True
        status, reason = outcome.after_stopping
        outcome.after_stopping = None
        if status == Status.RUNNABLE:
            self._back_to_queue(outcome, at)
        else:
            outcome.status, outcome.reason, outcome.finished_at = status, reason, at
            del self.unfinished[outcome.job.id]

    # --- a pass ------------------------------------------------------------------------------------------

    def _verify_nothing_to_decide(self, index: int, now: float) -> None:
        decisions = self.schedule(self.snapshots.whole(now))
        if decided_anything(decisions):
            raise AssertionError(
                f"shortcut skipped pass {index} at {now}, which decides "
                f"{len(decisions.admissions)} admissions, {len(decisions.preemptions)} preemptions"
            )

    def _apply(self, decisions: Decisions, index: int, now: float) -> bool:
        """Write one pass's decisions in the live system's order; True when the pass decided anything."""
        records = self.records
        for drain in decisions.drains:
            outcome = self._placed_outcome(drain.job_id, "drain", index)
            instance_type, count, plan, _ = outcome.placement
            outcome.drained_gpu_seconds += self._work_lost(outcome, now, drain.graceful)
            outcome.done_seconds = 0.0  # its work is thrown away, and with it what earlier moves kept
            outcome.drains += 1
            records.append(
                Record(
                    index,
                    now,
                    Kind.PLAN_EXPIRING,
                    drain.job_id,
                    outcome.job.share,
                    instance_type,
                    count,
                    plan,
                )
            )
            if drain.graceful:
                self._begin_stopping(outcome, now, (Status.RUNNABLE, ""))
            else:
                self._back_to_queue(outcome, now)
        for preemption in decisions.preemptions:
            outcome = self._placed_outcome(preemption.job_id, "preemption", index)
            instance_type, count, plan, _ = outcome.placement
            outcome.lost_gpu_seconds += self._work_lost(outcome, now, preemption.graceful)
            outcome.done_seconds = 0.0
            outcome.preemptions += 1
            records.append(
                Record(
                    index,
                    now,
                    preemption.kind.value,
                    preemption.job_id,
                    outcome.job.share,
                    instance_type,
                    count,
                    plan,
                    preemptor_job_id=preemption.preemptor_job_id,
                    fails=preemption.fails,
                )
            )
            if preemption.graceful:
                then = (
                    (Status.FAILED, "PREEMPTION_RETRIES_EXHAUSTED")
                    if preemption.fails
                    else (Status.RUNNABLE, "")
                )
                self._begin_stopping(outcome, now, then)
            elif preemption.fails:
                outcome.status, outcome.reason, outcome.finished_at = (
                    Status.FAILED,
                    "PREEMPTION_RETRIES_EXHAUSTED",
                    now,
                )
                del self.unfinished[preemption.job_id]
            else:
                self._back_to_queue(outcome, now)
        for relocation in decisions.relocations:
            outcome = self._placed_outcome(relocation.job_id, "relocation", index)
            instance_type, count, plan, placed_at = outcome.placement
            outcome.relocations += 1
            outcome.moving = True
            # The job checkpoints: the time it ran is kept, and its next attempt runs only what is left.
            outcome.done_seconds += max(0.0, now - placed_at - self.startup)
            records.append(
                Record(
                    index,
                    now,
                    Kind.RELOCATING,
                    relocation.job_id,
                    outcome.job.share,
                    relocation.instance_type,
                    relocation.instance_count,
                    relocation.training_plan,
                    relocation.entry_index,
                )
            )
            if relocation.graceful:
                outcome.relocating_to = relocation.entry_index
                self._begin_stopping(outcome, now, (Status.RUNNABLE, ""))
            else:
                self._release(outcome, now)
                self._back_to_queue(outcome, now)
        for timeout in decisions.timeouts:
            outcome = self.outcomes.get(timeout.job_id)
            if outcome is None or outcome.status != Status.RUNNABLE:
                raise InvariantViolation(
                    f"pass {index}: timeout of job {timeout.job_id}, which is not RUNNABLE"
                )
            records.append(Record(index, now, Kind.PENDING_TIMEOUT, timeout.job_id, outcome.job.share))
            self.settling.discard(timeout.job_id)
            self._stop(outcome, now, Status.FAILED, "PENDING_TIMEOUT")
        for admission in decisions.admissions:
            self._admit(admission, index, now)
        for job_id in decisions.lapsed_nominations:
            job = self.unfinished.get(job_id)
            if job is not None and job.status == JobStatus.RUNNABLE:
                self.unfinished[job_id] = replace(job, nomination=None)
                self.settling.discard(job_id)
                self.outcomes[job_id].relocating_to = None
        for nomination in decisions.nominations:
            self._nominate(nomination, index, now)
        if self.checker is not None:
            self.checker.check(index=index, now=now, moment=to_datetime(now))
        return decided_anything(decisions)

    def _work_lost(self, outcome: JobOutcome, now: float, graceful: bool) -> float:
        """GPU-seconds the stopped attempt ran, thrown away; a graceful stop frees its capacity later."""
        if graceful:
            _, count, _, placed_at = outcome.placement
            return (
                max(0.0, now - placed_at - self.startup) * count * self.config.gpus_of(outcome.placement[0])
            )
        return self._release(outcome, now)

    def _nominate(self, nomination, index: int, now: float) -> None:
        outcome = self.outcomes.get(nomination.job_id)
        if outcome is None or outcome.status != Status.RUNNABLE:
            raise InvariantViolation(
                f"pass {index}: nomination of job {nomination.job_id}, which is not RUNNABLE"
            )
        job = self.unfinished[nomination.job_id]
        self.unfinished[job.id] = replace(
            job, nomination=Nomination(nomination.entry_index, frozenset(nomination.victim_ids))
        )
        self.settling.add(job.id)
        self.records.append(
            Record(
                index,
                now,
                Kind.NOMINATED,
                job.id,
                outcome.job.share,
                nomination.instance_type,
                nomination.instance_count,
                None,
                nomination.entry_index,
            )
        )

    def _admit(self, admission, index: int, now: float) -> None:
        outcome = self.outcomes.get(admission.job_id)
        if outcome is None or outcome.status != Status.RUNNABLE:
            raise InvariantViolation(
                f"pass {index}: admission of job {admission.job_id}, which is not RUNNABLE"
            )
        job = outcome.job
        if not 0 <= admission.entry_index < len(job.entries) or not _is_entry(
            job.entries[admission.entry_index], admission
        ):
            raise InvariantViolation(
                f"pass {index}: job {job.id} admitted on {admission.instance_type} "
                f"x{admission.instance_count}, "
                f"which is not its entry {admission.entry_index}"
            )
        waiting = self.unfinished[job.id]
        self.settling.discard(job.id)
        self._dequeue(waiting)
        outcome.relocating_to = None
        outcome.moved_onto_plan = outcome.moving and admission.training_plan is not None
        outcome.moving = False
        outcome.placement = (admission.instance_type, admission.instance_count, admission.training_plan, now)
        outcome.status = Status.RUNNING
        outcome.attempt += 1
        if outcome.first_placed_at is None:
            outcome.first_placed_at = now
        self.unfinished[job.id] = placed = replace(
            waiting,
            nomination=None,
            status=JobStatus.RUNNING,
            placement=Placement(
                admission.instance_type, admission.instance_count, admission.training_plan, to_datetime(now)
            ),
            # The simulated executor takes a job at once; a stop is graceful only with a stop delay.
            taken=self.stop_seconds > 0,
        )
        self.placed.add(placed)
        self.meter.change(
            now, waiting.share_id, admission.instance_type, admission.training_plan, admission.instance_count
        )
        if self.budgets is not None:
            self.budgets.change(
                now,
                waiting.share_id,
                admission.instance_type,
                admission.training_plan,
                admission.instance_count,
            )
        if self.checker is not None:
            self.checker.hold(
                waiting.share_id, admission.instance_type, admission.training_plan, admission.instance_count
            )
        if job.duration is not None:
            left = max(0.0, job.duration - outcome.done_seconds)
            heapq.heappush(self.completions, (now + self.startup + left, job.id, outcome.attempt))
        if (self.config.relocate or job.relocate) and admission.entry_index > 0:
            self.relocatable.add(job.id)
            # Once it has run long enough (and is no longer protected) a pass may move it: time alone.
            wait = max(self.config.relocation_min_runtime_seconds, self.config.preemption_min_runtime_seconds)
            heapq.heappush(self.wakes, (now + wait, False))
        protection = self.config.preemption_min_runtime_seconds
        if protection and admission.training_plan is None:
            # Once its protection ends the job may be a victim: a pass then may decide what none could before.
            heapq.heappush(self.wakes, (now + protection, False))
        self.records.append(
            Record(
                index,
                now,
                Kind.ADMITTED,
                job.id,
                job.share,
                admission.instance_type,
                admission.instance_count,
                admission.training_plan,
                admission.entry_index,
                admission.borrowed,
            )
        )

    def _settled(self, decisions: Decisions) -> bool:
        """Would the next pass decide nothing if nothing happened before it (shortcut 3)?

        After a pass that preempted nobody, nobody waiting fits without preemption, and a job that could not
        preempt when it was tried cannot now with the victims it could see then. The next pass differs only in
        that the jobs placed in this one are victims: a job of lower priority, for the in-share preemption of
        its share's waiting jobs; a borrower's job, for reclaim by a waiting job whose share has room for it
        under its own limit (a borrower's jobs placed before are reclaimable too once it borrows). A timeout
        under STRICT_FIFO may unblock its share's queue.
        """
        if decisions.preemptions or (decisions.timeouts and self.groups.strict_fifo):
            return False
        if self.settling or decisions.nominations or decisions.lapsed_nominations:
            return False  # the proof does not cover earmarks
        if decisions.relocations:
            return False  # more jobs may move than one pass moves
        borrowed_types = set()
        # type -> share with in-share preemption -> the highest priority of its groups waiting with an entry on
        # the type
        highest: dict[str, dict[int, int]] = {}
        in_share = self.in_share_preempting
        for admission in decisions.admissions:
            if admission.training_plan is not None:
                continue
            if admission.borrowed:
                borrowed_types.add(admission.instance_type)
            if admission.share_id in in_share:
                of_type = highest.get(admission.instance_type)
                if of_type is None:
                    of_type = highest[admission.instance_type] = {}
                    for share_id, _, waiting_priority in self.waiting_on_type.get(
                        admission.instance_type, ()
                    ):
                        if share_id in in_share:
                            known = of_type.get(share_id)
                            if known is None or waiting_priority > known:
                                of_type[share_id] = waiting_priority
                waiting_priority = of_type.get(admission.share_id)
                if (
                    waiting_priority is not None
                    and waiting_priority > self.unfinished[admission.job_id].priority
                ):
                    return False
        for instance_type in borrowed_types:
            for share_id, entries, _ in self.waiting_on_type.get(instance_type, ()):
                share = self.share_by_id[share_id]
                if not share.enabled:
                    continue
                if share.in_share_preemption:
                    return False
                room = share.limits.get(instance_type, 0) - self.placed.usage.get(
                    (share_id, instance_type), 0
                )
                if any(
                    e.training_plan is None and e.instance_type == instance_type and e.instance_count <= room
                    for e in entries
                ):
                    return False
        return True

    def _placed_outcome(self, job_id: int, what: str, index: int) -> JobOutcome:
        outcome = self.outcomes.get(job_id)
        if outcome is None or outcome.placement is None:
            raise InvariantViolation(f"pass {index}: {what} of job {job_id}, which holds no capacity")
        return outcome


def _is_entry(entry: Entry, admission) -> bool:
    """The admission is on this entry (compared field by field: no `Entry` built per admission)."""
    return (
        entry.instance_type == admission.instance_type
        and entry.instance_count == admission.instance_count
        and entry.training_plan == admission.training_plan
    )


def decided_anything(decisions: Decisions) -> bool:
    """A pass that changes the queue: placements, stops, timeouts, nominations or lapsed ones."""
    return bool(
        decisions.admissions
        or decisions.preemptions
        or decisions.drains
        or decisions.timeouts
        or decisions.nominations
        or decisions.lapsed_nominations
        or decisions.relocations
    )


def simulate(
    configuration: Configuration,
    jobs: Sequence[SimJob],
    *,
    start: float | None = None,
    end: float | None = None,
    pass_interval: float = 30.0,
    pass_times: Sequence[float] | None = None,
    check: bool = False,
    schedule_function: ScheduleFunction = schedule,
    startup_seconds: float = 0.0,
    progress: Callable[[float], None] | None = None,
    shortcuts: bool = True,
    verify_shortcuts: bool = False,
    consumption: bool = False,
) -> Result:
    """Replay `jobs` against `configuration` and return every decision applied, per-job outcomes and usage.

    Passes run every `pass_interval` seconds from `start` (default: the first arrival), or exactly at
    `pass_times` when given (to replay the passes a live system made). With `end`, the replay stops there
    (usage is measured up to it); without, it runs until nothing is left to happen. `check` verifies the capacity rules
    after every pass and raises `InvariantViolation` at the first breach. `shortcuts` (see
    `simulator.shortcuts`) make passes cheaper without changing their decisions;
    `verify_shortcuts` proves it as it goes by also running every pass on the whole snapshot. `consumption`
    keeps every share's on-demand GPU-hours per month (`Result.budgets`), as budgeted shares' always are.
    """
    return Simulation(
        configuration,
        jobs,
        start=start,
        end=end,
        pass_interval=pass_interval,
        pass_times=pass_times,
        check=check,
        schedule_function=schedule_function,
        startup_seconds=startup_seconds,
        progress=progress,
        shortcuts=shortcuts,
        verify_shortcuts=verify_shortcuts,
        consumption=consumption,
    ).run()
