"""Stopping jobs (behaviour.md#a-jobs-life): the fields each stop writes, and the housekeeping a pass does before the
engine.

A placed job the executor has taken needs time to stop: it goes to STOPPING, keeps its capacity, and becomes
its `stop_outcome` (RUNNABLE, CANCELLED or FAILED) once the executor reports it STOPPED or its
`stop_deadline` passes. A taken job whose executor reports nothing for `lease_seconds` is lost
(EXECUTOR_LOST). The functions here return field changes by attname, so the pass's bulk writes and the
services' single-row saves apply the same rules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from engine import types as et
from scheduling import retry
from scheduling.models import EventKind, JobStatus, StopOutcome
from scheduling.passes.snapshot import JOB_COLUMNS, Index

_LEASE = JOB_COLUMNS.index("lease_expires_at")

# Every field a stop or a lost lease may change, by attname: what the pass's bulk UPDATE writes for them.
PROTOCOL_FIELDS = (
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
    "roster_at",
    "not_before",
    "start_timeouts",
)


def untaken_fields() -> dict:
    """What no executor holds: a job that leaves its placement, or is placed anew, is taken by nobody."""
    return dict(
        taken_by_id=None,
        taken_at=None,
        lease_expires_at=None,
        stop_deadline=None,
        stop_outcome="",
        stop_reason="",
        roster_at=None,
    )


def released_fields(*, status: str, reason: str, now: datetime) -> dict:
    """A job leaves its placement: RUNNABLE goes back to its share's queue, any other status is final."""
    fields = dict(status=status, status_reason=reason, borrowed_instances=0, **untaken_fields())
    if status == JobStatus.RUNNABLE:
        # Back in the queue it holds nothing; a finished job keeps what it last ran on.
        fields.update(
            selected_instance_type_id=None,
            selected_instance_count=None,
            selected_training_plan_id=None,
            runnable_since=now,
            stopped_at=None,
        )
    else:
        fields.update(stopped_at=now)
    return fields


def stopping_fields(*, outcome: str, reason: str, why: str, deadline: datetime) -> dict:
    """A taken job is asked to stop: it keeps its placement until STOPPED or `deadline`, then is `outcome`."""
    return dict(
        status=JobStatus.STOPPING,
        status_reason=f"stopping until {deadline:%H:%M:%S}: {why}",
        stop_deadline=deadline,
        stop_outcome=outcome,
        stop_reason=reason,
    )


def stopped_fields(job: Mapping, *, now: datetime) -> dict:
    """A STOPPING job has stopped (reported STOPPED, or its deadline passed): it becomes its stop outcome."""
    return released_fields(status=job["stop_outcome"], reason=job["stop_reason"], now=now)


def lost_fields(job: Mapping, *, lease_seconds: int, now: datetime) -> tuple[dict, bool]:
    """A taken job whose executor went silent: a failed attempt, retried while attempts are left.

    Returns the changes and whether the job failed for good. A job that was STOPPING simply stops.
    """
    silence = f"EXECUTOR_LOST: no report from the executor for {lease_seconds} s"
    if job["status"] == JobStatus.STOPPING:
        changes = stopped_fields(job, now=now)
        return changes, changes["status"] == JobStatus.FAILED
    failed, again, verdict = failed_attempt(job, status_reason=silence)
    if again:
        reason = f"{silence}; attempt {failed} failed, {verdict}"
        status = JobStatus.RUNNABLE
    else:
        reason = f"{silence}; {verdict}"
        status = JobStatus.FAILED
    return {**released_fields(status=status, reason=reason, now=now), "failed_attempts": failed}, (
        status == JobStatus.FAILED
    )


def failed_attempt(job: Mapping, *, status_reason: str) -> tuple[int, bool, str]:
    """A job's current attempt failed: (failed attempts now, retried?, why), by its retry rules."""
    failed = job["failed_attempts"] + 1
    again, verdict = retry.retries(
        rules=job["retry_rules"],
        failed_attempts=failed,
        retry_attempts=job["retry_attempts"],
        status_reason=status_reason,
    )
    return failed, again, verdict


def timed_out_fields(job: Mapping, *, grace_seconds: int, now: datetime) -> dict:
    """A placed job ran past its attempt duration: a failed attempt (ATTEMPT_TIMEOUT), retried by its rules.

    A job its executor has taken stops gracefully (STOPPING, capacity held); one not taken stops at once.
    """
    why = f"ATTEMPT_TIMEOUT: the attempt ran longer than its {job['attempt_duration_seconds']} s"
    failed, again, verdict = failed_attempt(job, status_reason=why)
    outcome = JobStatus.RUNNABLE if again else JobStatus.FAILED
    reason = f"{why}; attempt {failed} failed, {verdict}" if again else f"{why}; {verdict}"
    if job["taken_at"] is not None:
        deadline = stop_deadline(now=now, grace_seconds=grace_seconds)
        changes = stopping_fields(outcome=outcome, reason=reason, why=why, deadline=deadline)
    else:
        changes = released_fields(status=outcome, reason=reason, now=now)
    return {**changes, "failed_attempts": failed, "nominated_entry": None, "nominated_victims": []}


