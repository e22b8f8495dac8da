"""Where a replay's inputs come from on the Django side: the live configuration of a queue, its recorded job
history, and the Philly trace mapped onto a queue's own shares and instance types.

The simulator (`simulator`) is pure Python and knows nothing of the database; the `replay` command
and the what-if page both read their inputs through this module.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import Prefetch
from django.utils import timezone

from engine import BudgetPeriod, BudgetScope, Entry, IdleCapacityAssignment, Ordering, Strategy
from engine.submission import MAX_PREFERENCES
from scheduling.models import (
    EnvironmentCapacity,
    InstanceType,
    Job,
    JobAttempt,
    JobPreference,
    JobQueue,
    JobStatus,
    QuotaShare,
    ServiceEnvironment,
    ShareCapacityLimit,
    State,
    TrainingPlan,
)
from simulator import Configuration, ConfigurationError, PlanConfig, ShareConfig, SimJob
from simulator import philly as philly_mapping
from simulator.config import (
    DEFAULT_MAX_RELOCATIONS_PER_PASS,
    DEFAULT_RELOCATION_MIN_RUNTIME_SECONDS,
    BudgetConfig,
    entry_problem,
    validate,
)
from simulator.trace import TraceRow, read_philly, read_philly_vcs

DEFAULT_TRACE = Path(settings.REPLAY_TRACE)


def philly_trace() -> Path:
    """The Philly trace the pages read (REPLAY_TRACE), with philly_vc.csv beside it."""
    return Path(settings.REPLAY_TRACE)


# --- the live configuration ------------------------------------------------------------------------------


def simulated_stop_seconds(environment: ServiceEnvironment) -> int:
    """How long a job the replay stops keeps its capacity, as the environment's executor takes.

    An external executor may take the whole `stop_grace_seconds` (SIGTERM to SIGKILL), so the replay
    assumes it does; the simulated executor stops a job SIMULATED_STOP_SECONDS after it was asked to, never
    after the grace period. A queue has one environment, so there is nothing to choose between.
    """
    if environment.executor == ServiceEnvironment.Executor.SIMULATED:
        return min(settings.SIMULATED_STOP_SECONDS, environment.stop_grace_seconds)
    return environment.stop_grace_seconds


def live_configuration(queue: JobQueue) -> Configuration:
    """The queue's capacity, shares (with their database ids), training plans and stop time as they are.
    6 queries, and one more unless the queue came with its service environment."""
    shares = list(
        QuotaShare.objects.filter(job_queue=queue)
        .prefetch_related(
            Prefetch("capacity_limits", queryset=ShareCapacityLimit.objects.select_related("instance_type"))
        )
        .order_by("id")
    )
    capacity = dict(
        EnvironmentCapacity.objects.filter(service_environment_id=queue.service_environment_id).values_list(
            "instance_type__name", "max_capacity"
        )
    )
    plans = (
        TrainingPlan.objects.filter(job_queue=queue)
        .select_related("instance_type")
        .prefetch_related("quota_shares")
        .order_by("id")
    )
    config = Configuration(
        name=f"live-{queue.name}",
        description=f"queue {queue.name} as configured at {timezone.now():%Y-%m-%d %H:%M} UTC",
        capacity=capacity,
        shares=tuple(
            ShareConfig(
                name=share.name,
                strategy=Strategy(share.strategy),
                limits={
                    limit.instance_type.name: limit.max_capacity for limit in share.capacity_limits.all()
                },
                borrow_limit=share.borrow_limit,
                in_share_preemption=share.in_share_preemption,
                enabled=share.state == State.ENABLED,
                lending_limits={
                    limit.instance_type.name: limit.lending_limit
                    for limit in share.capacity_limits.all()
                    if limit.lending_limit is not None
                },
                fair_share_weight=share.fair_share_weight,
                budget=(
                    BudgetConfig(
                        gpu_hours=share.budget_gpu_hours,
                        period=BudgetPeriod(share.budget_period),
                        scope=BudgetScope(share.budget_scope),
                    )
                    if share.budget_gpu_hours is not None
                    else None
                ),
            )
            for share in shares
        ),
        plans=tuple(
            PlanConfig(
                name=plan.name,
                instance_type=plan.instance_type.name,
                instance_count=plan.instance_count,
                start=plan.start_time.timestamp(),
                end=plan.end_time.timestamp(),
                shares=tuple(sorted(share.name for share in plan.quota_shares.all())),
            )
            for plan in plans
        ),
        ordering=Ordering(queue.ordering),
        plan_drain_seconds=settings.PLAN_DRAIN_SECONDS,
        gpus=dict(InstanceType.objects.values_list("name", "gpu_count")),
        share_ids={share.name: share.pk for share in shares},
        idle_capacity_assignment=IdleCapacityAssignment(queue.idle_capacity_assignment),
        preemption_min_runtime_seconds=queue.preemption_min_runtime_seconds,
        stop_seconds=simulated_stop_seconds(queue.service_environment),
        relocation_min_runtime_seconds=queue.relocation_min_runtime_seconds,
        max_relocations_per_pass=settings.MAX_RELOCATIONS_PER_PASS,
    )
    return validate(config)


def configuration_mapping(config: Configuration) -> dict[str, Any]:
    """A configuration as the JSON-ready mapping `simulator.config.configuration_from_mapping` reads back.

    What a what-if run stores as its baseline, and compares with the live queue before applying a proposal.
    Only what shapes a replay is kept (no description, no database ids).
    """
    mapping = {
        "name": config.name,
        "capacity": dict(sorted(config.capacity.items())),
        "instance_types": {name: config.gpus_of(name) for name in sorted(config.capacity)},
        "ordering": str(config.ordering),
        "plan_drain_seconds": config.plan_drain_seconds,
        "shares": [_share_mapping(share) for share in config.shares],
        "plans": [
            {
                "name": plan.name,
                "instance_type": plan.instance_type,
                "instance_count": plan.instance_count,
                "start": datetime.fromtimestamp(plan.start, UTC).isoformat(),
                "end": datetime.fromtimestamp(plan.end, UTC).isoformat(),
                "shares": list(plan.shares),
            }
            for plan in config.plans
        ],
    }
    # Issue 17's settings only when set, so that a run stored before them still reads as the same queue.
    if config.idle_capacity_assignment != IdleCapacityAssignment.FIFO:
        mapping["idle_capacity_assignment"] = str(config.idle_capacity_assignment)
    if config.preemption_min_runtime_seconds:
        mapping["preemption_min_runtime_seconds"] = config.preemption_min_runtime_seconds
    if config.stop_seconds:
        mapping["stop_seconds"] = config.stop_seconds
    # Relocation's settings likewise only when not the defaults.
    if config.relocate:
        mapping["relocate"] = True
    if config.relocation_min_runtime_seconds != DEFAULT_RELOCATION_MIN_RUNTIME_SECONDS:
        mapping["relocation_min_runtime_seconds"] = config.relocation_min_runtime_seconds
    if config.max_relocations_per_pass != DEFAULT_MAX_RELOCATIONS_PER_PASS:
        mapping["max_relocations_per_pass"] = config.max_relocations_per_pass
    return mapping


def _share_mapping(share: ShareConfig) -> dict[str, Any]:
    mapping = {
        "name": share.name,
        "strategy": str(share.strategy),
        "limits": dict(sorted(share.limits.items())),
        "borrow_limit": share.borrow_limit,
        "in_share_preemption": share.in_share_preemption,
        "enabled": share.enabled,
    }
    if share.lending_limits:
        mapping["lending_limits"] = dict(sorted(share.lending_limits.items()))
    if share.fair_share_weight != 1:
        mapping["fair_share_weight"] = str(share.fair_share_weight)
    if share.budget is not None:
        mapping["budget"] = {
            "gpu_hours": format(share.budget.gpu_hours.normalize(), "f"),
            "period": str(share.budget.period),
            "scope": str(share.budget.scope),
        }
    return mapping


def configuration_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What differs between two configuration mappings, in words (`share vision: strategy, limits`)."""
    changes = []
    for type_ in sorted(set(before["capacity"]) | set(after["capacity"])):
        old, new = before["capacity"].get(type_), after["capacity"].get(type_)
        if old != new:
            changes.append(
                f"capacity of {type_}: {old if old is not None else 'none'} -> "
                f"{new if new is not None else 'none'}"
            )
    old_shares = {share["name"]: share for share in before["shares"]}
    new_shares = {share["name"]: share for share in after["shares"]}
    for name in sorted(set(old_shares) - set(new_shares)):
        changes.append(f"share {name} was removed")
    for name in sorted(set(new_shares) - set(old_shares)):
        changes.append(f"share {name} was added")
    for name in [share["name"] for share in before["shares"] if share["name"] in new_shares]:
        fields = sorted(
            key
            for key in set(old_shares[name]) | set(new_shares[name])
            if old_shares[name].get(key) != new_shares[name].get(key)
        )
        if fields:
            changes.append(f"share {name}: {', '.join(fields)}")
    if before["plans"] != after["plans"]:
        changes.append("training plans")
    for key in (
        "ordering",
        "plan_drain_seconds",
        "instance_types",
        "idle_capacity_assignment",
        "preemption_min_runtime_seconds",
    ):
        if before.get(key) != after.get(key):
            changes.append(key.replace("_", " "))
    return changes


