"""A deliberately plain reading of behaviour.md#preemption's victim choice and of
behaviour.md#capacity-what-a-share-may-hold's give-back, for small snapshots.

It shares no code with the engine but its vocabulary (the dataclasses) and `oracle`, and recomputes every sum
from the jobs at every step, so that each function reads like the sentence of the spec it implements. The
property tests hold the engine's victims and LIMIT_REDUCED stops to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

from engine import PLACED_STATUSES, Entry, Job, Snapshot

from .oracle import (
    all_types,
    fits_now,
    fits_without_preemption,
    limit,
    makes_room,
    on_demand_usage,
    plan_usage,
    reserved,
)


def victim_order(job: Job) -> tuple[int, float, int]:
    """Lowest priority, then most recently scheduled, then highest id."""
    return (job.priority, -job.placement.scheduled_at.timestamp(), -job.id)


def without(snap: Snapshot, job_ids: set[int]) -> Snapshot:
    return replace(snap, jobs=tuple(job for job in snap.jobs if job.id not in job_ids))


def placed_on(snap: Snapshot, instance_type: str) -> list[Job]:
    """The on-demand jobs placed on the type, in victim order."""
    return sorted(
        (
            job
            for job in snap.jobs
            if job.status in PLACED_STATUSES
            and job.placement.training_plan is None
            and job.placement.instance_type == instance_type
        ),
        key=victim_order,
    )


def protected(snap: Snapshot, job: Job) -> bool:
    """Scheduled less than the queue's preemption_min_runtime_seconds ago."""
    runtime = timedelta(seconds=snap.preemption_min_runtime_seconds)
    return job.placement.scheduled_at + runtime > snap.now


def over_limit(snap: Snapshot, share_id: int, instance_type: str) -> bool:
    share = next(s for s in snap.shares if s.id == share_id)
    return on_demand_usage(snap)[share_id, instance_type] > limit(share, instance_type)


def put_back(taken: list[int], fits: Callable[[set[int]], bool]) -> list[int]:
    """In reverse order, every victim whose return still lets it fit goes back; again, until none can."""
    taken = list(taken)
    returned = True
    while returned:
        returned = False
        for victim in reversed(list(taken)):
            if fits(set(taken) - {victim}):
                taken.remove(victim)
                returned = True
    return taken


# --- behaviour.md#preemption
# --------------------------------------------------------------------------------------------


def victims_for(
    snap: Snapshot, job: Job, entry: Entry, placed_in_pass: set[int], now: Snapshot | None = None
) -> list[int] | None:
    """The victims preemption takes to place `job` on the on-demand `entry`, or None when it cannot.

    With graceful stops `snap` is the queue once settled and `now` the queue as it is (STOPPING jobs holding
    their instances): the job must fit in both once its victims are gone (behaviour.md#preemption)."""
    share = next(s for s in snap.shares if s.id == job.share_id)

    def room(gone: set[int]) -> bool:
        return makes_room(snap, job, entry, gone) and (
            now is None or makes_room(now, job, entry, gone, fits=fits_now)
        )

    instance_type = entry.instance_type
    candidates = [
        j for j in placed_on(snap, instance_type) if j.id not in placed_in_pass and not protected(snap, j)
    ]
    reclaim = [
        j for j in candidates if j.share_id != share.id and over_limit(snap, j.share_id, instance_type)
    ]
    in_share = [
        j
        for j in candidates
        if share.in_share_preemption and j.share_id == share.id and j.priority < job.priority
    ]

    def within_own_limit(gone: set[int]) -> bool:
        views = [snap] if now is None else [snap, now]
        for view in views:
            usage = on_demand_usage(without(view, gone))[share.id, instance_type]
            if usage + entry.instance_count > limit(share, instance_type):
                return False
        return room(gone)

    # Reclaim candidates (each only while its share is still over its limit), then in-share ones, until the
    # job fits with its share ending within its own limit.
    taken: list[int] = []
    for candidate in reclaim + in_share:
        if candidate.share_id != share.id and not over_limit(
            without(snap, set(taken)), candidate.share_id, instance_type
        ):
            continue
        taken.append(candidate.id)
        if within_own_limit(set(taken)):
            return put_back(taken, room)
    # If that never happens: the in-share candidates alone, until it fits within what the share may borrow.
    taken = []
    for candidate in in_share:
        taken.append(candidate.id)
        if room(set(taken)):
            return put_back(taken, room)
    return None


def first_entry_with_victims(
    snap: Snapshot, job: Job, placed_in_pass: set[int]
) -> tuple[int, list[int]] | None:
    """The first entry, in preference order, that preemption can make room for, with its victims."""
    if any(fits_without_preemption(snap, job, entry) for entry in job.entries):
        return None
    for index, entry in enumerate(job.entries):
        if entry.training_plan is None:
            victims = victims_for(snap, job, entry, placed_in_pass)
            if victims is not None:
                return index, victims
    return None


# --- behaviour.md#capacity-what-a-share-may-hold, the last rule
# -------------------------------------------------------------------------------


def type_holds(snap: Snapshot, instance_type: str) -> bool:
    """Invariants A and B on one type."""
    usage = on_demand_usage(snap)
    capacity = snap.capacity.get(instance_type, 0)
    used = sum(usage[s.id, instance_type] for s in snap.shares)
    committed = sum(max(usage[s.id, instance_type], reserved(s, instance_type)) for s in snap.shares)
    return used <= capacity and committed <= capacity


def plan_allows(snap: Snapshot, name: str) -> int:
    plan = next(p for p in snap.plans if p.name == name)
    return plan.instance_count if plan.start_time <= snap.now < plan.end_time else 0


def give_back(snap: Snapshot) -> list[int]:
    """The jobs LIMIT_REDUCED stops, in order: per type, then per plan, until every invariant holds again."""
    stopped: list[int] = []
    for instance_type in all_types(snap):
        if type_holds(snap, instance_type):
            continue
        on_type = placed_on(snap, instance_type)
        taken: list[int] = []
        # Jobs of shares over their limit first (each while its share still is), then the others.
        for job in on_type:
            if not type_holds(without(snap, set(taken)), instance_type) and over_limit(
                without(snap, set(taken)), job.share_id, instance_type
            ):
                taken.append(job.id)
        for job in on_type:
            if not type_holds(without(snap, set(taken)), instance_type) and job.id not in taken:
                taken.append(job.id)
        taken = put_back(taken, lambda gone, s=snap, t=instance_type: type_holds(without(s, gone), t))
        stopped += taken
        snap = without(snap, set(taken))
    for name in sorted(plan_usage(snap)):
        if plan_usage(snap)[name] <= plan_allows(snap, name):
            continue
        on_plan = sorted(
            (j for j in snap.jobs if j.status in PLACED_STATUSES and j.placement.training_plan == name),
            key=victim_order,
        )
        taken = []
        for job in on_plan:
            if plan_usage(without(snap, set(taken)))[name] > plan_allows(snap, name):
                taken.append(job.id)
        taken = put_back(
            taken, lambda gone, s=snap, n=name: plan_usage(without(s, gone))[n] <= plan_allows(s, n)
        )
        stopped += taken
        snap = without(snap, set(taken))
    return stopped
