"""Housekeeping (SPEC 3.1 and the LIMIT_REDUCED rule of section 2): what a pass settles before it places."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta

from . import messages
from .capacity import Holding, TypeLedger, WorkingState, victim_key
from .fit import plan_is_active, plan_is_draining
from .preemption import preempt, put_back_until_minimal
from .types import Decisions, Drain, Job, JobStatus, PreemptionKind, Timeout


def drain_expiring_plans(state: WorkingState, decisions: Decisions) -> list[Job]:
    """Jobs on a plan ending within the drain window, ended or gone go back to RUNNABLE (not a preemption)."""
    drained: list[Job] = []
    for name in sorted(state.plan_jobs):
        plan = state.plans.get(name)
        if plan is not None and not plan_is_draining(plan, state.now, state.snapshot.plan_drain_seconds):
            continue
        for job in sorted(state.plan_jobs[name], key=_by_id):
            if job.id not in state.placements:
                continue
            placement = state.release(job)
            decisions.drains.append(
                Drain(
                    job_id=job.id,
                    share_id=job.share_id,
                    training_plan=name,
                    instance_type=placement.instance_type,
                    instances=placement.instance_count,
                    message=messages.drain_message(name, plan, state.snapshot.plan_drain_seconds, state.now),
                )
            )
            drained.append(job)
    return drained


def pending_for(job: Job, now: datetime) -> timedelta:
    """A job has been pending since it last became RUNNABLE (submission, preemption, retry or plan drain)."""
    return now - (job.runnable_since or job.submitted_at)


def pending_too_long(job: Job, now: datetime) -> bool:
    """A RUNNABLE job fails once it has been pending longer than its max_pending_seconds."""
    if job.max_pending_seconds is None:
        return False
    return pending_for(job, now) > timedelta(seconds=job.max_pending_seconds)


def time_out_pending_jobs(state: WorkingState, decisions: Decisions) -> set[int]:
    """RUNNABLE jobs of the snapshot waiting more than their max_pending_seconds fail (PENDING_TIMEOUT)."""
    timed_out: set[int] = set()
    for job in state.jobs:
        if job.status == JobStatus.RUNNABLE and pending_too_long(job, state.now):
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
    """An instance type as it would be once the jobs taken so far are stopped (invariants A and B)."""

    __slots__ = ("state", "ledger", "usage", "used", "in_use_or_reserved", "most_in_use_or_reserved")

    def __init__(self, state: WorkingState, ledger: TypeLedger):
        self.state = state
        self.ledger = ledger
        self.usage: dict[int, int] = {}
        self.used = ledger.used
        self.in_use_or_reserved = ledger.in_use_or_reserved
        # With every job stopped the sum is what RESERVE shares keep: no lower than that (more than capacity
        # only in a configuration SPEC 2 rejects) can be reached.
        kept = sum(holding.reserved for holding in state.holdings_of_type(ledger.instance_type))
        self.most_in_use_or_reserved = max(ledger.capacity, kept)

    def usage_of(self, holding: Holding) -> int:
        return self.usage.get(holding.share.id, holding.usage)

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
    """SPEC 2: stop candidates in order until every invariant holds, then put back those not needed."""
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
    """When a type holds more than invariants A and B allow, give back as SPEC 2 says (LIMIT_REDUCED).

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
    """A plan holding more than its instance_count, or jobs before it starts, gives back as SPEC 2 says."""
    stopped: list[Job] = []
    for name in sorted(state.plan_jobs):
        plan = state.plans.get(name)
        if plan is None:
            continue
        allowed = plan.instance_count if plan_is_active(plan, state.now) else 0
        if state.plan_in_use[name] <= allowed:
            continue
        on_plan = sorted(
            (job for job in state.plan_jobs[name] if job.id in state.placements),
            key=lambda job: victim_key(job, job.placement),
        )
        trial = PlanGiveBack(state.plan_in_use[name], allowed)
        for job in limit_reduced_give_back(trial, on_plan, trial.invariants_hold):
            preempt(state, decisions, job, kind=PreemptionKind.LIMIT_REDUCED, preemptor=None)
            stopped.append(job)
    return stopped


def _by_id(job: Job) -> int:
    return job.id