def stop_deadline(*, now: datetime, grace_seconds: int) -> datetime:
    return now + timedelta(seconds=grace_seconds)


def stop_outcome_for(*, fails: bool) -> str:
    return StopOutcome.FAILED if fails else StopOutcome.RUNNABLE


@dataclass
class Settled:
    """What housekeeping changed before the engine ran: full job rows, events, attempts to close."""

    rows: dict[int, dict] = field(default_factory=dict)  # job id -> its row (JOB_COLUMNS names) after
    events: list[tuple[str, int, str]] = field(default_factory=list)  # (kind, job id, message)
    closed: dict[int, str] = field(default_factory=dict)  # job id -> why its open attempt ended
    lost_by_executor: dict[int, int] = field(default_factory=dict)  # executor id -> jobs lost


_TIMEOUT = JOB_COLUMNS.index("attempt_duration_seconds")
_SCHEDULED = JOB_COLUMNS.index("scheduled_at")


def _timed_out(current: tuple, now: datetime) -> bool:
    duration = current[_TIMEOUT]
    return (
        duration is not None
        and current[_SCHEDULED] is not None
        and (current[_SCHEDULED] + timedelta(seconds=duration) <= now)
    )


def stops_settle(
    *, snap: et.Snapshot, index: Index, lease_seconds: int, now: datetime, grace_seconds: int = 0
) -> tuple[et.Snapshot, Settled]:
    """Housekeeping before the engine: finish STOPPING jobs past their deadline, lose expired leases, and
    stop attempts past their `attempt_duration_seconds` (ATTEMPT_TIMEOUT, a failed attempt).

    `index.jobs` holds the jobs' current rows (JOB_COLUMNS). Returns the snapshot the engine should see
    (a job back to RUNNABLE is a RUNNABLE job in it; a finished one is gone) and the changes to write. The
    caller holds the queue's row lock.
    """
    settled = Settled()
    jobs: list[et.Job] = []
    for job in snap.jobs:
        current = index.jobs[job.id]
        lease = current[_LEASE]
        placed = job.status in et.HOLDING_STATUSES and job.status != et.JobStatus.STOPPING
        if job.status == et.JobStatus.RUNNABLE or (
            (lease is None or lease > now)
            and (job.stop_deadline is None or job.stop_deadline > now)
            and not (placed and _timed_out(current, now))
        ):
            jobs.append(job)  # nothing to settle (the common case: no row built)
            continue
        row = dict(zip(JOB_COLUMNS, current, strict=True))
        changes = None
        if job.status == et.JobStatus.STOPPING and row["stop_deadline"] <= now:
            changes = stopped_fields(row, now=now)
            message = (
                f"{row['name']} did not report STOPPED within its grace period; "
                f"it counts as stopped: {changes['status']}"
            )
            settled.events.append((EventKind.STOPPED, job.id, message))
        elif (
            job.status in et.HOLDING_STATUSES
            and row["lease_expires_at"] is not None
            and row["lease_expires_at"] <= now
        ):
            changes, _ = lost_fields(row, lease_seconds=lease_seconds, now=now)
            settled.events.append(
                (EventKind.EXECUTOR_LOST, job.id, f"{row['name']}: {changes['status_reason']}")
            )
            if row["taken_by_id"] is not None:
                lost = settled.lost_by_executor
                lost[row["taken_by_id"]] = lost.get(row["taken_by_id"], 0) + 1
        elif placed and _timed_out(current, now):
            changes = timed_out_fields(row, grace_seconds=grace_seconds, now=now)
            settled.events.append(
                (
                    EventKind.ATTEMPT_TIMEOUT,
                    job.id,
                    f"{row['name']}: {changes['stop_reason'] or changes['status_reason']}",
                )
            )
        if changes is None:
            jobs.append(job)
            continue
        settled.rows[job.id] = {**row, **changes}
        if changes["status"] == JobStatus.STOPPING:
            # It keeps its capacity until its executor reports it STOPPED or the deadline passes.
            jobs.append(
                dataclasses.replace(
                    job, status=et.JobStatus.STOPPING, stop_deadline=changes["stop_deadline"], nomination=None
                )
            )
            continue
        settled.closed[job.id] = changes["status_reason"]
        if changes["status"] == JobStatus.FAILED:
            settled.events.append((EventKind.FAILED, job.id, f"{row['name']}: {changes['status_reason']}"))
        elif changes["status"] == JobStatus.CANCELLED:
            settled.events.append((EventKind.CANCELLED, job.id, f"{row['name']} {changes['status_reason']}"))
        elif changes["status"] == JobStatus.SUCCEEDED:
            settled.events.append((EventKind.SUCCEEDED, job.id, f"{row['name']} {changes['status_reason']}"))
        elif changes["status"] == JobStatus.RUNNABLE:
            jobs.append(
                dataclasses.replace(
                    job,
                    status=et.JobStatus.RUNNABLE,
                    placement=None,
                    runnable_since=now,
                    taken=False,
                    stop_deadline=None,
                    nomination=None,
                )
            )
    if not settled.rows:
        return snap, settled
    return dataclasses.replace(snap, jobs=tuple(jobs)), settled
