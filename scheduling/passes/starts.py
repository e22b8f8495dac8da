"""Start deadlines in the pass (multi-host.md): placed jobs not started in time go back to RUNNABLE, and wait.

A placed job on an external environment not started by all its executors within the environment's
`start_deadline_seconds` goes back to RUNNABLE with START_TIMEOUT (not a failed attempt) and may not be placed
again before its backoff ends (`not_before`: 1, 2, 4 ... 60 minutes). Jobs no executor touched are settled
here in bulk, with the pass's other housekeeping; jobs some executor claimed or runs move through the services
first (`scheduling.services.gangs.gangs_settle`), since their tasks and processes must be stopped.

A job in its backoff is left out of the engine's snapshot: the engine never sees it, so no pass places it
before then; the pass still writes it a reason and a place in its share's queue. The engine is unchanged.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from django.conf import settings

from engine import types as et
from scheduling.models import (
    LIVE_TASK_STATES,
    EventKind,
    Job,
    JobQueue,
    JobStatus,
    JobTask,
    ServiceEnvironment,
)
from scheduling.passes.snapshot import JOB_COLUMNS, Index
from scheduling.passes.stops import Settled, released_fields
from scheduling.selectors.jobs import executor_offers, offers_text

_STATUS, _LEASE, _SCHEDULED, _NOT_BEFORE, _TAKEN = (
    JOB_COLUMNS.index(name)
    for name in ("status", "lease_expires_at", "scheduled_at", "not_before", "taken_at")
)
_STARTING = (JobStatus.SCHEDULED, JobStatus.STARTING)
_HOLDING = (JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING, JobStatus.STOPPING)


def start_backoff_seconds(timeouts: int) -> int:
    """1, 2, 4 ... minutes (START_BACKOFF_BASE_SECONDS, doubling) after each start timeout, at most 60."""
    base = settings.START_BACKOFF_BASE_SECONDS
    return min(base * 2 ** max(0, timeouts - 1), settings.START_BACKOFF_MAX_SECONDS)


def start_deadline(job_queue: JobQueue) -> timedelta | None:
    """How long a placed job of the queue may take to start; None on the simulated executor (it starts
    every job it is given)."""
    environment = job_queue.service_environment
    if environment.executor != ServiceEnvironment.Executor.EXTERNAL:
        return None
    return timedelta(seconds=environment.start_deadline_seconds)


def _late(row: tuple, deadline: timedelta | None, now: datetime) -> bool:
    return (
        deadline is not None
        and row[_STATUS] in _STARTING
        and row[_SCHEDULED] is not None
        and row[_SCHEDULED] + deadline <= now
    )


def gangs_due(*, job_queue: JobQueue, index: Index, now: datetime) -> list[int]:
    """Ids of the placed jobs the services must settle now: a job run as tasks whose lease ran out or that one
    task holds past its start deadline, and a job taken whole past its start deadline. (A job taken whole and
    lost is the pass's own housekeeping, EXECUTOR_LOST.) One query, only when a lease ran out or an untaken job
    is late."""
    deadline = start_deadline(job_queue)
    due, maybe_tasks = [], []
    for job_id, row in index.jobs.items():
        if row[_STATUS] not in _HOLDING:
            continue
        late = _late(row, deadline, now)
        if late and row[_TAKEN] is not None:
            due.append(job_id)
        elif late or (row[_LEASE] is not None and row[_LEASE] <= now):
            maybe_tasks.append(job_id)
    if maybe_tasks:
        due += sorted(
            set(
                JobTask.objects.filter(job_id__in=maybe_tasks, state__in=LIVE_TASK_STATES).values_list(
                    "job_id", flat=True
                )
            )
        )
    return due


def start_deadline_next(*, job_queue: JobQueue, index: Index) -> datetime | None:
    """When the next start deadline or backoff of the queue's jobs ends: a pass is due then."""
    deadline = start_deadline(job_queue)
    moments = [
        row[_NOT_BEFORE]
        for row in index.jobs.values()
        if row[_STATUS] == JobStatus.RUNNABLE and row[_NOT_BEFORE] is not None
    ]
    if deadline is not None:
        moments += [
            row[_SCHEDULED] + deadline
            for row in index.jobs.values()
            if row[_STATUS] in _STARTING and row[_SCHEDULED] is not None
        ]
    return min(moments, default=None)


def starts_settle(
    *, snap: et.Snapshot, index: Index, job_queue: JobQueue, settled: Settled, now: datetime
) -> tuple[et.Snapshot, list[et.Pending]]:
    """Housekeeping before the engine: jobs no executor touched and not started in time go back to RUNNABLE
    (written with `settled`), and jobs in their backoff are left out of the snapshot. Returns the snapshot the
    engine should see and the held jobs' reasons (after their share's other waiting jobs). At most two
    queries, only when some job is late or held."""
    deadline = start_deadline(job_queue)
    late = [
        job
        for job in snap.jobs
        if job.id not in settled.rows and not job.taken and _late(index.jobs[job.id], deadline, now)
    ]
    timed_out: dict[int, str] = {}
    if late:
        offers = executor_offers(environment=job_queue.service_environment, now=now)
        for job in late:
            row = dict(zip(JOB_COLUMNS, index.jobs[job.id], strict=True))
            count, type_name = (
                row["selected_instance_count"],
                index.type_names[row["selected_instance_type_id"]],
            )
            timeouts = row["start_timeouts"] + 1
            until = now + timedelta(seconds=start_backoff_seconds(timeouts))
            text = (
                f"START_TIMEOUT: not started within {deadline.total_seconds():.0f} s of placement: no executor "
                f"claimed any of its {count} instance(s); "
                f"{offers_text(offers, type_name=type_name, count=count)}; "
                f"not placed again before {until:%H:%M:%S} UTC"
            )
            changes = released_fields(status=JobStatus.RUNNABLE, reason=text, now=now)
            changes.update(start_timeouts=timeouts, not_before=until)
            settled.rows[job.id] = {**row, **changes}
            settled.closed[job.id] = text
            settled.events.append((EventKind.START_TIMEOUT, job.id, f"{row['name']}: {text}"))
            timed_out[job.id] = text
    held_ids = set(timed_out) | {
        job.id
        for job in snap.jobs
        if job.status == et.JobStatus.RUNNABLE
        and index.jobs[job.id][_NOT_BEFORE] is not None
        and index.jobs[job.id][_NOT_BEFORE] > now
    }
    if not held_ids:
        return snap, []
    waiting_ids = held_ids - set(timed_out)
    reasons = (
        dict(Job.objects.filter(pk__in=waiting_ids).values_list("id", "status_reason")) if waiting_ids else {}
    )
    reasons.update(timed_out)
    positions: dict[int, int] = {}
    for job in snap.jobs:
        if job.status == et.JobStatus.RUNNABLE and job.id not in held_ids:
            positions[job.share_id] = positions.get(job.share_id, 0) + 1
    kept, held = [], []
    for job in snap.jobs:
        if job.id not in held_ids:
            kept.append(job)
            continue
        positions[job.share_id] = positions.get(job.share_id, 0) + 1
        until = index.jobs[job.id][_NOT_BEFORE]
        held.append(
            et.Pending(
                job_id=job.id,
                share_id=job.share_id,
                reason=reasons.get(job.id) or f"START_TIMEOUT: not placed again before {until:%H:%M:%S} UTC",
                queue_position=positions[job.share_id],
            )
        )
    return dataclasses.replace(snap, jobs=tuple(kept)), held
