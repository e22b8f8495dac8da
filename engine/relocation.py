"""Moving to a preferred entry (behaviour.md#moving-to-a-preferred-entry): after the heads are placed, a running job
that opted in moves to an earlier entry of its list when that entry has room nobody waiting could use.

A RUNNING job with `relocate` that runs on entry k of its list moves to the earliest entry j < k such that, on
what the pass left free:

- entry j fits the whole job without preemption (now, the job still holding entry k, and once settled);
- the job borrows no more on entry j than it borrows on entry k (instances above its share's limit; none on a
  training plan), counted as if it no longer held entry k;
- no RUNNABLE job of the queue asks for the capacity entry j draws on: the same training plan, or on-demand
  instances of the same type (waiting jobs always come first, so a move never takes what one of them could
  use, now or once more of it frees);
- the job has run on this attempt (since it was placed) at least the queue's `relocation_min_runtime_seconds`
  and is no longer protected from preemption (`preemption_min_runtime_seconds`).

Candidates are taken oldest placement first (then lowest id), at most `max_relocations_per_pass` a pass; each
move is decided on the state the earlier moves left. A taken job goes STOPPING on entry k (it keeps those
instances until it has stopped) and is nominated on entry j, with itself as its one victim: entry j is
earmarked for it from this pass on, on-demand or on the plan, and the first pass that finds it RUNNABLE
places it before any other head (`scheduler.PassRun.place_nominated_first`). A job its executor has not
taken stops at once and is placed on entry j in the same pass. A move ends the attempt; it is neither a
preemption nor a failed attempt, so a job is moved at most once an attempt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta

from .capacity import WorkingState
from .fit import Fit, entry_fits_without_preemption
from .preemption import protected_until, stops_gracefully
from .types import Decisions, Entry, Job, JobStatus, Placement, Relocation


def is_relocation(job: Job) -> bool:
    """A relocation's nomination names the job itself as its one victim (it waits for its own stop)."""
    return job.nomination is not None and job.id in job.nomination.victim_ids


def hold_relocation_earmarks(state: WorkingState) -> list[int]:
    """While a relocated job is STOPPING, the entry it moves to is earmarked for it; returns those jobs."""
    held = []
    for job in state.nominated_jobs:
        if job.status == JobStatus.STOPPING and is_relocation(job):
            index = job.nomination.entry_index
            if 0 <= index < len(job.entries):
                entry = job.entries[index]
                state.earmark_entry(job.share_id, entry, entry.instance_count)
                held.append(job.id)
    return held


def pool(entry: Entry) -> tuple[str, str]:
    """What an entry draws on: a training plan, or the on-demand instances of a type."""
    if entry.training_plan is not None:
        return ("plan", entry.training_plan)
    return ("type", entry.instance_type)


def placed_entry_index(job: Job, placement: Placement) -> int | None:
    """The index of the entry the job is placed on: the first with its type, count and plan."""
    placed_on = (placement.instance_type, placement.instance_count, placement.training_plan)
    for index, entry in enumerate(job.entries):
        if (entry.instance_type, entry.instance_count, entry.training_plan) == placed_on:
            return index
    return None


def borrowed_on_entry(state: WorkingState, job: Job, entry: Entry, placement: Placement) -> int:
    """Instances above the share's limit the job accounts for on `entry`, were it placed there instead of
    where it is (`placement`); 0 on a plan."""
    if entry.training_plan is not None:
        return 0
    holding = state.holding(job.share_id, entry.instance_type)
    usage = holding.usage
    if placement.training_plan is None and placement.instance_type == entry.instance_type:
        usage -= placement.instance_count
    return max(0, usage + entry.instance_count - holding.limit) - max(0, usage - holding.limit)


def waiting_pools(state: WorkingState, decisions: Decisions, runnable: Iterable[Job]) -> set[tuple[str, str]]:
    """The capacity RUNNABLE jobs of the queue ask for after the heads are placed: every entry of every job
    still waiting (of an enabled share), including this pass's victims stopped at once."""
    shares = state.shares
    placed = state.placed_in_pass
    waiting = [job for job in runnable if job.id not in placed]
    for preemption in decisions.preemptions:
        if not preemption.graceful and not preemption.fails:
            victim = state.job_by_id(preemption.job_id)
            if victim is not None:
                waiting.append(victim)
    return {pool(entry) for job in waiting if shares[job.share_id].enabled for entry in job.entries}


