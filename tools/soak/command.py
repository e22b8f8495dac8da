"""Soak quotaportal end to end on PostgreSQL and Redis, and check SPEC section 2 the whole time.

`python -m tools.soak --seconds 120 --clients 8 --workers 3` sets up its own `soak-` queues, shares, teams,
users and tokens, starts gunicorn on a free loopback port, `--workers` Celery workers (one process each,
`--concurrency 1`) and beat, all on the command's DATABASE_URL and CELERY_BROKER_URL, then runs API clients
(threads, token auth) that submit, cancel, reprioritise and read jobs, and an executor that reports on the
`external` queue. Every 0.5 s it reads the database in one REPEATABLE READ transaction and checks the
invariants. At the end it waits for every job to finish (bounded), stops every process it started and checks:
every job accounted for, each history consistent, no invariant broken in any sample nor in a replay of the
attempts, no duplicate placement. It prints the figures and exits non-zero on any violation.

Faults (`--fault`, at `--fault-at` seconds, for `--fault-seconds`):
- `redis`: stops the Redis server the soak started itself (`--own-redis PORT`; never a shared one) and starts
  it again: submissions must still succeed, and passes must resume by themselves.
- `postgres`: terminates every database connection of the soak's processes (they connect with their own
  application_name) with pg_terminate_backend: web and workers must reconnect.
- `worker`: SIGKILLs a Celery worker's pool process every 3 s, mid-pass or not: a killed pass rolls back and
  its message is redelivered (acks_late, task_reject_on_worker_lost).
`--agents N` runs the `external` queue's jobs with N reference agents (`agent/quotaportal_agent`, real
processes, long-polling the work endpoint through gunicorn's gthread workers) instead of the soak's own
reporting thread: each job's `payload.command` is a short Python process that sleeps for its duration and
sometimes exits 3. The agents share the environment's instance types round-robin; each offers as many slots as
its type's capacity, or with `--mixed-agents` the first agent of a type all but one slot per other agent of the
type and the others one slot, so jobs of several instances run as tasks across agents. The samples check the
server's accounting (STOPPING jobs hold their capacity until their agent reports them STOPPED); the jobs'
processes note when they held which slots, and at the end the soak checks that no slot was held by two live
processes at once and that no attempt held capacity past the external environment's start deadline without a
process of it having started.
Everything is bounded in time and count, talks to loopback only, and stops by itself.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from pathlib import Path

import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.utils import timezone
from rest_framework.authtoken.models import Token

from engine import UNLIMITED, Strategy, invariants
from engine import Plan as EnginePlan
from engine import Share as EngineShare
from scheduling import rules
from scheduling.models import (
    HOLDING_STATUSES,
    UNFINISHED_STATUSES,
    EnvironmentCapacity,
    Event,
    InstanceType,
    Job,
    JobAttempt,
    JobQueue,
    JobStatus,
    JobTask,
    Membership,
    QuotaShare,
    SchedulingPass,
    ServiceEnvironment,
    ShareCapacityLimit,
    Team,
    TrainingPlan,
)
from scheduling.services import configuration as config_services
from tools.guard import require_scratch_database
from tools.processes import Processes, children, free_port, port_open, service_env, signal_group

PREFIX = "soak-"
SAMPLE_SECONDS = 0.5
REQUEST_TIMEOUT = 30
FAULT_GRACE_SECONDS = 5  # after a postgres fault, in-flight requests may fail for this long

# --- the soak's configuration -------------------------------------------------------------------------------
# Instance types, the simulated queue's capacities, and shares: (name, team, strategy, borrow limit,
# in-share preemption, limits). The limits of each type sum to less than its capacity (a free pool).
TYPES = {"p5": "soak.p5", "p4": "soak.p4", "g5": "soak.g5"}
SIM_CAPACITY = {"p5": 12, "p4": 16, "g5": 24}
SIM_SHARES = [
    ("soak-reserve", "soak-a", "RESERVE", UNLIMITED, False, {"p5": 4, "p4": 4}),
    ("soak-lend", "soak-b", "LEND", UNLIMITED, False, {"p5": 4, "g5": 8}),
    ("soak-borrow", "soak-c", "LEND_AND_BORROW", 100, False, {"p4": 6, "g5": 8}),
    ("soak-greedy", "soak-d", "LEND_AND_BORROW", UNLIMITED, True, {"p5": 2, "p4": 4, "g5": 4}),
]
PLAN = ("soak-plan", "p5", 3, ("soak-reserve", "soak-greedy"))
EXT_CAPACITY = {"g5": 8, "p4": 6}
EXT_SHARES = [
    ("soak-ext-a", "soak-a", "LEND_AND_BORROW", UNLIMITED, False, {"g5": 3}),
    ("soak-ext-c", "soak-c", "LEND", UNLIMITED, False, {"g5": 2, "p4": 4}),
]
SIM_QUEUE, EXT_QUEUE = "soak-sim", "soak-ext"
# The external environment's start deadline: short, so a job placed but not started by all its agents is put
# back within the run (and the check that no capacity is held longer by a job nobody runs means something).
EXT_START_DEADLINE_SECONDS = 30
# How long past its start deadline an attempt nobody started may still hold capacity: the pass that puts it back
# comes on the beat, and the deadline is counted from its placement.
START_DEADLINE_SLACK_SECONDS = 15

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


# An external job's process: it notes when it held which slots (its agent's work dir and GPUs, one per slot) in
# SOAK_SLOTS_LOG, at its start and at its end (also on SIGTERM), sleeps its duration and exits with its code.
SLOT_PROGRAM = """import os, signal, sys, time
def note(what):
    path = os.environ.get("SOAK_SLOTS_LOG")
    if path:
        line = " ".join([f"{{time.time():.3f}}", what, os.environ.get("QUOTAPORTAL_JOB_ID", "?"),
                         os.environ.get("QUOTAPORTAL_ATTEMPT", "?"), os.environ.get("QUOTAPORTAL_TASK", "0"),
                         os.getcwd().rsplit("/jobs/", 1)[0], os.environ.get("CUDA_VISIBLE_DEVICES", "")])
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(descriptor, (line + "\\n").encode())
        os.close(descriptor)
