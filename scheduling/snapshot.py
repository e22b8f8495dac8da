"""The one translation between the database and the engine: ORM rows -> Snapshot, Decisions -> rows.

`snapshot_load` reads a queue in a constant number of queries whatever the number of jobs; `pass_execute`
runs the engine on it and writes every decision with bulk statements. Both expect the caller to hold the
queue's row lock inside one transaction (see `services.queue_pass_run`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import connection

from scheduling import engine
from scheduling.engine import types as et
from scheduling.models import (
    UNFINISHED_STATUSES,
    EnvironmentCapacity,
    Event,
    EventKind,
    InstanceType,
    Job,
    JobAttempt,
    JobPreference,
    JobQueue,
    JobStatus,
    QuotaShare,
    SchedulingPass,
    ShareCapacityLimit,
    State,
    TrainingPlan,
)

_JOB_COLUMNS = (
    "id", "name", "quota_share_id", "scheduling_priority", "created_at", "status", "selected_instance_type_id",
    "selected_instance_count", "selected_training_plan_id", "scheduled_at", "runnable_since",
    "max_pending_seconds", "preemption_count", "preemption_retries_before_termination", "status_reason",
    "queue_position", "borrowed_instances",
)


@dataclass
class Index:
    """What the writer needs beside the snapshot: names <-> ids and each job's current row."""

    type_ids: dict[str, int]
    type_names: dict[int, str]
    plan_ids: dict[str, int]
    share_names: dict[int, str]
    jobs: dict[int, dict] = field(default_factory=dict)


def snapshot_load(*, job_queue: JobQueue, now: datetime) -> tuple[et.Snapshot, Index]:
    """Read one queue into an engine Snapshot in 8 queries, whatever the number of jobs."""
    type_names = dict(InstanceType.objects.values_list("id", "name"))
    capacity = {
        type_names[type_id]: maximum
        for type_id, maximum in EnvironmentCapacity.objects.filter(
            service_environment_id=job_queue.service_environment_id
        ).values_list("instance_type_id", "max_capacity")
    }
    limits: dict[int, dict[str, int]] = {}
    for share_id, type_id, maximum in ShareCapacityLimit.objects.filter(
        quota_share__job_queue_id=job_queue.pk
    ).values_list("quota_share_id", "instance_type_id", "max_capacity"):
        limits.setdefault(share_id, {})[type_names[type_id]] = maximum
    shares = tuple(
        et.Share(
            id=row["id"], name=row["name"], strategy=et.Strategy(row["strategy"]), limits=limits.get(row["id"], {}),
            borrow_limit=row["borrow_limit"], in_share_preemption=row["in_share_preemption"],
            enabled=row["state"] == State.ENABLED,
        )
        for row in QuotaShare.objects.filter(job_queue_id=job_queue.pk)
        .values("id", "name", "strategy", "borrow_limit", "in_share_preemption", "state").order_by("id")
    )
    plan_shares: dict[int, set[int]] = {}
    for plan_id, share_id in TrainingPlan.quota_shares.through.objects.filter(
        trainingplan__job_queue_id=job_queue.pk
    ).values_list("trainingplan_id", "quotashare_id"):
        plan_shares.setdefault(plan_id, set()).add(share_id)
    plan_rows = list(
        TrainingPlan.objects.filter(job_queue_id=job_queue.pk)
        .values("id", "name", "instance_type_id", "instance_count", "start_time", "end_time").order_by("id")
    )
    plan_names = {row["id"]: row["name"] for row in plan_rows}
    plans = tuple(
        et.Plan(
            id=row["id"], name=row["name"], instance_type=type_names[row["instance_type_id"]],
            instance_count=row["instance_count"], start_time=row["start_time"], end_time=row["end_time"],
            share_ids=frozenset(plan_shares.get(row["id"], ())),
        )
        for row in plan_rows
    )
    entries: dict[int, list[et.Entry]] = {}
    for job_id, type_id, count, plan_id in JobPreference.objects.filter(
        job__job_queue_id=job_queue.pk, job__status=JobStatus.RUNNABLE
    ).order_by("job_id", "position").values_list("job_id", "instance_type_id", "instance_count", "training_plan_id"):
        entries.setdefault(job_id, []).append(
            et.Entry(instance_type=type_names[type_id], instance_count=count,
                     training_plan=plan_names.get(plan_id) if plan_id else None)
        )
    index = Index(
        type_ids={name: type_id for type_id, name in type_names.items()},
        type_names=type_names,
        plan_ids={name: plan_id for plan_id, name in plan_names.items()},
        share_names={share.id: share.name for share in shares},
    )
    jobs = []
    for values in Job.objects.filter(job_queue_id=job_queue.pk, status__in=UNFINISHED_STATUSES).values_list(
        *_JOB_COLUMNS
    ).order_by("id"):
        row = dict(zip(_JOB_COLUMNS, values, strict=True))
        index.jobs[row["id"]] = row
        placement = None
        if row["status"] != JobStatus.RUNNABLE:
            plan_id = row["selected_training_plan_id"]
            placement = et.Placement(
                instance_type=type_names[row["selected_instance_type_id"]],
                instance_count=row["selected_instance_count"],
                training_plan=plan_names.get(plan_id, f"#{plan_id}") if plan_id else None,
                scheduled_at=row["scheduled_at"] or row["created_at"],
            )
        jobs.append(et.Job(
            id=row["id"], share_id=row["quota_share_id"], priority=row["scheduling_priority"],
            submitted_at=row["created_at"], entries=tuple(entries.get(row["id"], ())),
            status=et.JobStatus(row["status"]), placement=placement, runnable_since=row["runnable_since"],
            max_pending_seconds=row["max_pending_seconds"], preemption_count=row["preemption_count"],
            preemption_retries_before_termination=row["preemption_retries_before_termination"],
        ))
    snap = et.Snapshot(
        now=now, capacity=capacity, shares=shares, jobs=tuple(jobs), plans=plans,
        ordering=et.Ordering(job_queue.ordering), plan_drain_seconds=settings.PLAN_DRAIN_SECONDS,
        queue_enabled=job_queue.enabled,
    )
    return snap, index


