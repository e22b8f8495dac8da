"""Housekeeping (SPEC 3.1 and the LIMIT_REDUCED rule of section 2): what a pass settles before it places."""

from __future__ import annotations

from datetime import datetime, timedelta

from . import messages
from .capacity import WorkingState, victim_key
from .fit import plan_is_active, plan_is_draining
from .preemption import preempt
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


def restore_capacity_limits(state: WorkingState, decisions: Decisions) -> list[Job]:
    """When a type holds more than invariants A and B allow, preempt in reclaim order until they hold again.

    Shares over their limit go first, each only while still over it; only if that is not enough does any other
    on-demand job go, and then only one whose removal lowers the invariant B sum.
    """
    stopped: list[Job] = []
    for instance_type in sorted(state.ledgers):
        ledger = state.ledgers[instance_type]
        if not ledger.broken:
            continue
        on_type = sorted(
            (job for holding in state.holdings_of_type(instance_type) for job in state.live_victims(holding)),
            key=lambda job: victim_key(job, job.placement),
        )
        for job in on_type:
            holding = state.holding(job.share_id, instance_type)
            if ledger.broken and holding.over_limit:
                preempt(state, decisions, job, kind=PreemptionKind.LIMIT_REDUCED, preemptor=None)
                stopped.append(job)
        for job in on_type:
            holding = state.holding(job.share_id, instance_type)
            if ledger.broken and job.id not in state.stopped and holding.usage > holding.reserved:
                preempt(state, decisions, job, kind=PreemptionKind.LIMIT_REDUCED, preemptor=None)
                stopped.append(job)
    return stopped


def restore_plan_limits(state: WorkingState, decisions: Decisions) -> list[Job]:
    """A plan holding more than its instance_count, or jobs before it starts, gives back its newest jobs."""
    stopped: list[Job] = []
    for name in sorted(state.plan_jobs):
        plan = state.plans.get(name)
        if plan is None:
            continue
        allowed = plan.instance_count if plan_is_active(plan, state.now) else 0
        newest_first = sorted(
            (job for job in state.plan_jobs[name] if job.id in state.placements),
            key=lambda job: (-job.placement.scheduled_at.timestamp(), -job.id),
        )
        for job in newest_first:
            if state.plan_in_use[name] <= allowed:
                break
            preempt(state, decisions, job, kind=PreemptionKind.LIMIT_REDUCED, preemptor=None)
            stopped.append(job)
    return stopped


def _by_id(job: Job) -> int:
    return job.id