def on_term(number, frame):
    note("end")
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
note("start")
time.sleep({seconds})
note("end")
sys.exit({code})
"""
# The main ports the agents hand out: the soak's jobs bind none (they only sleep), so one range serves all.
AGENT_PORTS = "18250-18299"


def agent_slots(agents: int, *, mixed: bool) -> list[tuple[str, int]]:
    """(type key, slots) per agent, round-robin over the external types. Each holds its type's capacity, or
    (mixed) the first agent of a type all but one slot per other agent of the type and the others one."""
    keys = sorted(EXT_CAPACITY)
    kinds = [keys[i % len(keys)] for i in range(agents)]
    if not mixed:
        return [(key, EXT_CAPACITY[key]) for key in kinds]
    counts = Counter(kinds)
    seen: Counter = Counter()
    slots = []
    for key in kinds:
        slots.append((key, EXT_CAPACITY[key] - (counts[key] - 1) if not seen[key] else 1))
        seen[key] += 1
    return slots


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


# --- the invariants (SPEC 2), on plain data, for the samples and the replay alike ---------------------------


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
    """Every SPEC 2 rule (`engine.invariants`) broken by this on-demand usage per (share, type) and usage per
    plan, at `at`. A plan may hold jobs until its end: a drain may still be on its way."""
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
    """A job's event kinds (in order) and attempts against its status: SPEC 4's lifecycle, and no duplicate
    placement (no ADMITTED while placed, at most one open attempt, only the last)."""
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


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


# --- the run ------------------------------------------------------------------------------------------------


@dataclass
class Stats:
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: Counter = field(default_factory=Counter)  # (operation, status) -> n
    submit_latency_ms: list[float] = field(default_factory=list)
    submitted: dict[int, str] = field(default_factory=dict)  # job id -> client
    tokens: dict[str, int] = field(default_factory=dict)  # client_token -> job id
    submissions_tried: int = 0
    failed_submissions: int = 0
    violations: list[str] = field(default_factory=list)
    tolerated: list[str] = field(default_factory=list)  # failures inside a fault's window
    samples: int = 0
    sample_ms: list[float] = field(default_factory=list)
    sample_errors: int = 0
    stopping: Counter = field(default_factory=Counter)  # samples with STOPPING jobs, and those jobs
    fault_windows: list[tuple[float, float]] = field(default_factory=list)
    fault_notes: list[str] = field(default_factory=list)
    agent_notes: dict = field(
        default_factory=dict
    )  # with agents: processes, tasks, start timeouts, lost tasks

    def record(self, operation: str, status: int | str) -> None:
        with self.lock:
            self.requests[(operation, status)] += 1

    def violation(self, message: str) -> None:
        with self.lock:
            self.violations.append(message)

    def in_fault_window(self, started: float) -> bool:
        return any(begin <= started <= end for begin, end in self.fault_windows)


class Command(BaseCommand):
    help = (
        "Soak the web server, Celery workers and beat on PostgreSQL and Redis, checking the capacity rules."
    )

    def add_arguments(self, parser):
        parser.add_argument("--seconds", type=int, default=60, help="load phase length (default 60)")
        parser.add_argument("--clients", type=int, default=6, help="API client threads (default 6)")
        parser.add_argument("--workers", type=int, default=3, help="Celery worker processes (default 3)")
        parser.add_argument(
            "--jobs", type=int, default=5000, help="at most this many submissions (default 5000)"
        )
        parser.add_argument(
            "--web-workers", type=int, default=2, help="gunicorn worker processes (default 2)"
        )
        parser.add_argument(
            "--drain-seconds",
            type=int,
            default=300,
            help="at most this long to wait for every job to finish after the load (default 300)",
        )
        parser.add_argument(
            "--stall-seconds",
            type=int,
            default=45,
            help="the drain fails as soon as no job has finished for this long (default 45)",
        )
        parser.add_argument(
            "--own-redis",
            type=int,
            metavar="PORT",
            help="start a Redis server on this loopback port for the soak (needed for --fault redis)",
        )
        parser.add_argument("--fault", action="append", choices=["redis", "postgres", "worker"], default=[])
        parser.add_argument("--fault-at", type=float, help="seconds into the load (default: a third of it)")
        parser.add_argument(
            "--fault-seconds", type=int, default=30, help="how long a fault lasts (default 30)"
        )
        parser.add_argument(
            "--agents",
            type=int,
            default=0,
            help="run the external queue with this many reference agents (at least 2: one per instance type) "
            "instead of the soak's reporting thread",
        )
        parser.add_argument(
            "--mixed-agents",
            action="store_true",
            help="with --agents: per instance type one agent with several slots and the others with one, so "
            "jobs of several instances run as tasks across agents (default: each agent holds its type's "
            "whole capacity)",
        )
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--json", help="also write the results to this file")

    def handle(self, *args, **options):
        self.options = options
        seconds, clients, workers = options["seconds"], options["clients"], options["workers"]
        if not (1 <= seconds <= 3600 and 1 <= clients <= 64 and 1 <= workers <= 16 and options["jobs"] >= 1):
            raise CommandError("--seconds 1..3600, --clients 1..64, --workers 1..16, --jobs >= 1")
        if options["agents"] and not len(EXT_CAPACITY) <= options["agents"] <= 64:
            raise CommandError(f"--agents: from {len(EXT_CAPACITY)} (one per instance type) to 64")
        if options["mixed_agents"] and not options["agents"]:
            raise CommandError("--mixed-agents: give --agents too")
        if options["mixed_agents"] and options["agents"] > sum(EXT_CAPACITY.values()):
            raise CommandError(f"--mixed-agents: at most {sum(EXT_CAPACITY.values())} agents (one slot each)")
        if not 1 <= options["stall_seconds"] <= options["drain_seconds"]:
            raise CommandError("--stall-seconds must be at least 1 and at most --drain-seconds")
        if connection.vendor != "postgresql":
            raise CommandError(
                "the soak needs PostgreSQL: set DATABASE_URL=postgres://... (SQLite serializes "
                "every writer, so it would measure nothing the production set-up does)"
            )
        require_scratch_database()
        broker = settings.CELERY_BROKER_URL
        if options["own_redis"] is None and not broker.startswith(("redis://", "rediss://")):
            raise CommandError(
                f"the soak needs Redis: set CELERY_BROKER_URL=redis://... (it is {broker}), "
                "or pass --own-redis PORT"
            )
        if "redis" in options["fault"] and options["own_redis"] is None:
            raise CommandError(
                "--fault redis stops the Redis server: pass --own-redis PORT so it is one the soak "
                "started itself, never one that others use"
            )
        random.seed(options["seed"])
        run = f"{PREFIX}{timezone.now():%Y%m%d-%H%M%S}"
        self.log_dir = Path(settings.VAR_DIR) / "soak" / run
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.app_name = run
        self.executor_heartbeat = time.monotonic()
        self.stats = Stats()
        self.processes = Processes(self.log_dir)
        try:
            result = self._run(broker)
        finally:
            self.processes.stop_all()
        self._report(result)
        if result["violations"]:
            raise CommandError(f"{len(result['violations'])} violation(s); logs in {self.log_dir}")

    # --- set-up ---------------------------------------------------------------------------------------------

    def _run(self, broker: str) -> dict:
        options = self.options
        call_command("migrate", verbosity=0, interactive=False)
        soak_clean()
        world = soak_setup(clients=options["clients"])
        if options["own_redis"] is not None:
            broker = self._start_redis(options["own_redis"])
        port = free_port()
        env = service_env(broker=broker, log_dir=self.log_dir, app_name=self.app_name)
        self._start_services(env, port)
        base = f"http://127.0.0.1:{port}"
        self.processes.wait_ready(
            base, broker=env["CELERY_BROKER_URL"], queue_ids=world["queue_ids"], trigger="soak"
        )
        started_at = timezone.now()

        stop = threading.Event()
        load_over = threading.Event()
        sampler = threading.Thread(target=self._sampler, args=(world, stop), name="sampler", daemon=True)
        executor = threading.Thread(target=self._external_executor, args=(base, world, stop), daemon=True)
        clients = [
            threading.Thread(target=self._client, args=(i, base, world, load_over), daemon=True)
            for i in range(options["clients"])
        ]
        faults = threading.Thread(target=self._faults, args=(load_over, env), daemon=True)
        load_started = time.monotonic()
        self.load_deadline = load_started + options["seconds"]
        if options["agents"]:
            self._start_agents(base, world)
            threads = (sampler, faults, *clients)
        else:
            threads = (sampler, executor, faults, *clients)
        for thread in threads:
            thread.start()
        for thread in clients:
            thread.join(timeout=options["seconds"] + REQUEST_TIMEOUT + 60)
        load_over.set()
        load_seconds = time.monotonic() - load_started
        faults.join(timeout=options["fault_seconds"] + 60)
        undrained, drain_seconds = self._drain(world)
        stop.set()
        backlog = self._broker_backlog(broker)
        if executor.is_alive():
            executor.join(timeout=REQUEST_TIMEOUT + 5)
        sampler.join(timeout=30)
        self.processes.stop_all()
        self._end_agents_jobs()
        if undrained:
            left = [
                (job.pk, job.job_queue_name, job.status, job.current_reason)
                for job in Job.objects.filter(
                    job_queue_id__in=world["queue_ids"], status__in=UNFINISHED_STATUSES
                ).select_related("pending")[:20]
            ]
            self.stats.violation(
                f"{undrained} (the external executor's last round began "
                f"{time.monotonic() - self.executor_heartbeat:.1f} s ago); unfinished: "
                + "; ".join(f"job {i} on {q} {s}: {r[:160]}" for i, q, s, r in left)
            )
        return self._final_checks(world, started_at, load_seconds, drain_seconds, backlog)

    def _start_redis(self, port: int) -> str:
        if shutil.which("redis-server") is None:
            raise CommandError(
                "--own-redis needs redis-server on PATH (Debian: apt-get install redis-server)"
            )
        if port_open(port):
            raise CommandError(
                f"something already listens on 127.0.0.1:{port}: --own-redis needs a free port"
            )
        self.redis_argv = [
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.log_dir),
        ]
        self.processes.start("redis", self.redis_argv, os.environ.copy())
        self.processes.wait(lambda: port_open(port), 10, f"Redis on port {port}")
        self.redis_port = port
        return f"redis://127.0.0.1:{port}/0"

    def _start_services(self, env: dict, port: int) -> None:
        # Each agent's long-poll holds a thread for up to its wait: threads, not sync workers.
        threads = self.options["agents"] + 8 if self.options["agents"] else 0
        self.processes.start_web(env, port=port, workers=self.options["web_workers"], threads=threads)
        self.processes.start_workers(env, count=self.options["workers"], prefix="soak")
        self.processes.start_beat(env)

    def _start_agents(self, base: str, world: dict) -> None:
        """N agents round-robin over the external environment's types; each offers its type's capacity, or
        (--mixed-agents) the first of a type all but one slot per other agent of the type, the others one."""
        self.agent_dirs: list[Path] = []
        slots = agent_slots(self.options["agents"], mixed=self.options["mixed_agents"])
        # The jobs' processes (children of the agents) say when they held which slots: one GPU per slot.
        self.slots_log = self.log_dir / "slots.log"
        env = {
            **os.environ,
            "PYTHONPATH": str(Path(settings.BASE_DIR) / "agent"),
            "PYTHONUNBUFFERED": "1",
            "SOAK_SLOTS_LOG": str(self.slots_log),
        }
        for i, (key, count) in enumerate(slots):
            work_dir = self.log_dir / f"agent{i}"
            self.agent_dirs.append(work_dir)
            argv = [sys.executable, "-m", "quotaportal_agent", "--url", base]
            argv += ["--token", world["executor_token"], "--environment", str(world["ext_environment_id"])]
            argv += ["--instance-type", TYPES[key], "--slots", str(count), "--gpus-per-instance", "1"]
            argv += ["--work-dir", str(work_dir), "--name", f"{PREFIX}agent{i}", "--heartbeat-seconds", "5"]
            argv += ["--wait-seconds", "10", "--log-level", "WARNING", "--advertise-address", "127.0.0.1"]
            argv += ["--port-range", AGENT_PORTS]
            self.processes.start(f"agent{i}", argv, env)

    def _end_agents_jobs(self) -> None:
        """Stopped agents leave their jobs running (a restarted agent adopts them): end what is left."""
        for work_dir in getattr(self, "agent_dirs", []):
            try:
                state = json.loads((work_dir / "state.json").read_text())
            except (OSError, ValueError):
                continue
            for job in state.get("jobs", []):
                if job.get("pid"):
                    signal_group(job["pid"], signal.SIGKILL)

    # --- load -----------------------------------------------------------------------------------------------

    def _client(self, index: int, base: str, world: dict, load_over: threading.Event) -> None:
        try:
            self._client_loop(index, base, world, load_over)
        except Exception as exc:  # a client that dies says so
            self.stats.violation(f"client {index}: {type(exc).__name__}: {exc}")

    def _client_loop(self, index: int, base: str, world: dict, load_over: threading.Event) -> None:
        stats, rng = self.stats, random.Random(self.options["seed"] * 1000 + index)
        user = world["clients"][index]
        session = requests.Session()
        session.headers["Authorization"] = f"Token {user['token']}"
        mine: list[int] = []
        tokens: list[tuple[str, int]] = []
        serial = 0
        while time.monotonic() < self.load_deadline and not load_over.is_set():
            roll = rng.random()
            if roll < 0.55 or not mine:
                with stats.lock:  # past --jobs submissions, the clients go on with everything else
                    allowed = stats.submissions_tried < self.options["jobs"]
                    stats.submissions_tried += allowed
                if allowed:
                    serial += 1
                    self._submit(session, base, rng, user, mine, tokens, f"{user['name']}-{serial}")
                elif not mine:
                    break
            elif roll < 0.65:
                self._call(
                    session,
                    "cancel",
                    "POST",
                    f"{base}/api/v1/jobs/{rng.choice(mine)}/cancel/",
                    {"reason": "soak"},
                    expected={200, 409},
                )
            elif roll < 0.80:
                self._call(
                    session,
                    "priority",
                    "PATCH",
                    f"{base}/api/v1/jobs/{rng.choice(mine)}/",
                    {"scheduling_priority": rng.randint(0, 100)},
                    expected={200, 409},
                )
            elif roll < 0.95:
                self._call(session, "read", "GET", f"{base}/api/v1/jobs/{rng.choice(mine)}/", expected={200})
            else:
                queue = rng.choice(world["queue_ids"])
                self._call(
                    session, "snapshot", "GET", f"{base}/api/v1/job-queues/{queue}/snapshot/", expected={200}
                )

    def _submit(self, session, base, rng, user, mine, tokens, name) -> None:
        stats = self.stats
        if tokens and rng.random() < 0.08:  # a retried submission: the first job comes back, 200
            token, job_id = rng.choice(tokens)
            body = {**user["body_for"][token], "client_token": token}
            response = self._call(
                session, "submit-repeat", "POST", f"{base}/api/v1/jobs/", body, expected={200}
            )
            if response is not None and response.status_code == 200 and response.json()["id"] != job_id:
                stats.violation(f"client_token {token} returned job {response.json()['id']}, not {job_id}")
            return
        if rng.random() < 0.05:  # a bad submission: refused with a 400, nothing stored
            body = soak_job_body(rng, user, name)
            body["instance_preferences"][0]["instance_count"] = 10_000
            self._call(session, "submit-invalid", "POST", f"{base}/api/v1/jobs/", body, expected={400})
            return
        body = soak_job_body(rng, user, name)
        token = f"{name}-t" if rng.random() < 0.5 else None
        if token:
            body["client_token"] = token
        started = time.monotonic()
        response = self._call(session, "submit", "POST", f"{base}/api/v1/jobs/", body, expected={201})
        if response is not None and response.status_code == 201:
            job_id = response.json()["id"]
            with stats.lock:
                stats.submit_latency_ms.append((time.monotonic() - started) * 1000)
                stats.submitted[job_id] = user["name"]
            mine.append(job_id)
            if token:
                tokens.append((token, job_id))
                user["body_for"][token] = {k: v for k, v in body.items() if k != "client_token"}
        else:
            with stats.lock:
                stats.failed_submissions += 1

    def _call(self, session, operation: str, method: str, url: str, body=None, *, expected: set[int]):
        started = time.monotonic()
        try:
            response = session.request(method, url, json=body, timeout=REQUEST_TIMEOUT)
        except requests.RequestException as exc:
            self.stats.record(operation, "error")
            self._unexpected(started, f"{operation} {method} {url}: {type(exc).__name__}: {exc}")
            return None
        self.stats.record(operation, response.status_code)
        if response.status_code not in expected:
            self._unexpected(
                started, f"{operation} {method} {url}: {response.status_code} {response.text[:300]}"
            )
        return response

    def _unexpected(self, started: float, message: str) -> None:
        if self.stats.in_fault_window(started):
            with self.stats.lock:
                self.stats.tolerated.append(message)
        else:
            self.stats.violation(message)

    def _external_executor(self, base: str, world: dict, stop: threading.Event) -> None:
        """Reports progress on the external queue as an executor would: STARTING, RUNNING, an outcome, and
        STOPPED for a job asked to stop."""
        session = requests.Session()
        session.headers["Authorization"] = f"Token {world['executor_token']}"
        rng = random.Random(self.options["seed"])
        running_since: dict[int, float] = {}
        while not stop.is_set():
            self.executor_heartbeat = time.monotonic()
            try:
                self._external_round(session, base, rng, running_since)
            except Exception as exc:  # reported, and the executor goes on: a dead one would stall its queue
                self.stats.violation(f"external executor: {type(exc).__name__}: {exc}")
            stop.wait(0.5)

    def _external_round(
        self, session, base: str, rng: random.Random, running_since: dict[int, float]
    ) -> None:
        for status in ("SCHEDULED", "STARTING", "RUNNING", "STOPPING"):
            listing = self._call(
                session,
                "executor-list",
                "GET",
                f"{base}/api/v1/jobs/?job_queue={EXT_QUEUE}&status={status}",
                expected={200},
            )
            if listing is None or listing.status_code != 200:
                continue
            for job in listing.json()["results"]:
                url = f"{base}/api/v1/jobs/{job['id']}/report/"
                if status == "STOPPING":  # asked to stop (a preemption, a drain or a cancel): it has stopped
                    self._call(session, "report", "POST", url, {"status": "STOPPED"}, expected={200, 409})
                    running_since.pop(job["id"], None)
                elif status == "SCHEDULED":
                    self._call(session, "report", "POST", url, {"status": "STARTING"}, expected={200, 409})
                elif status == "STARTING":
                    self._call(session, "report", "POST", url, {"status": "RUNNING"}, expected={200, 409})
                    running_since[job["id"]] = time.monotonic()
                elif time.monotonic() - running_since.setdefault(job["id"], time.monotonic()) >= (
                    job["duration_seconds"] or 1
                ):
                    outcome = "FAILED" if rng.random() < 0.15 else "SUCCEEDED"
                    self._call(
                        session,
                        "report",
                        "POST",
                        url,
                        {"status": outcome, "reason": "soak"},
                        expected={200, 409},
                    )
                    if outcome == "SUCCEEDED" and rng.random() < 0.2:  # a report after the end: 409
                        self._call(
                            session, "report-again", "POST", url, {"status": "RUNNING"}, expected={409}
                        )

    # --- sampling -------------------------------------------------------------------------------------------

    def _sampler(self, world: dict, stop: threading.Event) -> None:
        config = config_load(world["queue_ids"])
        next_at = time.monotonic()
        try:
            while not stop.is_set():
                began = time.monotonic()
                try:
                    found = sample_violations(config, world["queue_ids"], self.stats.stopping)
                except (
                    OperationalError,
                    InterfaceError,
                    DatabaseError,
                ) as exc:  # its connection was terminated
                    connection.close()
                    with self.stats.lock:
                        self.stats.sample_errors += 1
                    self._unexpected(began, f"sample failed: {exc}")
                    found = []
                else:
                    with self.stats.lock:
                        self.stats.samples += 1
                        self.stats.sample_ms.append((time.monotonic() - began) * 1000)
                for message in found:
                    self.stats.violation(f"sample at {timezone.now():%H:%M:%S.%f}: {message}")
                next_at += SAMPLE_SECONDS
                stop.wait(max(0.0, next_at - time.monotonic()))
        finally:
            connection.close()

    # --- faults ---------------------------------------------------------------------------------------------

    def _faults(self, load_over: threading.Event, env: dict) -> None:
        faults = self.options["fault"]
        if not faults:
            return
        at = self.options["fault_at"]
        at = self.options["seconds"] / 3 if at is None else at
        try:
            if load_over.wait(max(0.0, self.load_deadline - self.options["seconds"] + at - time.monotonic())):
                return
            for fault in faults:
                getattr(self, f"_fault_{fault}")(env)
        finally:
            connection.close()

    def _fault_redis(self, env: dict) -> None:
        began = time.monotonic()
        before = self._submissions_ok()
        self.processes.stop("redis", timeout=5)
        load_started = self.load_deadline - self.options["seconds"]
        self.stats.fault_notes.append(f"redis: stopped {began - load_started:.0f} s into the load")
        outage_passes_before = SchedulingPass.objects.count()
        time.sleep(self.options["fault_seconds"])
        during = self._submissions_ok() - before
        passes_during = SchedulingPass.objects.count() - outage_passes_before
        self.processes.start("redis", self.redis_argv, os.environ.copy())
        self.processes.wait(lambda: port_open(self.redis_port), 10, "Redis again")
        back = timezone.now()
        back_clock = time.monotonic()
        resumed = None
        while time.monotonic() - back_clock < 60:
            if SchedulingPass.objects.filter(started_at__gt=back).exists():
                resumed = time.monotonic() - back_clock
                break
            time.sleep(0.2)
        note = (
            f"redis down {self.options['fault_seconds']} s: {during} submissions accepted (201) meanwhile, "
            f"{passes_during} passes meanwhile; "
        )
        if resumed is None:
            self.stats.violation("redis: no scheduling pass within 60 s of Redis coming back")
            note += "passes did NOT resume within 60 s"
        else:
            note += f"first pass {resumed:.1f} s after Redis came back"
        if during == 0:
            self.stats.violation("redis: no submission succeeded while Redis was down")
        self.stats.fault_notes.append(note)

    def _fault_postgres(self, env: dict) -> None:
        began = time.monotonic()
        self.stats.fault_windows.append((began - 1, began + FAULT_GRACE_SECONDS))
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s AND pid <> pg_backend_pid()",
                [self.app_name],
            )
            killed = cursor.fetchone()[0]
        after = timezone.now()
        resumed = None
        while time.monotonic() - began < 60:
            if SchedulingPass.objects.filter(started_at__gt=after).exists():
                resumed = time.monotonic() - began
                break
            time.sleep(0.2)
        submitted_after = self._wait_for_submission_after(began)
        note = f"postgres: terminated {killed} connections of the soak's processes; "
        note += f"first pass {resumed:.1f} s later" if resumed is not None else "no pass within 60 s"
        note += (
            f", first submission accepted {submitted_after:.1f} s later"
            if submitted_after is not None
            else ", no submission accepted within 30 s"
        )
        if resumed is None:
            self.stats.violation(
                "postgres: no scheduling pass within 60 s of the connections being terminated"
            )
        self.stats.fault_notes.append(note)
        time.sleep(max(0.0, began + self.options["fault_seconds"] - time.monotonic()))

    def _fault_worker(self, env: dict) -> None:
        began = time.monotonic()
        killed = 0
        workers = [name for name in self.processes.started if name.startswith("worker")]
        while (
            time.monotonic() - began < self.options["fault_seconds"] and time.monotonic() < self.load_deadline
        ):
            process = self.processes.started[random.choice(workers)]
            for child in children(process.pid):
                os.kill(child, signal.SIGKILL)  # the pool process of a worker this soak started
                killed += 1
            time.sleep(3)
        self.stats.fault_notes.append(
            f"worker: SIGKILLed {killed} Celery pool processes over {time.monotonic() - began:.0f} s"
        )

    def _submissions_ok(self) -> int:
        with self.stats.lock:
            return self.stats.requests[("submit", 201)]

    def _wait_for_submission_after(self, began: float) -> float | None:
        before = self._submissions_ok()
        while time.monotonic() - began < 30:
            if self._submissions_ok() > before:
                return time.monotonic() - began
            time.sleep(0.1)
        return None

    # --- the end --------------------------------------------------------------------------------------------

    def _drain(self, world: dict) -> tuple[str | None, float]:
        """Wait for every job to finish: None once they have, else why the wait ended.

        How long a backlog takes depends on how fast the clients submitted, which depends on the machine; a
        stuck job does not. So the wait goes on while jobs keep finishing, and ends as soon as none has for
        --stall-seconds (a job that should run and does not), or at --drain-seconds in any case.
        """
        began = progressed = time.monotonic()
        unfinished = Job.objects.filter(job_queue_id__in=world["queue_ids"], status__in=UNFINISHED_STATUSES)
        left = None
        while True:
            now = time.monotonic()
            if now - began >= self.options["drain_seconds"]:
                return f"the queues did not drain within {self.options['drain_seconds']} s", now - began
            if now - progressed >= self.options["stall_seconds"]:
                return (
                    f"the drain stalled: no job finished for {self.options['stall_seconds']} s "
                    f"({now - began:.0f} s into the drain)"
                ), now - began
            try:
                count = unfinished.count()
            except (OperationalError, InterfaceError):
                connection.close()
            else:
                if count == 0:
                    return None, now - began
                if left is None or count < left:
                    progressed = now
                left = count
            time.sleep(1)

    def _broker_backlog(self, broker: str) -> int | None:
        import redis

        try:
            return redis.Redis.from_url(broker, socket_connect_timeout=2, socket_timeout=2).llen("celery")
        except redis.RedisError:
            return None

    def _agent_checks(self, world: dict) -> None:
        """With agents: from the jobs' own notes, no slot held by two live processes at once, and no capacity
        held past the start deadline by an attempt nobody started."""
        slots_log = getattr(self, "slots_log", None)
        lines = slots_log.read_text().splitlines() if slots_log is not None and slots_log.exists() else []
        external = list(
            JobAttempt.objects.filter(job__job_queue__name=EXT_QUEUE)
            .order_by("id")
            .values("job_id", "attempt", "scheduled_at", "stopped_at")
        )
        ends = {(a["job_id"], a["attempt"]): a["stopped_at"] for a in external}
        found = slot_violations(lines, ends, time.time()) + unstarted_hold_violations(
            external, lines, timezone.now()
        )
        for message in found[:50]:
            self.stats.violation(message)
        self.stats.agent_notes = {
            "processes": sum(1 for line in lines if " start " in line),
            "tasks": JobTask.objects.filter(job__job_queue__name=EXT_QUEUE).count(),
            "start_timeouts": Event.objects.filter(
                job__job_queue__name=EXT_QUEUE, kind="START_TIMEOUT"
            ).count(),
            "tasks_lost": Event.objects.filter(job__job_queue__name=EXT_QUEUE, kind="TASK_LOST").count(),
            "violations": len(found),
        }

    def _final_checks(
        self, world: dict, started_at, load_seconds: float, drain_seconds: float, backlog: int | None
    ) -> dict:
        stats = self.stats
        queue_ids = world["queue_ids"]
        config = config_load(queue_ids)
        jobs = {
            row["id"]: row
            for row in Job.objects.filter(job_queue_id__in=queue_ids).values("id", "status", "quota_share_id")
        }
        unknown = set(stats.submitted) - set(jobs)
        if unknown:
            stats.violation(
                f"{len(unknown)} jobs the API accepted are not in the database: {sorted(unknown)[:10]}"
            )
        unacknowledged = len(set(jobs) - set(stats.submitted))
        if unacknowledged > stats.failed_submissions:
            stats.violation(
                f"{unacknowledged} jobs in the database that no client was told about "
                f"(only {stats.failed_submissions} submissions failed client-side)"
            )
        events: dict[int, list[str]] = defaultdict(list)
        kinds: Counter = Counter()
        for job_id, kind in (
            Event.objects.filter(job_id__in=jobs).order_by("id").values_list("job_id", "kind")
        ):
            events[job_id].append(kind)
            kinds[kind] += 1
        attempts: dict[int, list[dict]] = defaultdict(list)
        all_attempts = list(
            JobAttempt.objects.filter(job_id__in=jobs)
            .order_by("id")
            .values(
                "job_id",
                "instance_type_id",
                "instance_count",
                "training_plan_id",
                "scheduled_at",
                "stopped_at",
            )
        )
        for attempt in all_attempts:
            attempts[attempt["job_id"]].append(attempt)
        histories_broken = 0
        for job_id, job in jobs.items():
            found = history_violations(job, events[job_id], attempts[job_id])
            histories_broken += bool(found)
            for message in found:
                stats.violation(message)
        replay, change_points = replay_violations(
            config, all_attempts, {job_id: job["quota_share_id"] for job_id, job in jobs.items()}
        )
        if self.options["agents"]:
            self._agent_checks(world)
        for message in replay[:50]:
            stats.violation(message)
        if len(replay) > 50:
            stats.violation(f"... and {len(replay) - 50} more replay violations")
        passes = list(
            SchedulingPass.objects.filter(job_queue_id__in=queue_ids, started_at__gte=started_at).values_list(
                "duration_ms", "trigger"
            )
        )
        durations = [duration for duration, _ in passes]
        requests_total = sum(stats.requests.values())
        submits = [n for (op, code), n in stats.requests.items() if op == "submit" and code == 201]
        statuses = Counter()
        for (_, code), n in stats.requests.items():
            statuses[str(code)] += n
        return {
            "options": {
                k: self.options[k]
                for k in (
                    "seconds",
                    "clients",
                    "workers",
                    "jobs",
                    "web_workers",
                    "fault",
                    "agents",
                    "mixed_agents",
                )
            },
            "load_seconds": round(load_seconds, 1),
            "requests": requests_total,
            "requests_per_second": round(requests_total / load_seconds, 1) if load_seconds else 0,
            "submissions": sum(submits),
            "submissions_per_second": round(sum(submits) / load_seconds, 1) if load_seconds else 0,
            "by_operation": dict(
                sorted(sum((Counter({op: n}) for (op, _), n in stats.requests.items()), Counter()).items())
            ),
            "operations": {f"{op} {code}": n for (op, code), n in sorted(stats.requests.items(), key=str)},
            "statuses": dict(sorted(statuses.items())),
            "submit_latency_ms": {
                "p50": round(percentile(stats.submit_latency_ms, 0.5), 1),
                "p99": round(percentile(stats.submit_latency_ms, 0.99), 1),
                "max": round(max(stats.submit_latency_ms, default=0), 1),
            },
            "jobs": dict(sorted(Counter(job["status"] for job in jobs.values()).items())),
            "jobs_total": len(jobs),
            "passes": len(passes),
            "passes_by_trigger": dict(sorted(Counter(trigger for _, trigger in passes).items())),
            "pass_ms": {
                "p50": round(percentile(durations, 0.5), 1),
                "p99": round(percentile(durations, 0.99), 1),
                "max": round(max(durations, default=0), 1),
            },
            "events": dict(sorted(kinds.items())),
            "samples_with_stopping_jobs": self.stats.stopping["stopping_samples"],
            "stopping_jobs_sampled": self.stats.stopping["stopping_jobs"],
            "attempts": len(all_attempts),
            "samples": stats.samples,
            "sample_ms": {
                "p50": round(percentile(stats.sample_ms, 0.5), 1),
                "max": round(max(stats.sample_ms, default=0), 1),
            },
            "sample_errors": stats.sample_errors,
            "replay_change_points": change_points,
            "histories_checked": len(jobs),
            "histories_broken": histories_broken,
            "drain_seconds": round(drain_seconds, 1),
            "broker_backlog_at_end": backlog,
            "faults": stats.fault_notes,
            "tolerated_in_fault_windows": len(stats.tolerated),
            "violations": stats.violations,
            "agents": stats.agent_notes,
            "log_dir": str(self.log_dir),
        }

    def _report(self, r: dict) -> None:
        write = self.stdout.write
        o = r["options"]
        write(
            f"\nquotaportal soak: {r['load_seconds']} s load, {o['clients']} clients, {o['workers']} Celery "
            f"workers + beat, gunicorn x{o['web_workers']}, faults: {', '.join(o['fault']) or 'none'}, "
            + (
                f"{o['agents']} {'mixed ' if o.get('mixed_agents') else ''}agents on the external queue"
                if o.get("agents")
                else "the external queue's fake executor"
            )
        )
        rows = [
            (
                "requests",
                f"{r['requests']} ({r['requests_per_second']}/s); "
                + ", ".join(f"{op} {n}" for op, n in r["by_operation"].items()),
            ),
            ("HTTP statuses", ", ".join(f"{code}: {n}" for code, n in r["statuses"].items())),
            ("submissions", f"{r['submissions']} accepted ({r['submissions_per_second']}/s)"),
            (
                "submit latency",
                f"p50 {r['submit_latency_ms']['p50']} ms, p99 {r['submit_latency_ms']['p99']} ms, "
                f"max {r['submit_latency_ms']['max']} ms",
            ),
            ("jobs", f"{r['jobs_total']}: " + ", ".join(f"{s} {n}" for s, n in r["jobs"].items())),
            (
                "passes",
                f"{r['passes']} ("
                + ", ".join(f"{t} {n}" for t, n in r["passes_by_trigger"].items())
                + f"); duration p50 {r['pass_ms']['p50']} ms, p99 {r['pass_ms']['p99']} ms, "
                f"max {r['pass_ms']['max']} ms",
            ),
            ("events", ", ".join(f"{k} {n}" for k, n in r["events"].items())),
            (
                "samples",
                f"{r['samples']} every {SAMPLE_SECONDS} s in REPEATABLE READ, "
                f"p50 {r['sample_ms']['p50']} ms, "
                f"max {r['sample_ms']['max']} ms, {r['sample_errors']} failed; "
                f"{r['samples_with_stopping_jobs']} with STOPPING jobs (counted with their capacity)",
            ),
            ("replay", f"{r['attempts']} attempts, {r['replay_change_points']} change points checked"),
            ("histories", f"{r['histories_checked']} checked, {r['histories_broken']} inconsistent"),
            ("drain", f"{r['drain_seconds']} s; pass tasks left in the broker: {r['broker_backlog_at_end']}"),
        ]
        if r.get("agents"):
            a = r["agents"]
            rows.append(
                (
                    "agents",
                    f"{a['processes']} processes ({a['tasks']} tasks of jobs run as tasks), "
                    f"{a['start_timeouts']} start timeouts, {a['tasks_lost']} tasks lost; slots and unstarted "
                    f"holds checked from the processes' notes: {a['violations']} violations",
                )
            )
        rows += [("fault", note) for note in r["faults"]]
        if r["faults"]:
            rows.append(
                ("tolerated", f"{r['tolerated_in_fault_windows']} failed requests inside fault windows")
            )
        rows.append(("violations", str(len(r["violations"]))))
        width = max(len(label) for label, _ in rows)
        for label, value in rows:
            write(f"  {label:<{width}}  {value}")
        for message in r["violations"][:40]:
            write(self.style.ERROR(f"  VIOLATION {message}"))
        write(self.style.SUCCESS("RESULT: PASS") if not r["violations"] else self.style.ERROR("RESULT: FAIL"))
        if self.options["json"]:
            Path(self.options["json"]).write_text(json.dumps(r, indent=2, default=str))


# --- the soak's world ---------------------------------------------------------------------------------------


def sample_violations(config: Config, queue_ids: list[int], seen: Counter | None = None) -> list[str]:
    """One consistent reading of the placed jobs and open attempts, checked against SPEC 2.

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