def ran_long_enough(state: WorkingState, placement: Placement) -> bool:
    minimum = timedelta(seconds=state.snapshot.relocation_min_runtime_seconds)
    return state.now - placement.scheduled_at >= minimum


def candidates(state: WorkingState) -> list[tuple[Job, Placement, int]]:
    """RUNNING jobs with `relocate`, still placed, not on their first entry, old enough and unprotected;
    oldest placement first."""
    found = []
    for job in state.relocatable_jobs:  # RUNNING, with `relocate`, in id order
        if not state.shares[job.share_id].enabled:
            continue
        placement = state.placements.get(job.id)
        if placement is None or job.id in state.placed_in_pass:
            continue
        index = placed_entry_index(job, placement)
        if not index or not ran_long_enough(state, placement) or protected_until(state, job) is not None:
            continue
        found.append((job, placement, index))
    found.sort(key=lambda item: (item[1].scheduled_at, item[0].id))
    return found


def target_entry(
    state: WorkingState, job: Job, placement: Placement, index: int, pools: set[tuple[str, str]]
) -> int | None:
    """The earliest entry before `index` the job may move to, None when there is none."""
    borrowed_here = 0
    if placement.training_plan is None:
        holding = state.holding(job.share_id, placement.instance_type)
        borrowed_here = max(0, holding.usage - holding.limit) - max(
            0, holding.usage - placement.instance_count - holding.limit
        )
    for earlier in range(index):
        entry = job.entries[earlier]
        if pool(entry) in pools:
            continue
        if borrowed_on_entry(state, job, entry, placement) > borrowed_here:
            continue
        if entry_fits_without_preemption(state, job.share_id, entry):
            return earlier
    return None


def relocation_message(state: WorkingState, job: Job, index: int, entry: Entry, from_index: int) -> str:
    if entry.training_plan is not None:
        plan = state.plans[entry.training_plan]
        where = f"training plan {entry.training_plan}"
        free = state.plan_free(plan)
    else:
        ledger = state.ledgers[entry.instance_type]
        where = f"{entry.instance_type} on-demand"
        free = ledger.capacity - ledger.used
    return (
        f"moving to {where}: {free} instances free "
        f"(entry {index + 1} of {len(job.entries)}, from entry {from_index + 1}, "
        f"{entry.instance_type} x{entry.instance_count})"
    )


def relocate(
    state: WorkingState, decisions: Decisions, runnable: Iterable[Job], admit: Callable[[Job, Fit], None]
) -> bool:
    """Decide this pass's moves; True when a job stopped at once (its old entry is free in this pass)."""
    limit = state.snapshot.max_relocations_per_pass
    if limit <= 0 or not state.snapshot.queue_enabled:
        return False
    found = candidates(state)
    if not found:
        return False
    pools = waiting_pools(state, decisions, runnable)
    at_once = False
    for job, placement, index in found:
        if len(decisions.relocations) >= limit:
            break
        target = target_entry(state, job, placement, index, pools)
        if target is None:
            continue
        entry = job.entries[target]
        message = relocation_message(state, job, target, entry, index)
        graceful = stops_gracefully(job)
        if graceful:
            state.begin_stopping(job)
            state.earmark_entry(job.share_id, entry, entry.instance_count)
        else:
            state.release(job)
        decisions.relocations.append(
            Relocation(
                job_id=job.id,
                share_id=job.share_id,
                from_entry_index=index,
                from_instance_type=placement.instance_type,
                from_instance_count=placement.instance_count,
                from_training_plan=placement.training_plan,
                entry_index=target,
                instance_type=entry.instance_type,
                instance_count=entry.instance_count,
                training_plan=entry.training_plan,
                message=message + ("" if graceful else " (stopped at once)"),
                graceful=graceful,
            )
        )
        if not graceful:
            admit(job, Fit(target, entry))
            at_once = True
    return at_once
