"""Rows -> engine snapshot: the one translation of the database into the engine's vocabulary.

`snapshot_load` reads a queue in a constant number of queries whatever the number of jobs, and returns with
the Snapshot an `Index` (names <-> ids, each job's current row) that `scheduling.passes.write` needs to turn
the engine's decisions back into rows. The caller holds the queue's row lock inside one transaction (see
`scheduling.passes.run.queue_pass_run`).
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db.models import QuerySet

from engine import types as et
from engine.types import job_loaded
from scheduling.models import (
    UNFINISHED_STATUSES,
    EnvironmentCapacity,
    InstanceType,
    Job,
    JobPreference,
    JobQueue,
    PendingClause,
    QuotaShare,
    ShareCapacityLimit,
    State,
    TrainingPlan,
)

JOB_COLUMNS = (
    "id",
    "name",
    "quota_share_id",
    "scheduling_priority",
    "created_at",
    "status",
    "selected_instance_type_id",
    "selected_instance_count",
    "selected_training_plan_id",
    "scheduled_at",
    "runnable_since",
    "max_pending_seconds",
    "preemption_count",
    "preemption_retries_before_termination",
    "pending__clauses",
    "pending__queue_position",
    "borrowed_instances",
    "team_id",
    "stopped_at",
    "retry_attempts",
    "attempt",
    "failed_attempts",
    "taken_by_id",
    "taken_at",
    "lease_expires_at",
    "stop_deadline",
    "stop_outcome",
    "stop_reason",
    "nominated_entry",
    "nominated_victims",
    "attempt_duration_seconds",
    "retry_rules",
    "roster_at",
    "not_before",
    "start_timeouts",
    "relocate",
)


@dataclass
class Index:
    """What the writer needs beside the snapshot: names <-> ids, each job's current row (`JOB_COLUMNS`)."""

    type_ids: dict[str, int]
    type_names: dict[int, str]
    plan_ids: dict[str, int]
    share_names: dict[int, str]
    jobs: dict[int, tuple] = field(default_factory=dict)
    clause_ids: set[int] | None = None  # the queue's `PendingClause`s, read for a pass (`snapshot_load`)


def snapshot_querysets(*, job_queue: JobQueue) -> dict[str, QuerySet]:
    """The 9 reads a pass makes, whatever the number of jobs (the benchmark times them raw as its floor)."""
    queue_id = job_queue.pk
    return {
        "types": InstanceType.objects.values_list("id", "name"),
        "capacity": EnvironmentCapacity.objects.filter(
            service_environment_id=job_queue.service_environment_id,
        ).values_list("instance_type_id", "max_capacity"),
        "limits": ShareCapacityLimit.objects.filter(quota_share__job_queue_id=queue_id).values_list(
            "quota_share_id", "instance_type_id", "max_capacity", "lending_limit"
        ),
        "shares": QuotaShare.objects.filter(job_queue_id=queue_id)
        .values("id", "name", "strategy", "borrow_limit", "in_share_preemption", "fair_share_weight", "state")
        .order_by("id"),
        "plan_shares": TrainingPlan.quota_shares.through.objects.filter(
            trainingplan__job_queue_id=queue_id
        ).values_list("trainingplan_id", "quotashare_id"),
        "plans": TrainingPlan.objects.filter(job_queue_id=queue_id)
        .values("id", "name", "instance_type_id", "instance_count", "start_time", "end_time")
        .order_by("id"),
        # Placed jobs need their lists too: a job drained off a plan falls back in the same pass.
        "preferences": JobPreference.objects.filter(
            job__job_queue_id=queue_id,
            job__status__in=UNFINISHED_STATUSES,
        )
        .order_by("job_id", "position")
        .values_list("job_id", "instance_type_id", "instance_count", "training_plan_id"),
        "jobs": Job.objects.filter(job_queue_id=queue_id, status__in=UNFINISHED_STATUSES)
        .values_list(*JOB_COLUMNS)
        .order_by("id"),
        # The ids of the clauses the queue's pending reasons are made of: the pass adds only new ones.
        "clauses": PendingClause.objects.filter(job_queue_id=queue_id).values_list("id", flat=True),
    }


