"""Housekeeping (behaviour.md#housekeeping, and the capacity rules' LIMIT_REDUCED): what a pass settles before it
places.

A taken job stops gracefully here too (`preemption.stop`): it holds its capacity while STOPPING. The
give-back counts STOPPING jobs as already gone: they leave whatever happens, so a pass that finds them still
holding stops only what is needed besides them, and the passes while they stop stop nobody more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta

from . import messages
from .capacity import Holding, TypeLedger, WorkingState, victim_key
from .fit import plan_is_active, plan_is_draining
from .preemption import preempt, put_back_until_minimal, stop
from .types import Decisions, Drain, Job, PreemptionKind, Timeout


def drain_expiring_plans(state: WorkingState, decisions: Decisions) -> list[Job]:
    """Jobs on a plan ending within the drain window, ended or gone go back to RUNNABLE (not a preemption).

    Returns those stopped at once, which the pass may place elsewhere; a taken job is STOPPING instead.
    """
    drained: list[Job] = []
    for name in sorted(state.plan_jobs):
        plan = state.plans.get(name)
        if plan is not None and not plan_is_draining(plan, state.now, state.snapshot.plan_drain_seconds):
            continue
        for job in sorted(state.plan_jobs[name], key=_by_id):
            if job.id not in state.placements:
                continue
            placement = state.placements[job.id]
            graceful = stop(state, job)
            message = messages.drain_message(name, plan, state.snapshot.plan_drain_seconds, state.now)
            decisions.drains.append(
                Drain(
                    job_id=job.id,
                    share_id=job.share_id,
                    training_plan=name,
                    instance_type=placement.instance_type,
                    instances=placement.instance_count,
                    message=message + (" (stopping gracefully)" if graceful else ""),
                    graceful=graceful,
                )
            )
            if not graceful:
                drained.append(job)
    return drained


def pending_since(job: Job) -> datetime:
    """When a job last became RUNNABLE (submission, preemption, retry or plan drain)."""
    return job.runnable_since or job.submitted_at


def pending_for(job: Job, now: datetime) -> timedelta:
    """How long a job has been pending (since it last became RUNNABLE)."""
    return now - pending_since(job)


def pending_too_long(job: Job, now: datetime) -> bool:
    """A RUNNABLE job fails once it has been pending longer than its max_pending_seconds."""
    if job.max_pending_seconds is None:
        return False
    return pending_for(job, now) > timedelta(seconds=job.max_pending_seconds)


def pending_too_long_after(job: Job) -> datetime | None:
    """The moment after which `pending_too_long(job, now)` holds (None: never), for a caller that asks again
    and again about the same jobs."""
    if job.max_pending_seconds is None:
        return None
    return pending_since(job) + timedelta(seconds=job.max_pending_seconds)


def pending_too_long_before(now: datetime, max_pending_seconds: int) -> datetime | None:
    """The moment before which a job must have become RUNNABLE to be pending too long at `now` (a job whose
    `pending_too_long(job, now)` holds exactly when its start is earlier); None where that moment is out of
    the datetime's range, for the caller to ask `pending_too_long` itself."""
    try:
        return now - timedelta(seconds=max_pending_seconds)
    except OverflowError:
        return None


def time_out_pending_jobs(state: WorkingState, decisions: Decisions) -> set[int]:
    """RUNNABLE jobs of the snapshot waiting more than their max_pending_seconds fail (PENDING_TIMEOUT).

    One moment per distinct max_pending_seconds (`pending_too_long_before`), so each job is one comparison."""
    timed_out: set[int] = set()
    before: dict[int, datetime | None] = {}
    for job in state.may_time_out:  # the RUNNABLE jobs with a max_pending_seconds, in id order
        seconds = job.max_pending_seconds
        if seconds in before:
            moment = before[seconds]
        else:
            moment = before[seconds] = pending_too_long_before(state.now, seconds)
        if pending_since(job) < moment if moment is not None else pending_too_long(job, state.now):
            waited = int(pending_for(job, state.now).total_seconds())
            decisions.timeouts.append(
                Timeout(
                    job_id=job.id,
                    share_id=job.share_id,
                    message=messages.timeout_message(waited, job.max_pending_seconds),
                )
            )
            timed_out.add(job.id)
    return timed_out


