"""The one translation between the database and the engine: ORM rows -> Snapshot, Decisions -> rows.

`snapshot_load` reads a queue in a constant number of queries whatever the number of jobs; `pass_execute`
runs the engine on it and writes every decision with bulk statements. Both expect the caller to hold the
queue's row lock inside one transaction (see `services.queue_pass_run`).
"""

from __future__ import annotations

import itertools
import json
import logging
import operator
import time
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import connection
from django.db.models import JSONField, Max, Model, QuerySet

import engine
from engine import accounting
from engine import types as et
from ops.metrics import pass_histogram_observe
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
    PendingState,
    QuotaShare,
    SchedulingPass,
    ShareCapacityLimit,
    ShareUsageSample,
    State,
    TrainingPlan,
)

_JOB_COLUMNS = (
    "id", "name", "quota_share_id", "scheduling_priority", "created_at", "status", "selected_instance_type_id",
    "selected_instance_count", "selected_training_plan_id", "scheduled_at", "runnable_since",
    "max_pending_seconds", "preemption_count", "preemption_retries_before_termination", "pending__status_reason",
    "pending__queue_position", "borrowed_instances",
)
decision_logger = logging.getLogger("quotaportal.scheduling.decisions")
_SHARE, _REASON, _POSITION = (
    _JOB_COLUMNS.index(name) for name in ("quota_share_id", "pending__status_reason", "pending__queue_position"))


@dataclass
class Index:
    """What the writer needs beside the snapshot: names <-> ids and each job's current row (a `_JOB_COLUMNS` tuple)."""

    type_ids: dict[str, int]
    type_names: dict[int, str]
    plan_ids: dict[str, int]
    share_names: dict[int, str]
    jobs: dict[int, tuple] = field(default_factory=dict)


def snapshot_querysets(*, job_queue: JobQueue) -> dict[str, QuerySet]:
    """The 8 reads a pass makes, whatever the number of jobs (the benchmark times them raw as its floor)."""
    queue_id = job_queue.pk
    return {
        "types": InstanceType.objects.values_list("id", "name"),
        "capacity": EnvironmentCapacity.objects.filter(
            service_environment_id=job_queue.service_environment_id).values_list("instance_type_id", "max_capacity"),
        "limits": ShareCapacityLimit.objects.filter(quota_share__job_queue_id=queue_id).values_list(
            "quota_share_id", "instance_type_id", "max_capacity"),
        "shares": QuotaShare.objects.filter(job_queue_id=queue_id).values(
            "id", "name", "strategy", "borrow_limit", "in_share_preemption", "state").order_by("id"),
        "plan_shares": TrainingPlan.quota_shares.through.objects.filter(
            trainingplan__job_queue_id=queue_id).values_list("trainingplan_id", "quotashare_id"),
        "plans": TrainingPlan.objects.filter(job_queue_id=queue_id).values(
            "id", "name", "instance_type_id", "instance_count", "start_time", "end_time").order_by("id"),
        # Placed jobs need their lists too: a job drained off a plan falls back in the same pass.
        "preferences": JobPreference.objects.filter(
            job__job_queue_id=queue_id, job__status__in=UNFINISHED_STATUSES,
        ).order_by("job_id", "position").values_list("job_id", "instance_type_id", "instance_count",
                                                     "training_plan_id"),
        "jobs": Job.objects.filter(job_queue_id=queue_id, status__in=UNFINISHED_STATUSES).values_list(
            *_JOB_COLUMNS).order_by("id"),
    }


