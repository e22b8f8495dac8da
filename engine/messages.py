"""The words of the decisions: what a person reads in events and attempts about a placement or a stop."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import TYPE_CHECKING

from .types import Job, Placement, Plan, PreemptionKind

if TYPE_CHECKING:
    from .capacity import WorkingState
    from .fit import Fit


def job_label(job: Job, reader: Job | None = None) -> str:
    """A job as people read it, `nightly-retrain (#12)`; `job #12` when it has no name or belongs to another
    team than `reader`, the job the text is about, whose team reads it and may not learn other teams' names."""
    if job.name and (reader is None or job.team_id == reader.team_id):
        return f"{job.name} (#{job.id})"
    return f"job #{job.id}"


def job_labels(jobs, reader: Job) -> str:
    return ", ".join(job_label(job, reader) for job in jobs)


def labels_of_ids(state: WorkingState, job_ids, reader: Job) -> str:
    """`job_labels` of the snapshot's jobs `job_ids` (one no longer in it: by number)."""
    return ", ".join(
        job_label(job, reader) if (job := state.job_by_id(job_id)) is not None else f"job #{job_id}"
        for job_id in job_ids
    )


def admission_message(job: Job, fit: Fit, borrowed: int) -> str:
    entry = fit.entry
    where = (
        f"placed on {entry.instance_type} x{entry.instance_count} "
        f"(entry {fit.entry_index + 1} of {len(job.entries)})"
    )
    if entry.training_plan is not None:
        how = f"on training plan {entry.training_plan}"
    elif borrowed:
        how = f"borrowing {borrowed} from idle capacity"
    else:
        how = "within share quota"
    message = f"{where} {how}"
    if fit.victims:
        message += " after preempting " + job_labels(fit.victims, job)
    return message


def preemption_message(
    state: WorkingState,
    victim: Job,
    placement: Placement,
    *,
    kind: PreemptionKind,
    preemptor: Job | None,
) -> str:
    """Name victim, preemptor and both shares, and why; read before the victim's capacity is released."""
    victim_share = state.shares[victim.share_id].name
    victim_label = job_label(victim)
    instances = f"{placement.instance_count} {placement.instance_type}"
    if kind == PreemptionKind.LIMIT_REDUCED:
        if placement.training_plan is not None:
            plan = state.plans.get(placement.training_plan)
            held = state.plan_in_use.get(placement.training_plan, 0)
            allowed = plan.instance_count if plan is not None else 0
            message = (
                f"{victim_label} of share {victim_share} preempted to give back {instances} of training "
                f"plan {placement.training_plan}, which holds {held} of the {allowed} it may use now"
            )
        else:
            ledger = state.ledgers[placement.instance_type]
            holding = state.holding(victim.share_id, placement.instance_type)
            message = (
                f"{victim_label} of share {victim_share} preempted to give back {instances}: capacity "
                f"lowered to {ledger.capacity} with {ledger.used} in use ({victim_share} at "
                f"{holding.usage}/{holding.limit})"
            )
    else:
        preemptor_share = state.shares[preemptor.share_id].name
        preemptor_label = job_label(preemptor, victim)
        if kind == PreemptionKind.RECLAIM:
            holding = state.holding(victim.share_id, placement.instance_type)
            message = (
                f"{victim_label} of share {victim_share} preempted by {preemptor_label} of share "
                f"{preemptor_share} to reclaim {instances} lent by {preemptor_share} and borrowed by "
                f"{victim_share} ({victim_share} at {holding.usage}/{holding.limit})"
            )
        else:
            message = (
                f"{victim_label} at priority {victim.priority} preempted by {preemptor_label} at priority "
                f"{preemptor.priority} of share {victim_share}: in-share preemption frees {instances}"
            )
    return message


def nomination_message(state: WorkingState, job: Job, fit: Fit, stopping_ids: list[int]) -> str:
    entry = fit.entry
    message = (
        f"nominated for {entry.instance_type} x{entry.instance_count} "
        f"(entry {fit.entry_index + 1} of {len(job.entries)})"
    )
    if fit.victims:
        message += " after preempting " + job_labels(fit.victims, job)
    return message + ": waiting for stopping " + labels_of_ids(state, stopping_ids, job)


def drain_message(plan_name: str, plan: Plan | None, drain_seconds: int, now: datetime) -> str:
    if plan is None:
        return f"training plan {plan_name} no longer exists: stopped and returned to RUNNABLE"
    if plan.end_time <= now:
        return f"training plan {plan_name} ended at {when(plan.end_time)}: stopped and returned to RUNNABLE"
    return (
        f"training plan {plan_name} ends at {when(plan.end_time)}, within the {drain_seconds} s drain "
        f"window: stopped and returned to RUNNABLE"
    )


def timeout_message(waited_seconds: int, max_pending_seconds: int) -> str:
    return (
        f"waited {waited_seconds} s to be placed, more than its max_pending_seconds of {max_pending_seconds}"
    )


@functools.lru_cache(maxsize=256)
def when(moment: datetime) -> str:
    # A plan's start or end is quoted in hundreds of reasons per pass, and isoformat of an aware datetime
    # is slow.
    return moment.isoformat(timespec="seconds")