def soak_clean() -> None:
    """Remove what an earlier soak left: its queues with their jobs, shares and plans; types, teams, users."""
    queues = JobQueue.objects.filter(name__startswith=PREFIX)
    Event.objects.filter(job_queue__in=queues).delete()
    Event.objects.filter(job__job_queue__in=queues).delete()
    # Events and jobs keep their team for good (PROTECT), even those whose queue is gone.
    Event.objects.filter(team__slug__startswith=PREFIX).delete()
    Job.objects.filter(job_queue__in=queues).delete()
    Job.objects.filter(team__slug__startswith=PREFIX).delete()
    environments = list(queues.values_list("service_environment_id", flat=True))
    queues.delete()
    ServiceEnvironment.objects.filter(pk__in=environments).delete()
    ServiceEnvironment.objects.filter(name__startswith=PREFIX).delete()
    InstanceType.objects.filter(name__startswith="soak.").delete()
    Team.objects.filter(slug__startswith=PREFIX).delete()
    get_user_model().objects.filter(username__startswith=PREFIX).delete()


def soak_setup(*, clients: int) -> dict:
    """The soak's queues (one `simulated`, one `external`), shares, plan, teams, users and tokens."""
    types = {key: InstanceType.objects.create(name=name, gpu_count=8) for key, name in TYPES.items()}
    teams = {
        slug: Team.objects.create(name=slug, slug=slug) for slug in ("soak-a", "soak-b", "soak-c", "soak-d")
    }
    queues, shares = {}, {}
    for queue_name, executor, capacity, share_specs in (
        (SIM_QUEUE, ServiceEnvironment.Executor.SIMULATED, SIM_CAPACITY, SIM_SHARES),
        (EXT_QUEUE, ServiceEnvironment.Executor.EXTERNAL, EXT_CAPACITY, EXT_SHARES),
    ):
        fields = {"name": f"{queue_name}-env", "executor": executor}
        if executor == ServiceEnvironment.Executor.EXTERNAL:
            fields["start_deadline_seconds"] = EXT_START_DEADLINE_SECONDS
        environment = config_services.service_environment_create(
            fields=fields,
            limits=[rules.LimitInput(types[key], n) for key, n in capacity.items()],
            actor=None,
        )
        queues[queue_name] = config_services.config_object_create(
            model=JobQueue, fields={"name": queue_name, "service_environment": environment}, actor=None
        )
        for name, team, strategy, borrow_limit, preemption, limits in share_specs:
            shares[name] = config_services.quota_share_create(
                fields={
                    "name": name,
                    "job_queue": queues[queue_name],
                    "team": teams[team],
                    "strategy": strategy,
                    "borrow_limit": borrow_limit,
                    "in_share_preemption": preemption,
                },
                limits=[rules.LimitInput(types[key], n) for key, n in limits.items()],
                actor=None,
            )
    plan_name, plan_type, plan_count, plan_shares = PLAN
    now = timezone.now()
    config_services.training_plan_create(
        fields={
            "name": plan_name,
            "job_queue": queues[SIM_QUEUE],
            "instance_type": types[plan_type],
            "instance_count": plan_count,
            "start_time": now - timedelta(hours=1),
            "end_time": now + timedelta(days=2),
        },
        quota_shares=[shares[name] for name in plan_shares],
        actor=None,
    )
    User = get_user_model()
    executor = User.objects.create_user(username=f"{PREFIX}executor")
    executor.user_permissions.add(Permission.objects.get(codename="report_job_status"))
    queues[EXT_QUEUE].service_environment.executor_accounts.add(executor)  # the agents serve the external one
    # Each job asks for at most its share's limit of a type, so every submission could run on its own.
    team_shares: dict[str, list[tuple[str, str, dict]]] = defaultdict(list)
    for queue_name, specs in ((SIM_QUEUE, SIM_SHARES), (EXT_QUEUE, EXT_SHARES)):
        for name, team, *_, limits in specs:
            team_shares[team].append((queue_name, name, limits))
    users = []
    slugs = sorted(teams)
    for i in range(clients):
        slug = slugs[i % len(slugs)]
        user = User.objects.create_user(username=f"{PREFIX}u{i}")
        Membership.objects.create(team=teams[slug], user=user, role=Membership.Role.MEMBER)
        users.append(
            {
                "name": user.username,
                "token": Token.objects.create(user=user).key,
                "shares": team_shares[slug],
                "body_for": {},
            }
        )
    return {
        "queue_ids": [queues[SIM_QUEUE].pk, queues[EXT_QUEUE].pk],
        "clients": users,
        "executor_token": Token.objects.create(user=executor).key,
        "ext_environment_id": queues[EXT_QUEUE].service_environment_id,
    }