def snapshot_load(*, job_queue: JobQueue, now: datetime) -> tuple[et.Snapshot, Index]:
    """Read one queue into an engine Snapshot in 8 queries, whatever the number of jobs."""
    reads = snapshot_querysets(job_queue=job_queue)
    type_names = dict(reads["types"])
    capacity = {type_names[type_id]: maximum for type_id, maximum in reads["capacity"]}
    limits: dict[int, dict[str, int]] = {}
    for share_id, type_id, maximum in reads["limits"]:
        limits.setdefault(share_id, {})[type_names[type_id]] = maximum
    shares = tuple(
        et.Share(
            id=row["id"], name=row["name"], strategy=et.Strategy(row["strategy"]), limits=limits.get(row["id"], {}),
            borrow_limit=row["borrow_limit"], in_share_preemption=row["in_share_preemption"],
            enabled=row["state"] == State.ENABLED,
        )
        for row in reads["shares"]
    )
    plan_shares: dict[int, set[int]] = {}
    for plan_id, share_id in reads["plan_shares"]:
        plan_shares.setdefault(plan_id, set()).add(share_id)
    plan_rows = list(reads["plans"])
    plan_names = {row["id"]: row["name"] for row in plan_rows}
    plans = tuple(
        et.Plan(
            id=row["id"], name=row["name"], instance_type=type_names[row["instance_type_id"]],
            instance_count=row["instance_count"], start_time=row["start_time"], end_time=row["end_time"],
            share_ids=frozenset(plan_shares.get(row["id"], ())),
        )
        for row in plan_rows
    )
    # Jobs before their preference lists: a submission may commit while the pass reads (it does not wait for
    # the queue lock), and its job and list commit together, so a job read here has its list read below.
    job_rows = list(reads["jobs"])
    # Many jobs ask for the same list: each distinct list (and entry) is built once and shared, not 30,000 times.
    entry_cache: dict[tuple, et.Entry] = {}
    list_cache: dict[tuple, tuple[et.Entry, ...]] = {}
    entries: dict[int, tuple[et.Entry, ...]] = {}
    for job_id, rows in itertools.groupby(reads["preferences"], key=operator.itemgetter(0)):
        keys = tuple(row[1:] for row in rows)
        found = list_cache.get(keys)
        if found is None:
            found = list_cache[keys] = tuple(_entry(entry_cache, key, type_names, plan_names) for key in keys)
        entries[job_id] = found
    index = Index(
        type_ids={name: type_id for type_id, name in type_names.items()},
        type_names=type_names,
        plan_ids={name: plan_id for plan_id, name in plan_names.items()},
        share_names={share.id: share.name for share in shares},
    )
    statuses = {status.value: status for status in et.JobStatus}
    runnable = et.JobStatus.RUNNABLE
    jobs = []
    for row in job_rows:
        (job_id, _name, share_id, priority, created_at, status, type_id, count, plan_id, scheduled_at,
         runnable_since, max_pending, preemptions, preemption_retries, _reason, _position, _borrowed) = row
        index.jobs[job_id] = row
        status = statuses[status]
        placement = None
        if status is not runnable:
            placement = et.Placement(
                instance_type=type_names[type_id], instance_count=count,
                training_plan=plan_names.get(plan_id, f"#{plan_id}") if plan_id else None,
                scheduled_at=scheduled_at or created_at,
            )
        jobs.append(et.Job(
            id=job_id, share_id=share_id, priority=priority, submitted_at=created_at,
            entries=entries.get(job_id, ()), status=status, placement=placement,
            runnable_since=runnable_since, max_pending_seconds=max_pending, preemption_count=preemptions,
            preemption_retries_before_termination=preemption_retries,
        ))
    snap = et.Snapshot(
        now=now, capacity=capacity, shares=shares, jobs=tuple(jobs), plans=plans,
        ordering=et.Ordering(job_queue.ordering), plan_drain_seconds=settings.PLAN_DRAIN_SECONDS,
        queue_enabled=job_queue.enabled,
    )
    return snap, index


def _entry(cache: dict[tuple, et.Entry], key: tuple, type_names: dict[int, str], plan_names: dict[int, str]) -> et.Entry:
    entry = cache.get(key)
    if entry is None:
        type_id, count, plan_id = key
        entry = cache[key] = et.Entry(instance_type=type_names[type_id], instance_count=count,
                                      training_plan=plan_names.get(plan_id) if plan_id else None)
    return entry


@dataclass
class PassOutcome:
    admitted: list[int]
    preempted: list[int]
    duration_ms: float
    engine_ms: float
    record: SchedulingPass
    decisions: et.Decisions


_FULL_FIELDS = (
    "status", "status_reason", "selected_instance_type_id", "selected_instance_count", "selected_training_plan_id",
    "borrowed_instances", "scheduled_at", "runnable_since", "stopped_at", "preemption_count",
)


def pass_execute(*, job_queue: JobQueue, now: datetime, trigger: str, started: float) -> PassOutcome:
    """Load, decide, write. The caller holds the queue's row lock in the enclosing transaction."""
    snap, index = snapshot_load(job_queue=job_queue, now=now)
    engine_started = time.perf_counter()
    decisions = engine.schedule(snap)
    engine_ms = (time.perf_counter() - engine_started) * 1000
    admitted, preempted = decisions_write(job_queue=job_queue, decisions=decisions, index=index, now=now)
    decisions_log(job_queue=job_queue, decisions=decisions, index=index)
    usage_sample(job_queue=job_queue, snap=snap, decisions=decisions, index=index, now=now)
    stats = decisions.stats
    duration_ms = (time.perf_counter() - started) * 1000
    pass_histogram_observe(job_queue_id=job_queue.pk, seconds=duration_ms / 1000)
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