def snapshot_load(*, job_queue: JobQueue, now: datetime, clauses: bool = False) -> tuple[et.Snapshot, Index]:
    """Read one queue into an engine Snapshot in 8 queries, whatever the number of jobs; a 9th, `clauses`,
    reads the ids of the queue's pending clauses, which a pass's writes need (`Index.clause_ids`)."""
    reads = snapshot_querysets(job_queue=job_queue)
    type_names = dict(reads["types"])
    capacity = {type_names[type_id]: maximum for type_id, maximum in reads["capacity"]}
    limits: dict[int, dict[str, int]] = {}
    lending_limits: dict[int, dict[str, int]] = {}
    for share_id, type_id, maximum, lending_limit in reads["limits"]:
        limits.setdefault(share_id, {})[type_names[type_id]] = maximum
        if lending_limit is not None:
            lending_limits.setdefault(share_id, {})[type_names[type_id]] = lending_limit
    shares = tuple(
        et.Share(
            id=row["id"],
            name=row["name"],
            strategy=et.Strategy(row["strategy"]),
            limits=limits.get(row["id"], {}),
            borrow_limit=row["borrow_limit"],
            in_share_preemption=row["in_share_preemption"],
            enabled=row["state"] == State.ENABLED,
            lending_limits=lending_limits.get(row["id"], {}),
            fair_share_weight=row["fair_share_weight"],
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
            id=row["id"],
            name=row["name"],
            instance_type=type_names[row["instance_type_id"]],
            instance_count=row["instance_count"],
            start_time=row["start_time"],
            end_time=row["end_time"],
            share_ids=frozenset(plan_shares.get(row["id"], ())),
        )
        for row in plan_rows
    )
    # Jobs before their preference lists: a submission may commit while the pass reads (it does not wait for
    # the queue lock), and its job and list commit together, so a job read here has its list read below.
    job_rows = values_rows(reads["jobs"])
    # Many jobs ask for the same list: each distinct list (and entry) is built once and shared, not 30,000
    # times.
    entry_cache: dict[tuple, et.Entry] = {}
    list_cache: dict[tuple, tuple[et.Entry, ...]] = {}
    entries: dict[int, tuple[et.Entry, ...]] = {}
    rest = operator.itemgetter(slice(1, None))
    for job_id, rows in itertools.groupby(values_rows(reads["preferences"]), key=operator.itemgetter(0)):
        keys = tuple(map(rest, rows))
        found = list_cache.get(keys)
        if found is None:
            found = list_cache[keys] = tuple(_entry(entry_cache, key, type_names, plan_names) for key in keys)
        entries[job_id] = found
    index = Index(
        type_ids={name: type_id for type_id, name in type_names.items()},
        type_names=type_names,
        plan_ids={name: plan_id for plan_id, name in plan_names.items()},
        share_names={share.id: share.name for share in shares},
        clause_ids=set(reads["clauses"]) if clauses else None,
    )
    statuses = {status.value: status for status in et.JobStatus}
    runnable = et.JobStatus.RUNNABLE
    stopping = et.JobStatus.STOPPING
    jobs = []
    for row in job_rows:
        (
            job_id,
            name,
            share_id,
            priority,
            created_at,
            status,
            type_id,
            count,
            plan_id,
            scheduled_at,
            runnable_since,
            max_pending,
            preemptions,
            preemption_retries,
            _clauses,
            _position,
            _borrowed,
            team_id,
            _stopped_at,
            _retries,
            _attempt,
            _failed,
            _taken_by,
            taken_at,
            _lease,
            deadline,
            _outcome,
            _stop_reason,
            nominated_entry,
            nominated_victims,
            _attempt_duration,
            _retry_rules,
            _roster_at,
            _not_before,
            _start_timeouts,
            relocate,
        ) = row
        index.jobs[job_id] = row
        status = statuses[status]
        placement = None
        if status is not runnable:
            placement = et.Placement(
                instance_type=type_names[type_id],
                instance_count=count,
                training_plan=plan_names.get(plan_id, f"#{plan_id}") if plan_id else None,
                scheduled_at=scheduled_at or created_at,
            )
        jobs.append(
            job_loaded(
                id=job_id,
                share_id=share_id,
                priority=priority,
                submitted_at=created_at,
                entries=entries.get(job_id, ()),
                status=status,
                placement=placement,
                runnable_since=runnable_since,
                max_pending_seconds=max_pending,
                preemption_count=preemptions,
                preemption_retries_before_termination=preemption_retries,
                taken=taken_at is not None,
                stop_deadline=deadline,
                nomination=(
                    et.Nomination(entry_index=nominated_entry, victim_ids=frozenset(nominated_victims))
                    if nominated_entry is not None and (status is runnable or status is stopping)
                    else None
                ),
                relocate=relocate,
                name=name,
                team_id=team_id,
            )
        )
    snap = et.Snapshot(
        now=now,
        capacity=capacity,
        shares=shares,
        jobs=tuple(jobs),
        plans=plans,
        ordering=et.Ordering(job_queue.ordering),
        plan_drain_seconds=settings.PLAN_DRAIN_SECONDS,
        queue_enabled=job_queue.enabled,
        idle_capacity_assignment=et.IdleCapacityAssignment(job_queue.idle_capacity_assignment),
        preemption_min_runtime_seconds=job_queue.preemption_min_runtime_seconds,
        relocation_min_runtime_seconds=job_queue.relocation_min_runtime_seconds,
        max_relocations_per_pass=settings.MAX_RELOCATIONS_PER_PASS,
    )
    return snap, index


