"""The tasks of an attempt (multi-host.md) when the attempt ends: whatever still lives of it ends with it.

A task still WAITING (claimed, nothing started) is RELEASED; one still RUNNING when its attempt ended (its stop
deadline passed, or its job was released while an executor still said it ran) counts as STOPPED. Two UPDATEs
whatever the number of jobs; the caller holds the queue's lock.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from scheduling.models import JobTask, TaskState


def tasks_close(job_ids: Iterable[int], *, now: datetime, reason: str = "") -> int:
    """End the live tasks of these jobs' attempts, which ended (or are placed anew). Returns how many claims
    were released (their executors hold slots for them until they hear)."""
    ids = sorted(set(job_ids))
    if not ids:
        return 0
    live = JobTask.objects.filter(job_id__in=ids)
    released = live.filter(state=TaskState.WAITING).update(
        state=TaskState.RELEASED,
        ended_at=now,
        lease_expires_at=None,
        reason=reason or "released: the attempt ended before it started",
    )
    live.filter(state=TaskState.RUNNING).update(
        state=TaskState.STOPPED,
        ended_at=now,
        lease_expires_at=None,
        reason=reason or "counted as stopped: the attempt ended",
    )
    return released
