"""Executors move placed jobs along their lifecycle: `job_report` (an executor's REST call) and the simulated
executor's tick; `job_stop` releases a job's capacity for them and for cancellations.

Every move holds the job's queue lock (`scheduling.services.locks.queue_lock`), taken first. A job that
finishes or fails asks for a pass, since its capacity is free for the jobs that wait.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from scheduling.errors import Conflict
from scheduling.models import (
    PLACED_STATUSES,
    EventKind,
    Job,
    JobAttempt,
    JobStatus,
    PendingState,
    ServiceEnvironment,
)
from scheduling.passes.requests import pass_request
from scheduling.services.audit import job_event_record
from scheduling.services.locks import job_lock, queue_lock

# Legal executor reports: current status -> statuses it may move to (SPEC 4).
REPORT_TRANSITIONS: dict[str, frozenset[str]] = {
    JobStatus.SCHEDULED: frozenset(
        {JobStatus.STARTING, JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.FAILED}
    ),
    JobStatus.STARTING: frozenset({JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.FAILED}),
    JobStatus.RUNNING: frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED}),
}
REPORTABLE_STATUSES = (JobStatus.STARTING, JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.FAILED)


@transaction.atomic
def job_report(*, job_id: int, status: str, reason: str = "", actor: AbstractBaseUser | None = None) -> Job:
    """An executor moves a placed job along its lifecycle; an illegal move raises Conflict (409).

    Repeating the job's current status is accepted and changes nothing, so executors may retry reports.
    """
    if status not in REPORTABLE_STATUSES:
        raise ValidationError({"status": [f"status must be one of {', '.join(REPORTABLE_STATUSES)}"]})
    job = job_lock(job_id)
    if job.status == status and status in (JobStatus.STARTING, JobStatus.RUNNING):
        return job
    if status not in REPORT_TRANSITIONS.get(job.status, frozenset()):
        raise Conflict(f"job {job.pk} is {job.status}; it cannot move to {status}")
    _job_advance(job=job, status=status, reason=reason, actor=actor, now=timezone.now())
    return job


def _job_advance(*, job: Job, status: str, reason: str, actor: AbstractBaseUser | None, now) -> None:
    """Apply one legal lifecycle move to a locked job and record it; the caller holds the queue lock."""
    if status == JobStatus.STARTING:
        job.status = JobStatus.STARTING
        job.status_reason = reason or "starting"
        job.save(update_fields=["status", "status_reason"])
        return
    if status == JobStatus.RUNNING:
        job.status = JobStatus.RUNNING
        job.started_at = now
        job.status_reason = reason or "running"
        job.save(update_fields=["status", "started_at", "status_reason"])
        JobAttempt.objects.filter(job=job, stopped_at__isnull=True).update(started_at=now)
        job_event_record(
            kind=EventKind.STARTED,
            job=job,
            actor=actor,
            now=now,
            message=f"{job.name} started on {job.selected_instance_type} x{job.selected_instance_count}",
        )
        return
    if status == JobStatus.SUCCEEDED:
        job_stop(job=job, status=JobStatus.SUCCEEDED, reason=reason or "succeeded", now=now)
        job_event_record(
            kind=EventKind.SUCCEEDED, job=job, actor=actor, now=now, message=f"{job.name} succeeded"
        )
        pass_request(job_queue_id=job.job_queue_id, trigger="finish")
        return
    # FAILED: retry while attempts are left (retry_attempts counts every attempt, the first included).
    job.failed_attempts += 1
    why = reason or "the executor reported a failure"
    if job.failed_attempts < job.retry_attempts:
        left = job.retry_attempts - job.failed_attempts
        text = f"attempt {job.failed_attempts} failed ({why}); retrying, {left} attempt(s) left"
        job_stop(job=job, status=JobStatus.RUNNABLE, reason=text, now=now)
    else:
        text = f"failed after {job.failed_attempts} attempt(s): {why}"
        job_stop(job=job, status=JobStatus.FAILED, reason=text, now=now)
    job_event_record(kind=EventKind.FAILED, job=job, actor=actor, now=now, message=f"{job.name}: {text}")
    pass_request(job_queue_id=job.job_queue_id, trigger="finish")


def job_stop(*, job: Job, status: str, reason: str, now) -> None:
    """Release a job's capacity and close its open attempt; RUNNABLE puts it back in its share's queue.

    The caller holds the job's queue lock and the job's row lock, and asks for the pass that follows.
    """
    was_placed = job.status in PLACED_STATUSES
    job.status = status
    job.status_reason = reason
    update = [
        "status",
        "status_reason",
        "failed_attempts",
        "selected_instance_type",
        "selected_instance_count",
        "selected_training_plan",
        "borrowed_instances",
        "stopped_at",
        "runnable_since",
    ]
    if status == JobStatus.RUNNABLE:
        # Back in the queue it holds nothing; a finished job keeps what it last ran on.
        job.runnable_since = now
        job.stopped_at = None
        job.selected_instance_type = None
        job.selected_instance_count = None
        job.selected_training_plan = None
    else:
        job.stopped_at = now
    job.borrowed_instances = 0
    job.save(update_fields=update)
    # Only a pass says why a job waits; until the next one, its status_reason is this transition's.
    PendingState.objects.filter(job_id=job.pk).delete()
    if was_placed:
        JobAttempt.objects.filter(job=job, stopped_at__isnull=True).update(
            stopped_at=now, status_reason=reason
        )


def simulated_executor_tick(*, job_queue_id: int, now=None) -> int:
    """Advance the queue's jobs on a `simulated` environment: start-up delay, then `duration_seconds`.

    SCHEDULED -> STARTING at once, STARTING -> RUNNING after SIMULATED_STARTUP_SECONDS from scheduling,
    RUNNING -> SUCCEEDED after duration_seconds (a job without one runs until cancelled). Returns moves made.
    """
    now = now or timezone.now()
    startup = timedelta(seconds=settings.SIMULATED_STARTUP_SECONDS)
    moves = 0
    with transaction.atomic():
        queue = queue_lock(job_queue_id)
        if queue.service_environment.executor != ServiceEnvironment.Executor.SIMULATED:
            return 0
        placed = Job.objects.select_for_update().filter(job_queue=queue, status__in=PLACED_STATUSES)
        for job in placed.order_by("id"):
            if job.status == JobStatus.SCHEDULED:
                _job_advance(
                    job=job, status=JobStatus.STARTING, reason="starting (simulated)", actor=None, now=now
                )
                moves += 1
            if job.status == JobStatus.STARTING and job.scheduled_at and job.scheduled_at + startup <= now:
                _job_advance(
                    job=job, status=JobStatus.RUNNING, reason="running (simulated)", actor=None, now=now
                )
                moves += 1
            if (
                job.status == JobStatus.RUNNING
                and job.duration_seconds is not None
                and job.started_at
                and job.started_at + timedelta(seconds=job.duration_seconds) <= now
            ):
                _job_advance(
                    job=job, status=JobStatus.SUCCEEDED, reason="completed (simulated)", actor=None, now=now
                )
                moves += 1
    return moves