def values_rows(queryset: QuerySet) -> list[tuple]:
    """The rows of a `values_list` queryset, as it would give them, converted column by column.

    Django converts each value of each row through the column's converters. A pass reads every unfinished
    job's 36 columns, and on SQLite, which keeps datetimes as text, that is up to nine parses per job, through
    settings lookups and checks per value: most of the snapshot's time over the read itself. Here each
    column's converters run once per distinct value (most NULLs, many jobs share a moment), and SQLite's
    datetimes are parsed directly.
    """
    compiler = queryset.query.get_compiler(using=queryset.db)
    sql, params = compiler.as_sql()
    fields = [selected[0] for selected in compiler.select[: compiler.col_count]]
    converters = compiler.get_converters(fields)
    with compiler.connection.cursor() as cursor:
        datetimes_loaded_in_c(cursor)
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if not converters:
        return [tuple(row) for row in rows]
    connection = compiler.connection
    json_columns, other_columns = [], []
    for pos, (convs, expression) in converters.items():
        if expression.output_field.get_internal_type() == "JSONField":
            json_columns.append((pos, _converted(convs, expression, connection)))
        else:
            other_columns.append((pos, _column_converter(convs, expression, connection)))
    converted = []
    for row in rows:
        row = list(row)
        for pos, convert in other_columns:
            value = row[pos]
            if value is not None:
                row[pos] = convert(value)
        # A list or dict: each row gets its own, as the queryset would give. Most jobs hold an empty list
        # (`nominated_victims`, `retry_rules`): built without parsing it (at 120,000 jobs, 240,000 parses).
        for pos, convert in json_columns:
            value = row[pos]
            if value == "[]":
                row[pos] = []
            elif value is not None:
                row[pos] = {} if value == "{}" else convert(value)
        converted.append(tuple(row))
    return converted


def datetimes_loaded_in_c(cursor) -> None:
    """On PostgreSQL, have this cursor load `timestamptz` values with psycopg's C loader.

    Django registers a loader of its own, written in Python, that parses each value and then sets the
    connection's zone: at 12,000 jobs close to 30% of the snapshot's time. psycopg's own loader gives the
    same datetimes, in the session's zone; it is used only when that zone is Django's (UTC, as Django sets it).
    """
    if cursor.db.vendor != "postgresql":
        return
    import psycopg
    from psycopg.pq import Format

    raw = cursor.cursor
    if raw.connection.info.timezone == cursor.db.timezone:
        oid = psycopg.postgres.types["timestamptz"].oid
        raw.adapters.register_loader(oid, psycopg.adapters.get_loader(oid, Format.TEXT))


def _converted(convs: list, expression, connection):
    """One column's converters as one function of a non-NULL value."""
    internal = expression.output_field.get_internal_type()
    if connection.vendor == "sqlite" and internal == "DateTimeField" and settings.USE_TZ:
        zone = connection.timezone
        parse = datetime.fromisoformat

        def convert_one(value):
            if isinstance(value, datetime):
                parsed = value
            else:
                parsed = parse(value)
            return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=zone)

        return convert_one

    def convert_each(value):
        for converter in convs:
            value = converter(value, expression, connection)
        return value

    return convert_each


def _column_converter(convs: list, expression, connection):
    """`_converted`, remembered per distinct value (most of a column's values are shared: moments, flags)."""
    convert_one = _converted(convs, expression, connection)
    seen: dict = {}

    def convert(value):
        found = seen.get(value, seen)
        if found is seen:
            found = seen[value] = convert_one(value)
        return found

    return convert


def _entry(
    cache: dict[tuple, et.Entry], key: tuple, type_names: dict[int, str], plan_names: dict[int, str]
) -> et.Entry:
    entry = cache.get(key)
    if entry is None:
        type_id, count, plan_id = key
        entry = cache[key] = et.Entry(
            instance_type=type_names[type_id],
            instance_count=count,
            training_plan=plan_names.get(plan_id) if plan_id else None,
        )
    return entry