class TypeGiveBack:
    """An instance type as it would be once STOPPING jobs and the jobs taken so far are gone (A and B)."""

    __slots__ = ("state", "ledger", "usage", "used", "in_use_or_reserved", "most_in_use_or_reserved")

    def __init__(self, state: WorkingState, ledger: TypeLedger):
        self.state = state
        self.ledger = ledger
        self.usage: dict[int, int] = {}
        holdings = state.holdings_of_type(ledger.instance_type)
        self.used = ledger.used - ledger.stopping
        self.in_use_or_reserved = ledger.in_use_or_reserved
        if ledger.stopping:
            self.in_use_or_reserved = sum(max(h.usage - h.stopping, h.reserved) for h in holdings)
        # With every job stopped the sum is what RESERVE shares keep: no lower than that (more than capacity
        # only in a configuration behaviour.md#capacity-what-a-share-may-hold rejects) can be reached.
        kept = sum(holding.reserved for holding in holdings)
        self.most_in_use_or_reserved = max(ledger.capacity, kept)

    def usage_of(self, holding: Holding) -> int:
        usage = self.usage.get(holding.share.id)
        return holding.usage - holding.stopping if usage is None else usage

    def still_over_limit(self, holding: Holding) -> bool:
        return self.usage_of(holding) > holding.limit

    def take(self, job: Job) -> None:
        self._move(job, -job.placement.instance_count)

    def put_back(self, job: Job) -> None:
        self._move(job, job.placement.instance_count)

    def _move(self, job: Job, change: int) -> None:
        holding = self.state.holding(job.share_id, self.ledger.instance_type)
        before = self.usage_of(holding)
        after = self.usage[job.share_id] = before + change
        self.used += change
        self.in_use_or_reserved += max(after, holding.reserved) - max(before, holding.reserved)

    def invariants_hold(self) -> bool:
        """Invariant A (in use within capacity) and B (borrowers outside what RESERVE shares keep)."""
        return self.used <= self.ledger.capacity and self.in_use_or_reserved <= self.most_in_use_or_reserved


class PlanGiveBack:
    """A training plan as it would be once the jobs taken so far are stopped (invariant D)."""

    __slots__ = ("in_use", "allowed")

    def __init__(self, in_use: int, allowed: int):
        self.in_use = in_use
        self.allowed = allowed

    def take(self, job: Job) -> None:
        self.in_use -= job.placement.instance_count

    def put_back(self, job: Job) -> None:
        self.in_use += job.placement.instance_count

    def invariants_hold(self) -> bool:
        """Invariant D: instances in use on the plan within what it may hold now."""
        return self.in_use <= self.allowed


def limit_reduced_give_back(
    trial: TypeGiveBack | PlanGiveBack, candidates: Iterable[Job], invariants_hold: Callable[[], bool]
) -> list[Job]:
    """behaviour.md#capacity-what-a-share-may-hold: stop candidates in order until every invariant holds, then put back
    those not needed."""
    taken: list[Job] = []
    for job in candidates:
        if invariants_hold():
            break
        trial.take(job)
        taken.append(job)
    return put_back_until_minimal(trial, taken, invariants_hold)


def capacity_give_back_order(state: WorkingState, trial: TypeGiveBack) -> Iterator[Job]:
    """Jobs of shares over their limit first, each while its share still is, then the rest; victim order."""
    instance_type = trial.ledger.instance_type
    on_type = sorted(
        (job for holding in state.holdings_of_type(instance_type) for job in state.live_victims(holding)),
        key=lambda job: victim_key(job, job.placement),
    )
    offered: set[int] = set()
    for job in on_type:
        if trial.still_over_limit(state.holding(job.share_id, instance_type)):
            offered.add(job.id)
            yield job
    for job in on_type:
        if job.id not in offered:
            yield job


def restore_capacity_limits(state: WorkingState, decisions: Decisions) -> list[Job]:
    """When a type holds more than invariants A and B allow, give back as behaviour.md#capacity-what-a-share-may-hold
    says (LIMIT_REDUCED).

    This also restores the RESERVE guarantee when a RESERVE limit was raised or capacity lowered: borrowers
    inside what RESERVE shares keep are stopped whether or not a RESERVE job waits.
    """
    stopped: list[Job] = []
    for instance_type in sorted(state.ledgers):
        ledger = state.ledgers[instance_type]
        if not ledger.broken:
            continue
        trial = TypeGiveBack(state, ledger)
        for job in limit_reduced_give_back(
            trial, capacity_give_back_order(state, trial), trial.invariants_hold
        ):
            preempt(state, decisions, job, kind=PreemptionKind.LIMIT_REDUCED, preemptor=None)
            stopped.append(job)
    return stopped


def restore_plan_limits(state: WorkingState, decisions: Decisions) -> list[Job]:
    """A plan holding more than its instance_count, or jobs before it starts, gives back as
    behaviour.md#capacity-what-a-share-may-hold says."""
    stopped: list[Job] = []
    for name in sorted(state.plan_jobs):
        plan = state.plans.get(name)
        if plan is None:
            continue
        allowed = plan.instance_count if plan_is_active(plan, state.now) else 0
        # STOPPING jobs count as gone, as on a type.
        in_use = state.plan_in_use[name] - state.plan_stopping.get(name, 0)
        if in_use <= allowed:
            continue
        on_plan = sorted(
            (job for job in state.plan_jobs[name] if job.id in state.placements),
            key=lambda job: victim_key(job, job.placement),
        )
        trial = PlanGiveBack(in_use, allowed)
        for job in limit_reduced_give_back(trial, on_plan, trial.invariants_hold):
            preempt(state, decisions, job, kind=PreemptionKind.LIMIT_REDUCED, preemptor=None)
            stopped.append(job)
    return stopped


def _by_id(job: Job) -> int:
    return job.id