def decisions_log(*, job_queue: JobQueue, decisions: et.Decisions, index: Index) -> None:
    """One log line per decision, with queue, share and job as fields (LOG_FORMAT=json makes them keys)."""
    if not decision_logger.isEnabledFor(logging.INFO):
        return
    share = index.share_names.get
    for a in decisions.admissions:
        fields = {"queue": job_queue.name, "share": share(a.share_id), "job": a.job_id, "decision": "admit",
                  "instance_type": a.instance_type, "instances": a.instance_count, "borrowed": a.borrowed,
                  "training_plan": a.training_plan, "entry": a.entry_index + 1}
        decision_logger.info("admit queue=%s share=%s job=%s %s", job_queue.name, fields["share"], a.job_id,
                             a.message, extra=fields)
    for p in decisions.preemptions:
        fields = {"queue": job_queue.name, "share": share(p.share_id), "job": p.job_id, "decision": p.kind.value,
                  "instance_type": p.instance_type, "instances": p.instances, "preemptor_job": p.preemptor_job_id,
                  "preemptor_share": share(p.preemptor_share_id) if p.preemptor_share_id else None}
        decision_logger.info("preempt queue=%s share=%s job=%s %s", job_queue.name, fields["share"], p.job_id,
                             p.message, extra=fields)
    for d in decisions.drains:
        decision_logger.info("drain queue=%s share=%s job=%s %s", job_queue.name, share(d.share_id), d.job_id,
                             d.message, extra={"queue": job_queue.name, "share": share(d.share_id), "job": d.job_id,
                                               "decision": "drain", "training_plan": d.training_plan})
    for t in decisions.timeouts:
        decision_logger.info("timeout queue=%s share=%s job=%s %s", job_queue.name, share(t.share_id), t.job_id,
                             t.message, extra={"queue": job_queue.name, "share": share(t.share_id), "job": t.job_id,
                                               "decision": "timeout"})


def usage_after(snap: et.Snapshot, decisions: et.Decisions) -> dict[tuple[int, str], int]:
    """(share id, type) -> on-demand instances held once the pass's decisions are applied."""
    stopped = {p.job_id for p in decisions.preemptions} | {d.job_id for d in decisions.drains}
    usage: dict[tuple[int, str], int] = {}
    for job in snap.jobs:
        placement = job.placement
        if placement is not None and placement.training_plan is None and job.id not in stopped:
            key = (job.share_id, placement.instance_type)
            usage[key] = usage.get(key, 0) + placement.instance_count
    for admission in decisions.admissions:
        if admission.training_plan is None:
            key = (admission.share_id, admission.instance_type)
            usage[key] = usage.get(key, 0) + admission.instance_count
    return usage


def usage_sample(*, job_queue: JobQueue, snap: et.Snapshot, decisions: et.Decisions, index: Index,
                 now: datetime) -> None:
    """Every SAMPLE_INTERVAL_SECONDS, record per share and type what the charts draw: owned, borrowed, lent."""
    last = ShareUsageSample.objects.filter(quota_share__job_queue_id=job_queue.pk).aggregate(
        last=Max("taken_at"))["last"]
    if last is not None and (now - last).total_seconds() < settings.SAMPLE_INTERVAL_SECONDS:
        return
    rows, _, _ = accounting.share_usage(
        capacity=snap.capacity, limits={share.id: share.limits for share in snap.shares},
        strategies={share.id: share.strategy for share in snap.shares}, usage=usage_after(snap, decisions))
    pending: dict[int, int] = {}
    for item in decisions.pending:
        pending[item.share_id] = pending.get(item.share_id, 0) + 1
    rows_insert(ShareUsageSample, [
        dict(quota_share_id=row.share_id, instance_type_id=index.type_ids[row.instance_type], taken_at=now,
             limit=row.limit, usage=row.usage, borrowed=row.borrowed, lent=row.lent,
             pending=pending.get(row.share_id, 0))
        for row in rows if row.share_id in index.share_names
    ])