def changes_since(queue: JobQueue, baseline: dict[str, Any]) -> list[str]:
    """What differs between the queue now and `baseline` (a configuration mapping), in words; [] if none."""
    try:
        live = configuration_mapping(live_configuration(queue))
    except ConfigurationError as error:
        return [str(error)]
    return configuration_changes(baseline, {**live, "name": baseline["name"]})


# --- recorded job history --------------------------------------------------------------------------------


def history_jobs(*, queue: JobQueue, start: datetime | None, end: datetime | None) -> list[SimJob]:
    """The queue's jobs submitted in the window, as they were submitted (see docs/replay.md for the run time rule)."""
    jobs = Job.objects.filter(job_queue=queue)
    if start:
        jobs = jobs.filter(created_at__gte=start)
    if end:
        jobs = jobs.filter(created_at__lt=end)
    rows = list(
        jobs.order_by("id").values_list(
            "id",
            "quota_share__name",
            "created_at",
            "scheduling_priority",
            "max_pending_seconds",
            "preemption_retries_before_termination",
            "duration_seconds",
            "status",
            "stopped_at",
            "relocate",
        )
    )
    ids = [row[0] for row in rows]
    entries: dict[int, list[Entry]] = {}
    for job_id, type_name, count, plan_name in (
        JobPreference.objects.filter(job_id__in=ids)
        .order_by("job_id", "position")
        .values_list("job_id", "instance_type__name", "instance_count", "training_plan__name")
    ):
        entries.setdefault(job_id, []).append(Entry(type_name, count, plan_name))
    last_attempt: dict[int, tuple] = {}
    for job_id, scheduled_at, stopped_at in (
        JobAttempt.objects.filter(job_id__in=ids)
        .order_by("job_id", "scheduled_at", "id")
        .values_list("job_id", "scheduled_at", "stopped_at")
    ):
        last_attempt[job_id] = (scheduled_at, stopped_at)
    result = []
    for (
        job_id,
        share,
        created_at,
        priority,
        max_pending,
        retries,
        duration_seconds,
        status,
        stopped_at,
        relocate,
    ) in rows:
        duration = None
        attempt = last_attempt.get(job_id)
        if status == JobStatus.SUCCEEDED and attempt and attempt[1]:
            duration = (attempt[1] - attempt[0]).total_seconds()
        elif duration_seconds is not None:
            duration = float(duration_seconds)
        cancelled_at = stopped_at.timestamp() if status == JobStatus.CANCELLED and stopped_at else None
        result.append(
            SimJob(
                id=job_id,
                share=share,
                submitted_at=created_at.timestamp(),
                entries=tuple(entries.get(job_id, ())),
                duration=duration,
                priority=priority,
                max_pending_seconds=max_pending,
                preemption_retries_before_termination=retries,
                cancelled_at=cancelled_at,
                relocate=relocate,
            )
        )
    return result