@dataclass
class PassOutcome:
    admitted: list[int]
    preempted: list[int]
    duration_ms: float
    engine_ms: float
    record: SchedulingPass
    decisions: et.Decisions


_FULL_FIELDS = (
    "status", "status_reason", "queue_position", "selected_instance_type_id", "selected_instance_count",
    "selected_training_plan_id", "borrowed_instances", "scheduled_at", "runnable_since", "stopped_at",
    "preemption_count",
)
_PENDING_FIELDS = ("status_reason", "queue_position")


def pass_execute(*, job_queue: JobQueue, now: datetime, trigger: str, started: float) -> PassOutcome:
    """Load, decide, write. The caller holds the queue's row lock in the enclosing transaction."""
    snap, index = snapshot_load(job_queue=job_queue, now=now)
    engine_started = time.perf_counter()
    decisions = engine.schedule(snap)
    engine_ms = (time.perf_counter() - engine_started) * 1000
    admitted, preempted = decisions_write(job_queue=job_queue, decisions=decisions, index=index, now=now)
    stats = decisions.stats
    duration_ms = (time.perf_counter() - started) * 1000
    record = SchedulingPass.objects.create(
        job_queue=job_queue, started_at=now, duration_ms=duration_ms, engine_ms=engine_ms, trigger=trigger,
        jobs_considered=stats.jobs_considered, placed_within_quota=stats.placed_within_quota,
        placed_borrowing=stats.placed_borrowing, placed_on_plan=stats.placed_on_plan, fallbacks=stats.fallbacks,
        preempted_reclaim=stats.preemptions.get(et.PreemptionKind.RECLAIM, 0),
        preempted_in_share=stats.preemptions.get(et.PreemptionKind.IN_SHARE, 0),
        preempted_limit_reduced=stats.preemptions.get(et.PreemptionKind.LIMIT_REDUCED, 0),
        plan_drains=stats.plan_drains, timeouts=stats.timeouts,
    )
    return PassOutcome(admitted=admitted, preempted=preempted, duration_ms=duration_ms, engine_ms=engine_ms,
                       record=record, decisions=decisions)


