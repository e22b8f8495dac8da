"""A seeded, realistic snapshot of a busy queue, for benchmarks, the simulator and replay tests.

The placed jobs obey behaviour.md#capacity-what-a-share-may-hold (each was placed by the share rule and invariant B as
the engine would), so the snapshot is one a real pass could have left behind.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from .ceilings import reserved_capacity, share_ceiling
from .types import UNLIMITED, Entry, Job, JobStatus, Placement, Plan, Share, Snapshot, Strategy

SYNTHETIC_NOW = datetime(2025, 6, 2, 12, 0, tzinfo=UTC)
TYPE_NAMES = (
    "ml.p5.48xlarge",
    "ml.p4d.24xlarge",
    "ml.p4de.24xlarge",
    "ml.g5.48xlarge",
    "ml.g6e.48xlarge",
    "ml.trn1.32xlarge",
    "ml.g5.12xlarge",
    "ml.p5e.48xlarge",
)
PRIORITIES = (0, 0, 0, 0, 10, 10, 50, 100, 500, 1000, 5000)
COUNTS = (1, 1, 1, 2, 2, 2, 4, 4, 8)
MEAN_COUNT = sum(COUNTS) / len(COUNTS)


def build_synthetic_snapshot(*, runnable: int, placed: int, shares: int, types: int, seed: int) -> Snapshot:
    """`placed` jobs holding capacity and `runnable` jobs waiting, over `shares` shares and `types` types."""
    rng = random.Random(seed)
    now = SYNTHETIC_NOW
    type_names = [TYPE_NAMES[i] if i < len(TYPE_NAMES) else f"ml.synthetic{i}.xlarge" for i in range(types)]
    # Sized so the placed jobs fill most of the environment: most RUNNABLE jobs have to wait or preempt.
    per_type = max(8, round(placed * MEAN_COUNT / types * 1.15))
    capacity = {name: per_type for name in type_names}
    share_list = _shares(rng, shares, type_names, capacity)
    plans = _plans(rng, type_names, share_list, now)
    jobs = _placed_jobs(rng, placed, share_list, plans, capacity, now)
    jobs += _runnable_jobs(rng, runnable, len(jobs) + 1, share_list, plans, type_names, now)
    return Snapshot(
        now=now,
        capacity=capacity,
        shares=tuple(share_list),
        jobs=tuple(jobs),
        plans=tuple(plans),
    )


def _shares(rng: random.Random, count: int, type_names: list[str], capacity: dict[str, int]) -> list[Share]:
    strategies = rng.choices(
        [Strategy.RESERVE, Strategy.LEND, Strategy.LEND_AND_BORROW], weights=[1, 1, 2], k=count
    )
    listed = [rng.sample(type_names, rng.randint(1, min(5, len(type_names)))) for _ in range(count)]
    limits: list[dict[str, int]] = [{} for _ in range(count)]
    for name in type_names:
        owners = [i for i in range(count) if name in listed[i]]
        # Shares own 60-90% of each type; the rest is the free pool.
        owned = int(capacity[name] * rng.uniform(0.6, 0.9))
        weights = [rng.uniform(0.5, 2.0) for _ in owners]
        for i, weight in zip(owners, weights, strict=True):
            limits[i][name] = max(1, int(owned * weight / sum(weights)))
        while sum(limits[i][name] for i in owners) > capacity[name]:
            biggest = max(owners, key=lambda i: limits[i][name])
            limits[biggest][name] -= 1
    return [
        Share(
            id=i + 1,
            name=f"team-{i + 1:02d}",
            strategy=strategies[i],
            limits={name: n for name, n in limits[i].items() if n > 0} or {listed[i][0]: 1},
            borrow_limit=(
                rng.choice([UNLIMITED, UNLIMITED, 50, 100, 200])
                if strategies[i] == Strategy.LEND_AND_BORROW
                else UNLIMITED
            ),
            in_share_preemption=rng.random() < 0.3,
            enabled=rng.random() < 0.95,
        )
        for i in range(count)
    ]


def _plans(rng: random.Random, type_names: list[str], shares: list[Share], now: datetime) -> list[Plan]:
    plans = []
    for i, name in enumerate(type_names[: max(1, len(type_names) // 2 + 1)]):
        open_to = (
            frozenset(rng.sample([s.id for s in shares], k=min(len(shares), 3))) if i % 2 else frozenset()
        )
        plans.append(
            Plan(
                id=i + 1,
                name=f"plan-{name.split('.')[1]}",
                instance_type=name,
                instance_count=rng.choice([16, 32, 64]),
                start_time=now - timedelta(days=1),
                end_time=now + timedelta(days=rng.randint(2, 10)),
                share_ids=open_to,
            )
        )
    # One plan not started yet and one about to end, as a real calendar of reservations has.
    plans.append(
        Plan(
            id=len(plans) + 1,
            name="plan-next-week",
            instance_type=type_names[0],
            instance_count=32,
            start_time=now + timedelta(days=7),
            end_time=now + timedelta(days=14),
        )
    )
    plans.append(
        Plan(
            id=len(plans) + 1,
            name="plan-ending",
            instance_type=type_names[-1],
            instance_count=16,
            start_time=now - timedelta(days=7),
            end_time=now + timedelta(minutes=20),
        )
    )
    return plans


def _placed_jobs(
    rng: random.Random,
    count: int,
    shares: list[Share],
    plans: list[Plan],
    capacity: dict[str, int],
    now: datetime,
) -> list[Job]:
    usage: dict[tuple[int, str], int] = {}
    in_use_or_reserved = {
        name: sum(reserved_capacity(s.strategy, s.limits.get(name, 0)) for s in shares) for name in capacity
    }
    plan_use = dict.fromkeys((p.name for p in plans), 0)
    usable_plans = [p for p in plans if p.start_time <= now and p.end_time - now > timedelta(hours=1)]
    jobs: list[Job] = []
    attempts = 0
    while len(jobs) < count:
        attempts += 1
        if attempts > count * 200:
            raise ValueError(f"only {len(jobs)} of {count} placed jobs fit the synthetic environment")
        share = rng.choice(shares)
        n = rng.choice(COUNTS)
        plan = rng.choice(usable_plans) if usable_plans and rng.random() < 0.1 else None
        if plan is not None:
            if (plan.share_ids and share.id not in plan.share_ids) or plan_use[
                plan.name
            ] + n > plan.instance_count:
                continue
            plan_use[plan.name] += n
            instance_type, plan_name = plan.instance_type, plan.name
        else:
            borrows = share.strategy == Strategy.LEND_AND_BORROW and rng.random() < 0.3
            instance_type = rng.choice(sorted(capacity) if borrows else sorted(share.limits))
            limit = share.limits.get(instance_type, 0)
            before = usage.get((share.id, instance_type), 0)
            ceiling = share_ceiling(share.strategy, limit, share.borrow_limit)
            if ceiling is not None and before + n > ceiling:
                continue
            reserved = reserved_capacity(share.strategy, limit)
            change = max(before + n, reserved) - max(before, reserved)
            if in_use_or_reserved[instance_type] + change > capacity[instance_type]:
                continue
            usage[share.id, instance_type] = before + n
            in_use_or_reserved[instance_type] += change
            plan_name = None
        jobs.append(_placed_job(rng, len(jobs) + 1, share, instance_type, n, plan_name, now))
    return jobs


def _placed_job(
    rng: random.Random, job_id: int, share: Share, instance_type: str, n: int, plan: str | None, now: datetime
) -> Job:
    scheduled_at = now - timedelta(seconds=rng.randint(60, 2 * 86400))
    return Job(
        id=job_id,
        share_id=share.id,
        priority=rng.choice(PRIORITIES),
        submitted_at=scheduled_at - timedelta(seconds=rng.randint(0, 86400)),
        entries=(Entry(instance_type, n, plan),),
        status=rng.choice([JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING, JobStatus.RUNNING]),
        placement=Placement(instance_type, n, plan, scheduled_at),
        preemption_count=rng.choice([0, 0, 0, 1, 2]),
        preemption_retries_before_termination=rng.choice([None, None, 1, 3, 5]),
    )


def _runnable_jobs(
    rng: random.Random,
    count: int,
    first_id: int,
    shares: list[Share],
    plans: list[Plan],
    type_names: list[str],
    now: datetime,
) -> list[Job]:
    plans_by_type: dict[str, list[Plan]] = {}
    for plan in plans:
        plans_by_type.setdefault(plan.instance_type, []).append(plan)
    jobs = []
    for job_id in range(first_id, first_id + count):
        share = rng.choice(shares)
        entries: list[Entry] = []
        seen: set[tuple[str, str | None]] = set()
        for _ in range(rng.choice([1, 1, 2, 2, 3, 3, 4, 5])):
            instance_type = rng.choice(type_names)
            candidates = plans_by_type.get(instance_type, [])
            plan_name = rng.choice(candidates).name if candidates and rng.random() < 0.2 else None
            if (instance_type, plan_name) not in seen:
                seen.add((instance_type, plan_name))
                entries.append(Entry(instance_type, rng.choice(COUNTS), plan_name))
        submitted_at = now - timedelta(seconds=rng.randint(0, 3 * 86400))
        jobs.append(
            Job(
                id=job_id,
                share_id=share.id,
                priority=rng.choice(PRIORITIES),
                submitted_at=submitted_at,
                entries=tuple(entries),
                runnable_since=min(now, submitted_at + timedelta(seconds=rng.randint(0, 3600))),
                max_pending_seconds=rng.choice([None] * 12 + [6 * 3600, 86400, 3 * 86400]),
                preemption_retries_before_termination=rng.choice([None, None, 2, 5]),
            )
        )
    return jobs