# --- the Philly trace, on a queue's own shares --------------------------------------------------------------
#
# The `replay` command gives the trace its own shares (one per Philly VC). The what-if page compares two
# configurations of a real queue instead, so the trace's jobs are put on that queue's shares and instance
# types: the trace supplies the shape of the workload (arrivals, bursts, run times, sizes), the queue the
# shares it lands on. See docs/replay.md, "What-if page".

ENTRIES_PER_TRACE_JOB = 3


def philly_vc_file(trace: Path) -> Path:
    return trace.with_name("philly_vc.csv")


@lru_cache(maxsize=4)
def _trace_span(path: str, modified: float) -> tuple[datetime, datetime]:
    rows = read_philly(path)
    if not rows:
        raise ValueError(f"{path} holds no jobs")
    return (
        datetime.fromtimestamp(rows[0].submitted_at, UTC),
        datetime.fromtimestamp(rows[-1].submitted_at, UTC),
    )


def philly_trace_span(trace: Path) -> tuple[datetime, datetime]:
    """When the trace's first and last jobs were submitted (read once per file version and process)."""
    return _trace_span(str(trace), trace.stat().st_mtime)


def vc_assignment(vcs: Mapping[str, int], shares: Sequence[ShareConfig]) -> dict[str, str]:
    """Philly VC -> share: the VCs by quota (largest first) dealt in turn to the enabled shares, in the
    queue's order. It reads the shares' names and order, never their limits or strategies, so the two
    configurations compared side by side see the same jobs on the same shares."""
    names = [share.name for share in shares if share.enabled] or [share.name for share in shares]
    order = sorted(vcs, key=lambda vc: (-vcs[vc], vc))
    return {vc: names[i % len(names)] for i, vc in enumerate(order)}