def decisions_write(
    *, job_queue: JobQueue, decisions: et.Decisions, index: Index, now: datetime
) -> tuple[list[int], list[int]]:
    """Write a pass's decisions: job rows, attempts and events, each with bulk statements."""
    changed: dict[int, dict] = {}
    events: list[Event] = []
    stopped: dict[int, str] = {}  # job id -> why its open attempt ended

    def row(job_id: int) -> dict:
        if job_id not in changed:
            changed[job_id] = dict(index.jobs[job_id])
        return changed[job_id]

    def event(kind: str, job_id: int, message: str, **extra) -> None:
        current = index.jobs[job_id]
        events.append(Event(
            kind=kind, job_id=job_id, job_queue_id=job_queue.pk, quota_share_id=current["quota_share_id"],
            message=message, created_at=now, **extra,
        ))

    def back_to_queue(job: dict, reason: str) -> None:
        job.update(status=JobStatus.RUNNABLE, status_reason=reason, selected_instance_type_id=None,
                   selected_instance_count=None, selected_training_plan_id=None, borrowed_instances=0,
                   runnable_since=now, stopped_at=None, queue_position=None)

    for drain in decisions.drains:
        job = row(drain.job_id)
        stopped[drain.job_id] = f"TRAINING_PLAN_EXPIRING: {drain.message}"
        event(EventKind.PLAN_EXPIRING, drain.job_id, drain.message,
              instance_type_id=index.type_ids.get(drain.instance_type), instances=drain.instances)
        back_to_queue(job, f"TRAINING_PLAN_EXPIRING: {drain.message}")

    preempted: list[int] = []
    for preemption in decisions.preemptions:
        job = row(preemption.job_id)
        preempted.append(preemption.job_id)
        code = _preemption_code(preemption.kind)
        stopped[preemption.job_id] = f"{code}: {preemption.message}"
        event(preemption.kind.value, preemption.job_id, preemption.message,
              other_job_id=preemption.preemptor_job_id, other_share_id=preemption.preemptor_share_id,
              instance_type_id=index.type_ids.get(preemption.instance_type), instances=preemption.instances)
        job["preemption_count"] = job["preemption_count"] + 1
        if preemption.fails:
            reason = (f"PREEMPTION_RETRIES_EXHAUSTED: preempted {job['preemption_count']} time(s), "
                      f"the limit is {job['preemption_retries_before_termination']}; last: {preemption.message}")
            job.update(status=JobStatus.FAILED, status_reason=reason, borrowed_instances=0, stopped_at=now,
                       queue_position=None)
            event(EventKind.FAILED, preemption.job_id, reason)
        else:
            back_to_queue(job, f"{code}: {preemption.message}")

    for timeout in decisions.timeouts:
        job = row(timeout.job_id)
        reason = f"PENDING_TIMEOUT: {timeout.message}"
        job.update(status=JobStatus.FAILED, status_reason=reason, stopped_at=now, queue_position=None)
        event(EventKind.FAILED, timeout.job_id, reason)

    attempts: list[JobAttempt] = []
    admitted: list[int] = []
    for admission in decisions.admissions:
        job = row(admission.job_id)
        admitted.append(admission.job_id)
        type_id = index.type_ids[admission.instance_type]
        plan_id = index.plan_ids.get(admission.training_plan) if admission.training_plan else None
        job.update(status=JobStatus.SCHEDULED, status_reason=admission.message, queue_position=None,
                   selected_instance_type_id=type_id, selected_instance_count=admission.instance_count,
                   selected_training_plan_id=plan_id, borrowed_instances=admission.borrowed, scheduled_at=now,
                   stopped_at=None)
        attempts.append(JobAttempt(job_id=admission.job_id, instance_type_id=type_id,
                                   instance_count=admission.instance_count, training_plan_id=plan_id,
                                   borrowed_instances=admission.borrowed, scheduled_at=now))
        placed = dict(instance_type_id=type_id, instances=admission.instance_count)
        event(EventKind.ADMITTED, admission.job_id, admission.message, **placed)
        if admission.borrowed:
            event(EventKind.BORROWED, admission.job_id,
                  f"borrowing {admission.borrowed} {admission.instance_type} above share "
                  f"{index.share_names.get(admission.share_id)}'s limit", instance_type_id=type_id,
                  instances=admission.borrowed)
        if admission.entry_index > 0:
            event(EventKind.FALLBACK, admission.job_id,
                  f"fell back to entry {admission.entry_index + 1}: {admission.message}", **placed)

    pending_only: dict[int, dict] = {}
    for pending in decisions.pending:
        if pending.job_id in changed:
            changed[pending.job_id].update(status_reason=pending.reason, queue_position=pending.queue_position)
            continue
        current = index.jobs[pending.job_id]
        if current["status_reason"] != pending.reason or current["queue_position"] != pending.queue_position:
            pending_only[pending.job_id] = {"status_reason": pending.reason, "queue_position": pending.queue_position}

    if stopped:
        open_attempts = list(JobAttempt.objects.filter(job_id__in=list(stopped), stopped_at__isnull=True))
        for attempt in open_attempts:
            attempt.stopped_at = now
            attempt.status_reason = stopped[attempt.job_id]
        JobAttempt.objects.bulk_update(open_attempts, ["stopped_at", "status_reason"], batch_size=500)
    rows_update(table=Job._meta.db_table, fields=_FULL_FIELDS, rows=changed)
    rows_update(table=Job._meta.db_table, fields=_PENDING_FIELDS, rows=pending_only)
    JobAttempt.objects.bulk_create(attempts, batch_size=500)
    Event.objects.bulk_create(events, batch_size=500)
    return admitted, preempted


