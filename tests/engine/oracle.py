"""behaviour.md#capacity-what-a-share-may-hold computed from scratch, with no engine code: what the tests hold the
engine's results to.

STOPPING jobs hold their instances: they count in every sum, as placed jobs do.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import timedelta

from engine import HOLDING_STATUSES, UNLIMITED, Entry, Job, JobStatus, Share, Snapshot, Strategy


def on_demand_usage(snap: Snapshot) -> Counter[tuple[int, str]]:
    usage: Counter[tuple[int, str]] = Counter()
    for job in snap.jobs:
        if job.status in HOLDING_STATUSES and job.placement.training_plan is None:
            usage[job.share_id, job.placement.instance_type] += job.placement.instance_count
    return usage


def plan_usage(snap: Snapshot) -> Counter[str]:
    usage: Counter[str] = Counter()
    for job in snap.jobs:
        if job.status in HOLDING_STATUSES and job.placement.training_plan is not None:
            usage[job.placement.training_plan] += job.placement.instance_count
    return usage


def limit(share: Share, instance_type: str) -> int:
    return share.limits.get(instance_type, 0)


def reserved(share: Share, instance_type: str) -> int:
    """RESERVE keeps its limit; another share keeps what its lending limit does not lend (none if unset)."""
    if share.strategy == Strategy.RESERVE:
        return limit(share, instance_type)
    lending_limit = share.lending_limits.get(instance_type)
    return 0 if lending_limit is None else max(0, limit(share, instance_type) - lending_limit)


def most_allowed(share: Share, instance_type: str) -> int | None:
    """Invariant C: the most a placement may bring the share to (None: no bound)."""
    if share.strategy != Strategy.LEND_AND_BORROW:
        return limit(share, instance_type)
    if share.borrow_limit == UNLIMITED:
        return None
    return limit(share, instance_type) + limit(share, instance_type) * share.borrow_limit // 100


def borrows_no_more(share: Share) -> bool:
    """behaviour.md#gpu-hour-budgets: once a share's consumption reaches a budget of scope BORROWED, it borrows no
    more."""
    budget = share.budget
    return budget is not None and budget.scope == "BORROWED" and budget.used_gpu_hours >= budget.gpu_hours


def starts_no_new_job(share: Share) -> bool:
    """behaviour.md#gpu-hour-budgets: once a share's consumption reaches a budget of scope ALL, it starts no new job."""
    budget = share.budget
    return budget is not None and budget.scope == "ALL" and budget.used_gpu_hours >= budget.gpu_hours


def all_types(snap: Snapshot) -> list[str]:
    types = set(snap.capacity)
    for job in snap.jobs:
        types.update(e.instance_type for e in job.entries)
        if job.placement is not None:
            types.add(job.placement.instance_type)
    return sorted(types)


def invariant_violations(snap: Snapshot) -> list[str]:
    """Invariants A, B and D of behaviour.md#capacity-what-a-share-may-hold (C is about placements, see
    `share_rule_violations`)."""
    usage = on_demand_usage(snap)
    problems = []
    for instance_type in all_types(snap):
        capacity = snap.capacity.get(instance_type, 0)
        used = sum(usage[s.id, instance_type] for s in snap.shares)
        committed = sum(max(usage[s.id, instance_type], reserved(s, instance_type)) for s in snap.shares)
        if used > capacity:
            problems.append(f"A: {instance_type} uses {used} of {capacity}")
        if committed > capacity:
            problems.append(f"B: {instance_type} commits {committed} of {capacity}")
    plans = {p.name: p for p in snap.plans}
    for name, in_use in sorted(plan_usage(snap).items()):
        plan = plans.get(name)
        if plan is None:
            problems.append(f"D: {in_use} in use on missing plan {name}")
            continue
        if in_use > plan.instance_count:
            problems.append(f"D: plan {name} holds {in_use} of {plan.instance_count}")
        if not plan.start_time <= snap.now < plan.end_time:
            problems.append(f"D: plan {name} holds {in_use} while not ACTIVE")
        if plan.end_time - snap.now <= timedelta(seconds=snap.plan_drain_seconds):
            problems.append(f"D: plan {name} holds {in_use} within its drain window")
    return problems


def fits_without_preemption(snap: Snapshot, job: Job, entry: Entry) -> bool:
    """behaviour.md#preference-evaluation for one entry, on the state `snap` describes."""
    share = next(s for s in snap.shares if s.id == job.share_id)
    if entry.training_plan is not None:
        plan = next((p for p in snap.plans if p.name == entry.training_plan), None)
        return (
            plan is not None
            and plan.instance_type == entry.instance_type
            and (not plan.share_ids or share.id in plan.share_ids)
            and plan.start_time <= snap.now < plan.end_time
            and plan.end_time - snap.now > timedelta(seconds=snap.plan_drain_seconds)
            and plan_usage(snap)[plan.name] + entry.instance_count <= plan.instance_count
        )
    usage = on_demand_usage(snap)
    instance_type = entry.instance_type
    after = usage[share.id, instance_type] + entry.instance_count
    ceiling = most_allowed(share, instance_type)
    if ceiling is not None and after > ceiling:
        return False
    if borrows_no_more(share) and after > limit(share, instance_type):
        return False
    committed = sum(
        max(
            usage[s.id, instance_type] + (entry.instance_count if s.id == share.id else 0),
            reserved(s, instance_type),
        )
        for s in snap.shares
    )
    return committed <= snap.capacity.get(instance_type, 0)


def fits_now(snap: Snapshot, job: Job, entry: Entry) -> bool:
    """behaviour.md#preference-evaluation for an on-demand entry with STOPPING jobs holding their instances
    (behaviour.md#preemption): as
    `fits_without_preemption`, except that while a job STOPPING on the type still holds instances, invariant B
    may stay over capacity (a capacity was lowered) when the placement does not make it worse, on instances
    free now (invariant A holds after it)."""
    if fits_without_preemption(snap, job, entry):
        return True
    instance_type = entry.instance_type
    if not any(
        j.status == JobStatus.STOPPING
        and j.placement.training_plan is None
        and j.placement.instance_type == instance_type
        for j in snap.jobs
    ):
        return False
    share = next(s for s in snap.shares if s.id == job.share_id)
    usage = on_demand_usage(snap)
    before = usage[share.id, instance_type]
    after = before + entry.instance_count
    ceiling = most_allowed(share, instance_type)
    if ceiling is not None and after > ceiling:
        return False
    in_use = sum(usage[s.id, instance_type] for s in snap.shares) + entry.instance_count
    return max(after, reserved(share, instance_type)) == max(
        before, reserved(share, instance_type)
    ) and in_use <= snap.capacity.get(instance_type, 0)


def makes_room(snap: Snapshot, job: Job, entry: Entry, victim_ids: set[int], *, fits=None) -> bool:
    """behaviour.md#preemption: once the victims are gone the environment has the room and the job's share ends within
    its own limit, or, for a set with no reclaim victim, within what it may borrow. `fits` reads the room
    (`fits_without_preemption` unless told)."""
    gone = replace(snap, jobs=tuple(j for j in snap.jobs if j.id not in victim_ids))
    reclaim = any(j.id in victim_ids and j.share_id != job.share_id for j in snap.jobs)
    share = next(s for s in snap.shares if s.id == job.share_id)
    usage_after = on_demand_usage(gone)[share.id, entry.instance_type] + entry.instance_count
    if reclaim and usage_after > limit(share, entry.instance_type):
        return False
    return (fits or fits_without_preemption)(gone, job, entry)
