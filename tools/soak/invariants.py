"""The soak's checks: the capacity rules on usage per share and plan, in each sample of the tables and in a
replay of every attempt; each job's history against its status, and no duplicate placement; with agents, the
slots the jobs' own processes held and the capacity held by attempts nobody started. The checks work on plain
data; `config_load` and `sample_violations` read it from the tables."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property

from django.db import connection, transaction
from django.utils import timezone

from engine import Plan as EnginePlan
from engine import Share as EngineShare
from engine import Strategy, invariants
from scheduling.models import (
    HOLDING_STATUSES,
    EnvironmentCapacity,
    InstanceType,
    Job,
    JobAttempt,
    JobQueue,
    JobStatus,
    QuotaShare,
    ShareCapacityLimit,
    TrainingPlan,
)
from tools.soak.world import EXT_START_DEADLINE_SECONDS

SAMPLE_SECONDS = 0.5  # how often the soak reads the tables and checks them while it runs

LIFECYCLE_KINDS = {
    "SUBMITTED",
    "ADMITTED",
    "STARTED",
    "SUCCEEDED",
    "FAILED",
    "CANCELLED",
    "PLAN_EXPIRING",
    "PREEMPTED_RECLAIM",
    "PREEMPTED_IN_SHARE",
    "PREEMPTED_LIMIT_REDUCED",
    "STOPPING",
    "STOPPED",
    "EXECUTOR_LOST",
    "START_TIMEOUT",
}
# A job asked to stop gracefully keeps its placement (STOPPING) until STOPPED or EXECUTOR_LOST.
STOPPED_KINDS = {"STOPPED", "EXECUTOR_LOST"}
STOP_KINDS = {
    "START_TIMEOUT",
    "SUCCEEDED",
    "FAILED",
    "CANCELLED",
    "PLAN_EXPIRING",
    "PREEMPTED_RECLAIM",
    "PREEMPTED_IN_SHARE",
    "PREEMPTED_LIMIT_REDUCED",
}
# What the last lifecycle event of a job in each status may be.
LAST_EVENT_FOR_STATUS = {
    JobStatus.RUNNABLE: {
        "START_TIMEOUT",
        "SUBMITTED",
        "FAILED",
        "STOPPED",
        "EXECUTOR_LOST",
        "PLAN_EXPIRING",
        "PREEMPTED_RECLAIM",
        "PREEMPTED_IN_SHARE",
        "PREEMPTED_LIMIT_REDUCED",
    },
    JobStatus.SCHEDULED: {"ADMITTED"},
    JobStatus.STARTING: {"ADMITTED"},
    JobStatus.RUNNING: {"STARTED"},
    JobStatus.STOPPING: {"STOPPING"},
    JobStatus.SUCCEEDED: {"SUCCEEDED"},
    JobStatus.FAILED: {"FAILED", "STOPPED", "EXECUTOR_LOST"},
    JobStatus.CANCELLED: {"CANCELLED", "STOPPED"},
}


@dataclass
class Config:
    """What the invariants are checked against: capacity per (queue, type), shares, limits, plans."""

    capacity: dict[tuple[int, int], int]
    shares: dict[int, dict]  # id -> {queue, name, strategy, borrow_limit}
    limits: dict[tuple[int, int], int]  # (share, type) -> max_capacity
    plans: dict[int, dict]  # id -> {name, instance_count, start_time, end_time}
    type_names: dict[int, str] = field(default_factory=dict)

    def type_name(self, type_id: int) -> str:
        return str(self.type_names.get(type_id, type_id))

    @cached_property
    def queues(self) -> dict[int, tuple[dict[str, int], list[EngineShare]]]:
        """Per queue, its capacity per type name and its shares, as `engine.invariants` reads them."""
        queues: dict[int, tuple[dict[str, int], list[EngineShare]]] = {}
        for (queue, type_id), maximum in self.capacity.items():
            queues.setdefault(queue, ({}, []))[0][self.type_name(type_id)] = maximum
        for share_id, share in self.shares.items():
            limits = {
                self.type_name(type_id): maximum
                for (limit_share, type_id), maximum in self.limits.items()
                if limit_share == share_id
            }
            queues.setdefault(share["queue"], ({}, []))[1].append(
                EngineShare(
                    id=share_id,
                    name=share["name"],
                    strategy=Strategy(share["strategy"]),
                    limits=limits,
                    borrow_limit=share["borrow_limit"],
                )
            )
        return queues

    def plan(self, plan_id: int) -> EnginePlan:
        row = self.plans[plan_id]
        # Rule D reads neither the type nor the shares of a plan.
        return EnginePlan(
            id=plan_id,
            name=row["name"],
            instance_type="",
            instance_count=row["instance_count"],
            start_time=row["start_time"],
            end_time=row["end_time"],
        )


def config_load(queue_ids: list[int]) -> Config:
    envs = dict(JobQueue.objects.filter(pk__in=queue_ids).values_list("service_environment_id", "pk"))
    capacity = {
        (envs[env], type_id): maximum
        for env, type_id, maximum in EnvironmentCapacity.objects.filter(
            service_environment_id__in=envs
        ).values_list("service_environment_id", "instance_type_id", "max_capacity")
    }
    shares = {
        row["id"]: {
            "queue": row["job_queue_id"],
            "name": row["name"],
            "strategy": row["strategy"],
            "borrow_limit": row["borrow_limit"],
        }
        for row in QuotaShare.objects.filter(job_queue_id__in=queue_ids).values(
            "id", "job_queue_id", "name", "strategy", "borrow_limit"
        )
    }
    limits = {
        (share, type_id): maximum
        for share, type_id, maximum in ShareCapacityLimit.objects.filter(
            quota_share_id__in=shares
        ).values_list("quota_share_id", "instance_type_id", "max_capacity")
    }
    plans = {
        row["id"]: row
        for row in TrainingPlan.objects.filter(job_queue_id__in=queue_ids).values(
            "id", "name", "instance_count", "start_time", "end_time"
        )
    }
    return Config(
        capacity=capacity,
        shares=shares,
        limits=limits,
        plans=plans,
        type_names=dict(InstanceType.objects.values_list("id", "name")),
    )


def capacity_violations(
    config: Config, usage: dict[tuple[int, int], int], plan_usage: dict[int, int], at: datetime
) -> list[str]:
    """Every behaviour.md#capacity-what-a-share-may-hold rule (`engine.invariants`) broken by this on-demand usage per
    (share, type) and usage per plan, at `at`. A plan may hold jobs until its end: a drain may still be on its way."""
    broken = []
    for queue, (capacity, shares) in config.queues.items():
        named_usage = {
            (share_id, config.type_name(type_id)): used
            for (share_id, type_id), used in usage.items()
            if config.shares[share_id]["queue"] == queue
        }
        for breach in invariants.share_breaches(capacity, shares, named_usage):
            if breach.rule == invariants.SHARE_CEILING:
                share = breach.share
                name = f"share {share.name} {breach.instance_type}"
                if share.strategy == Strategy.LEND_AND_BORROW:
                    broken.append(f"{name}: usage {breach.held} over its borrow ceiling {breach.allowed}")
                else:
                    broken.append(
                        f"{name}: usage {breach.held} over its limit {breach.allowed} "
                        f"({share.strategy} never borrows)"
                    )
            elif breach.rule == invariants.IN_USE:
                broken.append(
                    f"queue {queue} {breach.instance_type}: on-demand usage {breach.held} over "
                    f"capacity {breach.allowed}"
                )
            else:
                broken.append(
                    f"queue {queue} {breach.instance_type}: sum of max(usage, reserved) "
                    f"{breach.held} over capacity {breach.allowed}"
                )
    plans = [(config.plan(plan_id), used) for plan_id, used in plan_usage.items()]
    for breach in invariants.plan_breaches(plans, now=at):
        plan = breach.plan
        if breach.rule == invariants.PLAN_COUNT:
            broken.append(f"plan {plan.name}: {breach.held} in use over its {plan.instance_count} instances")
        else:
            broken.append(f"plan {plan.name}: {breach.held} in use while not ACTIVE")
    return broken


def replay_violations(
    config: Config, attempts: list[dict], share_of: dict[int, int]
) -> tuple[list[str], int]:
    """Rebuild usage over time from the attempts (scheduled_at, stopped_at) and check every change point.

    At one instant, stops apply before starts (a pass frees its victims' capacity and admits in one go).
    Returns the violations and the number of change points checked.
    """
    changes: dict[datetime, list[tuple[int, dict]]] = defaultdict(list)
    for attempt in attempts:
        changes[attempt["scheduled_at"]].append((+1, attempt))
        if attempt["stopped_at"] is not None:
            changes[attempt["stopped_at"]].append((-1, attempt))
    usage: Counter = Counter()
    plan_usage: Counter = Counter()
    broken = []
    for at in sorted(changes):
        for sign, attempt in sorted(changes[at], key=lambda change: change[0]):
            if attempt["training_plan_id"]:
                plan_usage[attempt["training_plan_id"]] += sign * attempt["instance_count"]
            else:
                usage[(share_of[attempt["job_id"]], attempt["instance_type_id"])] += (
                    sign * attempt["instance_count"]
                )
        found = capacity_violations(
            config, {k: v for k, v in usage.items() if v}, {k: v for k, v in plan_usage.items() if v}, at
        )
        broken.extend(f"replay at {at.isoformat()}: {message}" for message in found)
    return broken, len(changes)


def history_violations(job: dict, events: list[str], attempts: list[dict]) -> list[str]:
    """A job's event kinds (in order) and attempts against its status: behaviour.md#a-jobs-life's lifecycle, and no
    duplicate placement (no ADMITTED while placed, at most one open attempt, only the last)."""
    broken = []
    name = f"job {job['id']} ({job['status']})"
    lifecycle = [kind for kind in events if kind in LIFECYCLE_KINDS]
    if not lifecycle or lifecycle[0] != "SUBMITTED" or lifecycle.count("SUBMITTED") != 1:
        broken.append(f"{name}: history does not start with one SUBMITTED: {lifecycle[:3]}")
    if lifecycle.count("ADMITTED") != len(attempts):
        broken.append(f"{name}: {lifecycle.count('ADMITTED')} ADMITTED events but {len(attempts)} attempts")
    placed = False
    for kind in lifecycle:
        if kind == "ADMITTED":
            if placed:
                broken.append(f"{name}: duplicate placement: ADMITTED again without a stop between")
            placed = True
        elif kind == "STARTED" and not placed:
            broken.append(f"{name}: STARTED while not placed")
        elif kind == "STOPPING":
            placed = True  # asked to stop: it holds its instances until it has stopped
        elif kind in STOP_KINDS or kind in STOPPED_KINDS:
            placed = False
    open_attempts = [a for a in attempts if a["stopped_at"] is None]
    if job["status"] in HOLDING_STATUSES:
        if len(open_attempts) != 1 or attempts[-1]["stopped_at"] is not None:
            broken.append(
                f"{name}: placed with {len(open_attempts)} open attempts (the last must be the open one)"
            )
    elif open_attempts:
        broken.append(f"{name}: {len(open_attempts)} open attempts while not placed")
    if lifecycle and lifecycle[-1] not in LAST_EVENT_FOR_STATUS[job["status"]]:
        broken.append(f"{name}: last event {lifecycle[-1]} does not match the status")
    return broken


def sample_violations(config: Config, queue_ids: list[int], seen: Counter | None = None) -> list[str]:
    """One consistent reading of the placed jobs and open attempts, checked against
    behaviour.md#capacity-what-a-share-may-hold.

    STOPPING jobs count with their whole placement (their processes may still run); `seen`, if given, counts
    the samples that had some (`stopping_samples`) and the STOPPING jobs they held (`stopping_jobs`)."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        at = timezone.now()
        placed = list(
            Job.objects.filter(job_queue_id__in=queue_ids, status__in=HOLDING_STATUSES).values_list(
                "id",
                "quota_share_id",
                "selected_instance_type_id",
                "selected_instance_count",
                "selected_training_plan_id",
                "status",
            )
        )
        open_attempts = list(
            JobAttempt.objects.filter(job__job_queue_id__in=queue_ids, stopped_at__isnull=True).values_list(
                "job_id", "instance_type_id", "instance_count", "training_plan_id"
            )
        )
    usage: Counter = Counter()
    plan_usage: Counter = Counter()
    stopping = sum(1 for *_, status in placed if status == JobStatus.STOPPING)
    if seen is not None and stopping:
        seen["stopping_samples"] += 1
        seen["stopping_jobs"] += stopping
    for _, share, type_id, count, plan, _ in placed:
        if plan:
            plan_usage[plan] += count
        else:
            usage[(share, type_id)] += count
    broken = capacity_violations(config, dict(usage), dict(plan_usage), at)
    by_job = Counter(job_id for job_id, *_ in open_attempts)
    placed_rows = {job_id: (type_id, count, plan) for job_id, _, type_id, count, plan, _ in placed}
    for job_id, n in by_job.items():
        if n > 1:
            broken.append(f"job {job_id}: {n} open attempts (a duplicate placement)")
        elif job_id not in placed_rows:
            broken.append(f"job {job_id}: an open attempt while not placed")
    for job_id, type_id, count, plan in open_attempts:
        if job_id in placed_rows and placed_rows[job_id] != (type_id, count, plan):
            broken.append(
                f"job {job_id}: placed on {placed_rows[job_id]} but its open attempt is "
                f"{(type_id, count, plan)}"
            )
    missing = set(placed_rows) - set(by_job)
    if missing:
        broken.append(f"jobs placed without an open attempt: {sorted(missing)[:10]}")
    return broken


# --- with agents: from the notes the jobs' own processes wrote ----------------------------------------------

# How long past its start deadline an attempt nobody started may still hold capacity: the pass that puts it back
# comes on the beat, and the deadline is counted from its placement.
START_DEADLINE_SLACK_SECONDS = 15


def slot_violations(
    lines: list[str], attempts_end: dict[tuple[int, int], datetime | None], now: float
) -> list[str]:
    """From the processes' own notes (`SLOT_PROGRAM`): no instant when two live processes hold the same slot
    of the same agent. A process that never noted its end (SIGKILLed) is taken as live until its attempt
    ended (or now)."""
    spans: dict[tuple[int, int, int], dict] = {}
    for line in lines:
        parts = line.split(" ")
        if len(parts) < 6:
            continue
        moment, what, job, attempt, task, agent = (
            float(parts[0]),
            parts[1],
            parts[2],
            parts[3],
            parts[4],
            parts[5],
        )
        gpus = parts[6] if len(parts) > 6 else ""
        if not (job.isdigit() and attempt.isdigit() and task.isdigit()):
            continue
        key = (int(job), int(attempt), int(task))
        span = spans.setdefault(key, {"agent": agent, "gpus": gpus, "start": None, "end": None})
        if what == "start":
            span["start"] = moment
        elif what == "end" and span["end"] is None:
            span["end"] = moment
    held: dict[tuple[str, str], list[tuple[float, float, tuple]]] = defaultdict(list)
    for key, span in spans.items():
        if span["start"] is None:
            continue
        end = span["end"]
        if end is None:
            ended = attempts_end.get(key[:2])
            end = ended.timestamp() if ended is not None else now
        for gpu in filter(None, span["gpus"].split(",")):
            held[(span["agent"], gpu)].append((span["start"], end, key))
    broken = []
    for (agent, gpu), intervals in sorted(held.items()):
        intervals.sort()
        for (_, first_end, first), (second_start, _, second) in zip(intervals, intervals[1:], strict=False):
            if second_start < first_end:
                broken.append(
                    f"slot {gpu} of {agent.rsplit('/', 1)[-1]}: job {first[0]} attempt {first[1]} task "
                    f"{first[2]} and job {second[0]} attempt {second[1]} task {second[2]} held it at once "
                    f"({second_start:.3f} < {first_end:.3f})"
                )
    return broken


def unstarted_hold_violations(attempts: list[dict], lines: list[str], now: datetime) -> list[str]:
    """No external attempt held its capacity longer than the start deadline (and the beat's slack) without a
    process of it having started by then."""
    started: dict[tuple[int, int], float] = {}
    for line in lines:
        parts = line.split(" ")
        if len(parts) >= 4 and parts[1] == "start" and parts[2].isdigit() and parts[3].isdigit():
            key = (int(parts[2]), int(parts[3]))
            started[key] = min(started.get(key, float("inf")), float(parts[0]))
    limit = EXT_START_DEADLINE_SECONDS + START_DEADLINE_SLACK_SECONDS
    broken = []
    for attempt in attempts:
        held = ((attempt["stopped_at"] or now) - attempt["scheduled_at"]).total_seconds()
        first = started.get((attempt["job_id"], attempt["attempt"]))
        if held > limit and (first is None or first - attempt["scheduled_at"].timestamp() > limit):
            broken.append(
                f"job {attempt['job_id']} attempt {attempt['attempt']} held its capacity {held:.0f} s, past its "
                f"start deadline ({EXT_START_DEADLINE_SECONDS} s), with no process of it started by then"
            )
    return broken