def decisions_write(
    *, job_queue: JobQueue, decisions: et.Decisions, index: Index, now: datetime
) -> tuple[list[int], list[int]]:
    """Write a pass's decisions: job rows, attempts and events, each with bulk statements."""
    changed: dict[int, dict] = {}
    events: list[dict] = []
    stopped: dict[int, str] = {}  # job id -> why its open attempt ended

    def row(job_id: int) -> dict:
        if job_id not in changed:
            changed[job_id] = dict(zip(_JOB_COLUMNS, index.jobs[job_id], strict=True))
        return changed[job_id]

    def event(kind: str, job_id: int, message: str, **extra) -> None:
        events.append(dict(
            kind=str(kind), job_id=job_id, job_queue_id=job_queue.pk, quota_share_id=index.jobs[job_id][_SHARE],
            message=message, created_at=now, **extra,
        ))

    def back_to_queue(job: dict, reason: str) -> None:
        job.update(status=JobStatus.RUNNABLE, status_reason=reason, selected_instance_type_id=None,
                   selected_instance_count=None, selected_training_plan_id=None, borrowed_instances=0,
                   runnable_since=now, stopped_at=None)

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
            job.update(status=JobStatus.FAILED, status_reason=reason, borrowed_instances=0, stopped_at=now)
            event(EventKind.FAILED, preemption.job_id, reason)
        else:
            back_to_queue(job, f"{code}: {preemption.message}")

    for timeout in decisions.timeouts:
        job = row(timeout.job_id)
        reason = f"PENDING_TIMEOUT: {timeout.message}"
        job.update(status=JobStatus.FAILED, status_reason=reason, stopped_at=now)
        event(EventKind.FAILED, timeout.job_id, reason)

    attempts: list[dict] = []
    admitted: list[int] = []
    for admission in decisions.admissions:
        job = row(admission.job_id)
        admitted.append(admission.job_id)
        type_id = index.type_ids[admission.instance_type]
        plan_id = index.plan_ids.get(admission.training_plan) if admission.training_plan else None
        job.update(status=JobStatus.SCHEDULED, status_reason=admission.message, selected_instance_type_id=type_id, selected_instance_count=admission.instance_count,
                   selected_training_plan_id=plan_id, borrowed_instances=admission.borrowed, scheduled_at=now,
                   stopped_at=None)
        attempts.append(dict(job_id=admission.job_id, instance_type_id=type_id,
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

    # Only the reasons and positions that changed are rewritten (every one on a queue's first pass).
    waiting: list[dict] = []
    for pending in decisions.pending:
        current = index.jobs[pending.job_id]
        if current[_REASON] != pending.reason or current[_POSITION] != pending.queue_position:
            waiting.append(dict(job_id=pending.job_id, status_reason=pending.reason,
                                queue_position=pending.queue_position))
    still_waiting = {pending.job_id for pending in decisions.pending}
    # Rows to remove: the rewritten ones that exist, and those of jobs that left the queue in this pass.
    stale = [row["job_id"] for row in waiting if index.jobs[row["job_id"]][_REASON] is not None]
    stale += [job_id for job_id, current in index.jobs.items()
              if current[_REASON] is not None and job_id not in still_waiting]

    if stopped:
        open_attempts = JobAttempt.objects.filter(job_id__in=list(stopped), stopped_at__isnull=True)
        rows_update(model=JobAttempt, fields=("stopped_at", "status_reason"), rows={
            attempt_id: {"stopped_at": now, "status_reason": stopped[job_id]}
            for attempt_id, job_id in open_attempts.values_list("id", "job_id")
        })
    rows_update(model=Job, fields=_FULL_FIELDS, rows=changed)
    rows_delete(PendingState, stale)
    # In key order, so the new rows append to the primary key's index rather than land all over it.
    rows_insert(PendingState, sorted(waiting, key=operator.itemgetter("job_id")))
    rows_insert(JobAttempt, attempts)
    rows_insert(Event, events)
    return admitted, preempted


def _preemption_code(kind: et.PreemptionKind) -> str:
    return {
        et.PreemptionKind.RECLAIM: "PREEMPTED_RECLAIM",
        et.PreemptionKind.IN_SHARE: "PREEMPTED_IN_SHARE",
        et.PreemptionKind.LIMIT_REDUCED: "PREEMPTED_LIMIT_REDUCED",
    }[kind]


def rows_update(*, model: type[Model], fields: tuple[str, ...], rows: dict[int, dict]) -> None:
    """UPDATE many rows by id with per-row values, in a fixed number of statements on PostgreSQL.

    A pass may rewrite thousands of pending reasons. Django's bulk_update builds one CASE per field whose
    cost grows with the square of the batch, so on PostgreSQL the values are streamed with COPY into a
    temporary table and applied with one UPDATE ... FROM; elsewhere one parameterised UPDATE per row runs
    through executemany.
    """
    if not rows:
        return
    qn = connection.ops.quote_name
    table = qn(model._meta.db_table)
    ids = sorted(rows)
    if connection.vendor == "postgresql":
        columns = {f.column: f for f in model._meta.concrete_fields}
        staging = qn(f"qp_update_{model._meta.model_name}_{next(_staging_names)}")
        definition = ", ".join(["id bigint", *(f"{qn(n)} {columns[n].db_type(connection)}" for n in fields)])
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE TEMPORARY TABLE {staging} ({definition}) ON COMMIT DROP")
            copy_rows(cursor, staging, ("id", *fields),
                      ([row_id, *[rows[row_id][name] for name in fields]] for row_id in ids),
                      json_at=[i + 1 for i, name in enumerate(fields) if isinstance(columns[name], JSONField)])
            cursor.execute(f"ANALYZE {staging}")  # a temporary table has no statistics until asked
            assignments = ", ".join(f"{qn(name)} = v.{qn(name)}" for name in fields)
            cursor.execute(f"UPDATE {table} AS t SET {assignments} FROM {staging} AS v WHERE t.id = v.id")
            cursor.execute(f"DROP TABLE {staging}")
        return
    assignments = ", ".join(f"{qn(name)} = %s" for name in fields)
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {table} SET {assignments} WHERE id = %s",
            [[*(_db_value(rows[row_id][name]) for name in fields), row_id] for row_id in ids],
        )


def rows_delete(model: type[Model], ids: list[int]) -> None:
    """DELETE many rows by primary key: one statement on PostgreSQL, chunks under SQLite's variable limit."""
    if not ids:
        return
    table = connection.ops.quote_name(model._meta.db_table)
    pk = connection.ops.quote_name(model._meta.pk.column)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"DELETE FROM {table} WHERE {pk} = ANY(%s)", [ids])
            return
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            cursor.execute(f"DELETE FROM {table} WHERE {pk} IN ({', '.join(['%s'] * len(chunk))})", chunk)