def _preemption_code(kind: et.PreemptionKind) -> str:
    return {
        et.PreemptionKind.RECLAIM: "PREEMPTED_RECLAIM",
        et.PreemptionKind.IN_SHARE: "PREEMPTED_IN_SHARE",
        et.PreemptionKind.LIMIT_REDUCED: "PREEMPTED_LIMIT_REDUCED",
    }[kind]


def rows_update(*, table: str, fields: tuple[str, ...], rows: dict[int, dict]) -> None:
    """UPDATE many rows by id with per-row values in few statements.

    Django's bulk_update builds one CASE per field whose cost grows with the square of the batch; a pass may
    rewrite thousands of pending reasons, so on PostgreSQL this joins a VALUES list instead, and elsewhere it
    falls back to one parameterised UPDATE per row through executemany.
    """
    if not rows:
        return
    qn = connection.ops.quote_name
    ids = sorted(rows)
    if connection.vendor == "postgresql":
        columns = {f.column: f for f in Job._meta.concrete_fields}
        casts = [columns[name].db_type(connection) for name in fields]
        assignments = ", ".join(f"{qn(name)} = v.{qn(name)}" for name in fields)
        column_list = ", ".join(["id", *(qn(name) for name in fields)])
        per_row = "(" + ", ".join(["%s::bigint", *(f"%s::{cast}" for cast in casts)]) + ")"
        with connection.cursor() as cursor:
            for start in range(0, len(ids), 2000):
                chunk = ids[start:start + 2000]
                params: list = []
                for job_id in chunk:
                    params.append(job_id)
                    params.extend(_db_value(rows[job_id][name]) for name in fields)
                values = ", ".join([per_row] * len(chunk))
                cursor.execute(
                    f"UPDATE {qn(table)} AS t SET {assignments} FROM (VALUES {values}) AS v({column_list}) "
                    f"WHERE t.id = v.id",
                    params,
                )
        return
    assignments = ", ".join(f"{qn(name)} = %s" for name in fields)
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {qn(table)} SET {assignments} WHERE id = %s",
            [[*(_db_value(rows[job_id][name]) for name in fields), job_id] for job_id in ids],
        )


def _db_value(value):
    if isinstance(value, str):
        return str(value)  # TextChoices members become plain strings for the driver
    if isinstance(value, datetime) and connection.vendor != "postgresql":
        return connection.ops.adapt_datetimefield_value(value)
    return value