def entries_for(num_gpus: int, types: Mapping[str, int]) -> list[Entry]:
    """The preference list of a job asking for `num_gpus` GPUs: the queue's GPU instance types that hold
    them with the fewest idle GPUs, then the fewest instances, at most ENTRIES_PER_TRACE_JOB of them."""
    candidates = []
    for name, gpus in types.items():
        if gpus <= 0:
            continue
        count = math.ceil(num_gpus / gpus)
        candidates.append((count * gpus - num_gpus, count, name))
    candidates.sort()
    return [Entry(name, count) for _, count, name in candidates[:ENTRIES_PER_TRACE_JOB]]


def trace_keep_fraction(capacity_gpus: float, vcs: Mapping[str, int]) -> float:
    """The share of Philly jobs kept so the queue sees the pressure of the Philly study in docs/replay.md: there the
    shares got `DEFAULT_CAPACITY_SCALE` of the VCs' quota; here the queue's GPUs stand for that capacity."""
    philly_gpus = sum(vcs.values()) * philly_mapping.GPUS_PER_NODE * philly_mapping.DEFAULT_CAPACITY_SCALE
    return min(1.0, capacity_gpus / philly_gpus) if philly_gpus else 1.0


@dataclass(frozen=True)
class PhillyWindow:
    rows: list[TraceRow]  # the jobs submitted in the window, by submission time
    vcs: dict[str, int]  # every VC -> the nodes it was entitled to (1 for a VC missing from philly_vc.csv)


def read_philly_window(trace: Path, *, start: datetime, end: datetime) -> PhillyWindow:
    rows = read_philly(trace, start=start, end=end)
    vcs = read_philly_vcs(philly_vc_file(trace))
    for row in rows:
        vcs.setdefault(row.vc, 1)
    return PhillyWindow(rows=rows, vcs=vcs)


def philly_jobs_for_queue(
    window: PhillyWindow, configuration: Configuration, *, seed: int = 1
) -> list[SimJob]:
    """The window's Philly jobs on the configuration's shares and instance types.

    Deterministic for a trace, window and seed, and the same jobs for any configuration with the same shares
    and capacity; only the entries a configuration could never run are left out (as a user would leave them
    out), a job left with none keeping its first and being rejected, as in `philly.philly_jobs`.
    """
    keep = trace_keep_fraction(configuration.capacity_gpus(), window.vcs)
    share_of = vc_assignment(window.vcs, configuration.shares)
    types = {name: configuration.gpus_of(name) for name in sorted(configuration.capacity)}
    jobs = []
    for row in window.rows:
        if random.Random(f"quotaportal-whatif:{seed}:{row.line}").random() >= keep:
            continue
        wanted = entries_for(row.num_gpus, types)
        if not wanted:
            continue
        share = configuration.share(share_of[row.vc])
        runnable = [e for e in wanted if entry_problem(configuration, share, e, row.submitted_at) is None]
        u_priority, _, _ = philly_mapping.synthetic_draws(seed, row.line)
        jobs.append(
            SimJob(
                id=row.line,
                share=share.name,
                submitted_at=row.submitted_at,
                entries=tuple((runnable or wanted[:1])[:MAX_PREFERENCES]),
                duration=row.duration,
                priority=philly_mapping.priority_of(u_priority),
                gpus=row.num_gpus,
            )
        )
    return jobs