def rows_insert(model: type[Model], rows: list[dict]) -> None:
    """INSERT many new rows (dicts by attname) whose ids nobody needs back: one COPY on PostgreSQL.

    The primary key is written only when the rows carry it (a one-to-one key); an automatic one is left out.
    """
    if not rows:
        return
    if connection.vendor != "postgresql":
        model.objects.bulk_create([model(**row) for row in rows], batch_size=500)
        return
    first = rows[0]
    concrete = [f for f in model._meta.concrete_fields if not f.primary_key or f.attname in first]
    defaults = [(f.attname, f.get_default()) for f in concrete]
    with connection.cursor() as cursor:
        copy_rows(cursor, connection.ops.quote_name(model._meta.db_table), tuple(f.column for f in concrete),
                  ([row.get(name, default) for name, default in defaults] for row in rows),
                  json_at=[i for i, f in enumerate(concrete) if isinstance(f, JSONField)])


def copy_rows(cursor, table: str, columns: tuple[str, ...], rows, *, json_at: list[int]) -> None:
    """Stream rows (lists) into a PostgreSQL table with COPY, logged like any query so query budgets count it.

    Values go to the driver as they are (a TextChoices member is a str to it) except at the `json_at`
    positions, which are serialized.
    """
    qn = connection.ops.quote_name
    sql = f"COPY {table} ({', '.join(qn(c) for c in columns)}) FROM STDIN"
    started = time.perf_counter()
    with cursor.cursor.copy(sql) as copy:
        for row in rows:
            for i in json_at:
                if row[i] is not None:
                    row[i] = json.dumps(row[i])
            copy.write_row(row)
    if connection.queries_logged:
        connection.queries_log.append({"sql": sql, "time": f"{time.perf_counter() - started:.3f}"})



_staging_names = itertools.count()


def _db_value(value):
    if isinstance(value, str):
        return str(value)  # TextChoices members become plain strings for the driver
    if isinstance(value, datetime) and connection.vendor != "postgresql":
        return connection.ops.adapt_datetimefield_value(value)
    return value