def soak_job_body(rng: random.Random, user: dict, name: str) -> dict:
    """A valid submission to a share of the user's team: 1 to 3 entries, small counts, a short duration."""
    # The external queue gets a fifth of a team's submissions: its executor is one thread of HTTP reports, and
    # a queue loaded past what it can finish would never drain.
    external = [entry for entry in user["shares"] if entry[0] == EXT_QUEUE]
    if external and rng.random() < 0.2:
        queue, share, ceilings = rng.choice(external)
    else:
        queue, share, ceilings = rng.choice([entry for entry in user["shares"] if entry[0] == SIM_QUEUE])
    keys = list(ceilings)
    rng.shuffle(keys)
    entries = []
    if queue == SIM_QUEUE and share in PLAN[3] and rng.random() < 0.3:
        entries.append(
            {"instance_type": TYPES[PLAN[1]], "instance_count": rng.randint(1, 2), "training_plan": PLAN[0]}
        )
    for key in keys[: rng.randint(1, 3) - len(entries) or 1]:
        entries.append({"instance_type": TYPES[key], "instance_count": rng.randint(1, min(3, ceilings[key]))})
    body = {
        "name": name,
        "job_queue": queue,
        "quota_share": share,
        "instance_preferences": entries,
        "scheduling_priority": rng.choice([0, 0, 10, 50, 100]),
        "duration_seconds": rng.randint(1, 5 if queue == SIM_QUEUE else 3),
        "retry_attempts": rng.choice([1, 1, 2]),
        "payload": {"soak": True, "n": rng.randint(0, 1000)},
    }
    if queue == EXT_QUEUE:
        # What an agent (--agents) runs: a process for the job's duration; about one in seven exits 3.
        code = 3 if body["payload"]["n"] % 7 == 0 else 0
        program = SLOT_PROGRAM.format(seconds=body["duration_seconds"], code=code)
        body["payload"]["command"] = ["python3", "-c", program]
    if rng.random() < 0.1:
        body["max_pending_seconds"] = rng.randint(5, 30)
    if rng.random() < 0.2:
        body["preemption_retries_before_termination"] = rng.randint(0, 2)
    return body
