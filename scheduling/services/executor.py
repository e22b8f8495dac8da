"""Executors move placed jobs along their lifecycle: `job_report` (an executor's REST call) and the simulated
executor's tick; `job_stop` releases a job's capacity for them and for cancellations.

Every move holds the job's queue lock (`scheduling.services.locks.queue_lock`), taken first. A job that
finishes or fails asks for a pass, since its capacity is free for the jobs that wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from scheduling import retry
from scheduling.errors import Conflict, NotAllowed
from scheduling.models import (
    HOLDING_STATUSES,
    LIVE_TASK_STATES,
    EventKind,
    Executor,
    Job,
    JobAttempt,
    JobStatus,
    JobTask,
    PendingState,
    ServiceEnvironment,
    StopOutcome,
    TaskState,
)
from scheduling.passes.due import pass_due_by
from scheduling.passes.requests import pass_request
from scheduling.passes.stops import (
    released_fields,
    stop_deadline,
    stop_outcome_for,
    stopped_fields,
    stopping_fields,
)
from scheduling.passes.tasks import tasks_close
from scheduling.passes.work import work_changed
from scheduling.services.audit import job_event_record
from scheduling.services.locks import job_lock, queue_lock

STOPPED = "STOPPED"  # a report, not a status: the job stopped as asked, and becomes its stop outcome

# Legal executor reports: current status -> statuses it may move to (behaviour.md#a-jobs-life).
REPORT_TRANSITIONS: dict[str, frozenset[str]] = {
    JobStatus.SCHEDULED: frozenset(
        {JobStatus.STARTING, JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.FAILED}
    ),
    JobStatus.STARTING: frozenset({JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.FAILED}),
    JobStatus.RUNNING: frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED}),
    # A stopping job may still say it runs (its executor has not seen the stop yet), or that it ended.
    JobStatus.STOPPING: frozenset(
        {JobStatus.STARTING, JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.FAILED, STOPPED}
    ),
}
REPORTABLE_STATUSES = (JobStatus.STARTING, JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.FAILED, STOPPED)
# What a report says once the job's attempt has ended: repeating it is harmless.
ENDING_REPORTS = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, STOPPED})
OUTPUT_TAIL_CHARS = 8192


def executor_serves_check(*, actor: AbstractBaseUser | None, environment: ServiceEnvironment) -> None:
    """An executor account acts only on environments it serves (403 naming it); staff and the system on all."""
    if actor is None or actor.is_staff:
        return
    if not environment.executor_accounts.filter(pk=actor.pk).exists():
        raise NotAllowed(
            f"account {actor.get_username()} does not serve environment {environment.name}: "
            "an admin links executor accounts on the environment's edit form"
        )


@transaction.atomic
def job_report(
    *,
    job_id: int,
    status: str,
    reason: str = "",
    attempt: int | None = None,
    exit_code: int | None = None,
    output_tail: str = "",
    task: int = 0,
    executor: str = "",
    actor: AbstractBaseUser | None = None,
) -> Job:
    """An executor reports on one attempt of a job; a stale attempt or an illegal move raises Conflict (409).

    `task` names the task (rank) of a job run as tasks (multi-host.md); 0, the default, is the whole job of an
    executor that took it without tasks. `executor` (its name), when given, must be the task's.

    Every report about the current attempt renews the job's lease. Repeating a report changes nothing, so
    executors may retry them: the job's current status again, or the report that ended the attempt (which
    may have returned the job to RUNNABLE). A report about an earlier attempt never touches the current one.
    """
    if status not in REPORTABLE_STATUSES:
        raise ValidationError({"status": [f"status must be one of {', '.join(REPORTABLE_STATUSES)}"]})
    job = job_lock(job_id)
    # None once the queue is deleted: its jobs are finished, and a report about them only repeats an end.
    environment = job.job_queue.service_environment if job.job_queue_id is not None else None
    if environment is not None and environment.executor != ServiceEnvironment.Executor.EXTERNAL:
        # Another executor's account must not end (or renew) jobs the simulated executor runs.
        raise Conflict(f"{job} runs on environment {environment.name}, whose executor is simulated")
    if environment is not None:
        executor_serves_check(actor=actor, environment=environment)
    if attempt is not None and attempt > job.attempt:
        raise Conflict(
            f"attempt {attempt} of {job} was never handed out: its current attempt is {job.attempt}"
        )
    if attempt is not None and attempt != job.attempt:
        raise Conflict(
            f"attempt {attempt} of {job} is stale: its current attempt is {job.attempt}; "
            "stop that attempt's process if it still runs"
        )
    now = timezone.now()
    # A job run as tasks (some claim of its attempt not given back); a job taken whole after claims on it were
    # released is a whole job, as before.
    if (
        job.attempt
        and JobTask.objects.filter(job=job, attempt=job.attempt).exclude(state=TaskState.RELEASED).exists()
    ):
        return _task_report(
            job=job,
            rank=task,
            executor=executor,
            status=status,
            reason=reason,
            exit_code=exit_code,
            output_tail=output_tail,
            actor=actor,
            environment=environment,
            now=now,
        )
    if task != 0:
        raise Conflict(
            f"attempt {job.attempt} of {job} runs as one whole job, not as tasks: it has no task {task}"
        )
    if job.status not in HOLDING_STATUSES:
        if _ends_as(status, job.status) and _attempt_ended(job):
            # The attempt ended already (this report, repeated, or a stop the pass settled at its deadline a
            # moment before the executor's STOPPED arrived): keep what it says about the process, nothing moves.
            _attempt_record(job=job, exit_code=exit_code, output_tail=output_tail)
            return job
        raise Conflict(f"{job} is {job.status}; it cannot move to {status}")
    if status not in REPORT_TRANSITIONS[job.status] and status != job.status:
        raise Conflict(f"{job} is {job.status}; it cannot move to {status}")
    _lease_renew(job=job, environment=environment, now=now)
    _attempt_record(job=job, exit_code=exit_code, output_tail=output_tail)
    if job.status == status or (job.status == JobStatus.STOPPING and status in PROGRESS_REPORTS):
        return job  # a repeat, or progress of a job asked to stop: nothing moves
    _job_advance(job=job, status=status, reason=reason, actor=actor, now=now, exit_code=exit_code)
    return job


PROGRESS_REPORTS = frozenset({JobStatus.STARTING, JobStatus.RUNNING})
_TASK_ENDS = {
    JobStatus.SUCCEEDED: TaskState.SUCCEEDED,
    JobStatus.FAILED: TaskState.FAILED,
    STOPPED: TaskState.STOPPED,
}


def ranks_text(ranks) -> str:
    """`rank 2`, `ranks 0, 3`, `ranks 1-3`: how a person reads a set of ranks."""
    ranks = sorted(set(ranks))
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ", ".join(map(str, ranks))


def _task_report(
    *,
    job: Job,
    rank: int,
    executor: str,
    status: str,
    reason: str,
    exit_code: int | None,
    output_tail: str,
    actor: AbstractBaseUser | None,
    environment: ServiceEnvironment | None,
    now,
) -> Job:
    """A report about one task of an attempt run as tasks: the attempt is one unit (multi-host.md).

    The job is RUNNING once every task runs; a task that fails stops every other (graceful) and the attempt
    fails as one, naming the rank; the attempt ends once no task lives. A task that ended (lost, stopped,
    released) is refused any progress report (409), so its executor stops whatever still runs of it. The
    caller holds the job's queue lock and row lock.
    """
    tasks = JobTask.objects.select_for_update().filter(job=job, attempt=job.attempt, rank=rank)
    if executor:
        tasks = tasks.filter(executor_name=executor)
    task = tasks.order_by("-id").first()
    if task is None:
        whose = f" to {executor}" if executor else ""
        raise Conflict(f"task {rank} of attempt {job.attempt} of {job} was never handed out{whose}")
    _task_record(task=task, exit_code=exit_code, output_tail=output_tail)
    if task.state not in LIVE_TASK_STATES or job.status not in HOLDING_STATUSES:
        if status in ENDING_REPORTS:
            return job  # a repeat, or the end of a task the attempt already gave up: kept, nothing moves
        raise Conflict(
            f"rank {rank} of attempt {job.attempt} of {job} is {task.state.lower()}"
            f"{f' ({task.reason})' if task.reason else ''}; stop its process"
        )
    task.lease_expires_at = now + timedelta(seconds=environment.lease_seconds)
    task.save(update_fields=["lease_expires_at"])
    if task.executor_id is not None:
        Executor.objects.filter(pk=task.executor_id).update(last_seen_at=now)
    if status == JobStatus.STARTING:
        tasks_lease_sync(job=job)
        return job
    if status == JobStatus.RUNNING:
        if task.state == TaskState.WAITING:
            if job.roster_at is None:
                raise Conflict(
                    f"rank {rank} of {job} may not start yet: the job's instances are still being claimed"
                )
            task.state, task.started_at = TaskState.RUNNING, now
            task.save(update_fields=["state", "started_at"])
        tasks_lease_sync(job=job)
        tasks = list(JobTask.objects.filter(job=job, attempt=job.attempt).exclude(state=TaskState.RELEASED))
        if job.status in (JobStatus.SCHEDULED, JobStatus.STARTING) and all(
            t.state == TaskState.RUNNING for t in tasks
        ):
            hosts = ", ".join(t.executor_name for t in tasks)
            _job_advance(
                job=job,
                status=JobStatus.RUNNING,
                reason=f"running: {len(tasks)} task(s) on {hosts}"
                if len(tasks) > 1
                else (reason or "running"),
                actor=actor,
                now=now,
            )
        return job
    # The task ended.
    if status == STOPPED and job.roster_at is None:
        # A claim given up before the roster (an agent that restarted, or one with no room after all): nothing
        # ran, and its instances may be claimed again.
        task.state, task.ended_at, task.lease_expires_at = TaskState.RELEASED, now, None
        task.reason = reason or "released by its executor"
        task.save(update_fields=["state", "ended_at", "lease_expires_at", "reason"])
        tasks_lease_sync(job=job)
        work_changed(environment=environment)
        return job
    task.state, task.ended_at, task.lease_expires_at = _TASK_ENDS[status], now, None
    task.reason = reason
    task.save(update_fields=["state", "ended_at", "lease_expires_at", "reason"])
    # The attempt's exit code and output are its failing rank's, else rank 0's.
    first_failure = status == JobStatus.FAILED and job.status != JobStatus.STOPPING
    if first_failure or (
        task.rank == 0
        and not JobAttempt.objects.filter(job=job, attempt=job.attempt, exit_code__isnull=False).exists()
    ):
        _attempt_record(job=job, exit_code=exit_code, output_tail=output_tail)
    tasks_lease_sync(job=job)
    survivors = JobTask.objects.filter(job=job, attempt=job.attempt, state__in=LIVE_TASK_STATES)
    if job.status == JobStatus.STOPPING:
        if not survivors.exists():
            job_stopped(job=job, actor=actor, now=now, how=f"its last task, {_task_named(task)}, ended")
        return job
    if status == JobStatus.SUCCEEDED:
        if not survivors.exists():
            ended = JobTask.objects.filter(job=job, attempt=job.attempt).exclude(state=TaskState.RELEASED)
            count = ended.count()
            why = f"all {count} ranks exited 0" if count > 1 else (reason or "succeeded")
            _job_advance(job=job, status=JobStatus.SUCCEEDED, reason=why, actor=actor, now=now)
        elif task.rank == 0:
            # The main rank is done (AWS Batch's rule): the others get the grace period to finish, then stop.
            ranks = ranks_text(survivors.values_list("rank", flat=True))
            job_stop_request(
                job=job,
                outcome=StopOutcome.SUCCEEDED,
                reason=f"succeeded: rank 0 exited 0 ({ranks} had the grace period to finish)",
                why=f"rank 0 exited 0: {ranks} may finish until then",
                now=now,
            )
        return job
    # FAILED, or STOPPED without being asked: the attempt fails as one, naming the rank.
    why = f"{_task_named(task)} {reason or 'failed'}"
    if exit_code is not None and "exit" not in why:
        why += f" (exit code {exit_code})"
    if not survivors.exists():
        _job_advance(job=job, status=JobStatus.FAILED, reason=why, actor=actor, now=now)
        return job
    gang_fail(job=job, why=why, actor=actor, now=now)
    return job


def gang_fail(*, job: Job, why: str, actor: AbstractBaseUser | None, now, lost: bool = False) -> None:
    """One task of a running attempt failed or was lost: a failed attempt, retried while attempts are left;
    every other task is stopped with the grace period and the job holds its capacity until they have.

    The caller holds the job's queue lock and row lock.
    """
    job.failed_attempts += 1
    job.save(update_fields=["failed_attempts"])
    fails = job.failed_attempts >= job.retry_attempts
    code = "EXECUTOR_LOST: " if lost else ""
    if fails:
        text = f"{code}failed after {job.failed_attempts} attempt(s): {why}"
    else:
        left = job.retry_attempts - job.failed_attempts
        text = f"{code}attempt {job.failed_attempts} failed ({why}); retrying, {left} attempt(s) left"
    job_event_record(kind=EventKind.FAILED, job=job, actor=actor, now=now, message=f"{job.name}: {text}")
    job_stop_request(
        job=job,
        outcome=stop_outcome_for(fails=fails),
        reason=text,
        why=f"{why}: stopping the other ranks",
        now=now,
    )


def _task_named(task: JobTask) -> str:
    return f"rank {task.rank} on {task.executor_name}"


def tasks_lease_sync(*, job: Job) -> None:
    """The job's lease is its live tasks' earliest: the pass finds a lost task by it."""
    leases = [
        lease
        for lease in JobTask.objects.filter(
            job=job, attempt=job.attempt, state__in=LIVE_TASK_STATES, lease_expires_at__isnull=False
        ).values_list("lease_expires_at", flat=True)
    ]
    job.lease_expires_at = min(leases, default=None)
    job.save(update_fields=["lease_expires_at"])
    if job.lease_expires_at is not None:
        transaction.on_commit(partial(pass_due_by, job.job_queue_id, job.lease_expires_at))


def _task_record(*, task: JobTask, exit_code: int | None, output_tail: str) -> None:
    changes = []
    if exit_code is not None:
        task.exit_code = exit_code
        changes.append("exit_code")
    if output_tail:
        task.output_tail = output_tail[-OUTPUT_TAIL_CHARS:]
        changes.append("output_tail")
    if changes:
        task.save(update_fields=changes)


def _ends_as(report: str, status: str) -> bool:
    """Whether an ending report agrees with how the attempt ended (so repeating it is harmless)."""
    if report == JobStatus.SUCCEEDED:
        return status == JobStatus.SUCCEEDED
    return report in ENDING_REPORTS and status in (JobStatus.RUNNABLE, JobStatus.FAILED, JobStatus.CANCELLED)


def _attempt_ended(job: Job) -> bool:
    return JobAttempt.objects.filter(job=job, attempt=job.attempt, stopped_at__isnull=False).exists()


def _lease_renew(*, job: Job, environment: ServiceEnvironment, now) -> None:
    """A report takes the job if no executor had (older executors report without claiming) and renews its
    lease; the executor that took it was seen now."""
    job.taken_at = job.taken_at or now
    if environment.executor == ServiceEnvironment.Executor.EXTERNAL:  # the simulated executor never dies
        job.lease_expires_at = now + timedelta(seconds=environment.lease_seconds)
        transaction.on_commit(partial(pass_due_by, job.job_queue_id, job.lease_expires_at))
    job.save(update_fields=["taken_at", "lease_expires_at"])
    if job.taken_by_id is not None:
        Executor.objects.filter(pk=job.taken_by_id).update(last_seen_at=now)


def _attempt_record(*, job: Job, exit_code: int | None, output_tail: str) -> None:
    """Keep what the executor said about the attempt: its exit code and the last lines of its output."""
    changes: dict = {}
    if exit_code is not None:
        changes["exit_code"] = exit_code
    if output_tail:
        changes["output_tail"] = output_tail[-OUTPUT_TAIL_CHARS:]
    if changes:
        JobAttempt.objects.filter(job=job, attempt=job.attempt).update(**changes)


def _job_advance(
    *, job: Job, status: str, reason: str, actor: AbstractBaseUser | None, now, exit_code: int | None = None
) -> None:
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
            message=f"{job.name} started on {job.selected_instance_type} x{job.selected_instance_count}"
            # a job on several hosts: which ones (`running: 3 task(s) on a, b, c`)
            + (f" ({reason.removeprefix('running: ')})" if reason.startswith("running: ") else ""),
        )
        return
    if status == STOPPED or (status == JobStatus.FAILED and job.status == JobStatus.STOPPING):
        # A process stopped by SIGTERM often exits non-zero: for a job asked to stop, that is its stop.
        job_stopped(job=job, actor=actor, now=now, how=reason or "the executor reported it stopped")
        return
    if status == JobStatus.SUCCEEDED:
        job_stop(job=job, status=JobStatus.SUCCEEDED, reason=reason or "succeeded", now=now)
        job_event_record(
            kind=EventKind.SUCCEEDED, job=job, actor=actor, now=now, message=f"{job.name} succeeded"
        )
        pass_request(job_queue_id=job.job_queue_id, trigger="finish")
        return
    # FAILED: the job's retry rules, then attempts left, decide (retry_attempts counts every attempt).
    job.failed_attempts += 1
    why = reason or "the executor reported a failure"
    again, verdict = retry.retries(
        rules=job.retry_rules,
        failed_attempts=job.failed_attempts,
        retry_attempts=job.retry_attempts,
        status_reason=why,
        reason=reason,
        exit_code=exit_code,
    )
    if again:
        text = f"attempt {job.failed_attempts} failed ({why}); {verdict}"
        job_stop(job=job, status=JobStatus.RUNNABLE, reason=text, now=now)
    else:
        text = f"{verdict}: {why}"
        job_stop(job=job, status=JobStatus.FAILED, reason=text, now=now)
    job_event_record(kind=EventKind.FAILED, job=job, actor=actor, now=now, message=f"{job.name}: {text}")
    pass_request(job_queue_id=job.job_queue_id, trigger="finish")


_AFTER_STOPPING = {
    JobStatus.SUCCEEDED: "SUCCEEDED",
    JobStatus.RUNNABLE: "back in the queue (RUNNABLE)",
    JobStatus.CANCELLED: "CANCELLED",
    JobStatus.FAILED: "FAILED",
}


def job_stopped(*, job: Job, actor: AbstractBaseUser | None, now, how: str) -> None:
    """A STOPPING job has stopped: it becomes its stop outcome (RUNNABLE, CANCELLED or FAILED).

    The caller holds the job's queue lock and row lock.
    """
    _job_fields_save(
        job=job,
        changes=stopped_fields({"stop_outcome": job.stop_outcome, "stop_reason": job.stop_reason}, now=now),
    )
    _attempt_close(job=job, reason=job.status_reason, now=now)
    PendingState.objects.filter(job_id=job.pk).delete()
    job_event_record(
        kind=EventKind.STOPPED,
        job=job,
        actor=actor,
        now=now,
        message=f"{job.name} stopped ({how}): {_AFTER_STOPPING.get(job.status, job.status)}",
    )
    if job.status == JobStatus.FAILED:
        job_event_record(
            kind=EventKind.FAILED, job=job, actor=actor, now=now, message=f"{job.name}: {job.status_reason}"
        )
    elif job.status == JobStatus.CANCELLED:
        job_event_record(
            kind=EventKind.CANCELLED, job=job, actor=actor, now=now, message=f"{job.name} {job.status_reason}"
        )
    elif job.status == JobStatus.SUCCEEDED:
        job_event_record(
            kind=EventKind.SUCCEEDED, job=job, actor=actor, now=now, message=f"{job.name} {job.status_reason}"
        )
    pass_request(job_queue_id=job.job_queue_id, trigger="finish")


def job_stop(*, job: Job, status: str, reason: str, now) -> None:
    """Release a job's capacity and close its open attempt; RUNNABLE puts it back in its share's queue.

    The caller holds the job's queue lock and the job's row lock, and asks for the pass that follows.
    """
    was_holding = job.status in HOLDING_STATUSES
    changes = released_fields(status=status, reason=reason, now=now)
    # failed_attempts too: a FAILED report counts the attempt before it stops the job.
    changes.update(failed_attempts=job.failed_attempts, nominated_entry=None, nominated_victims=[])
    _job_fields_save(job=job, changes=changes)
    # Only a pass says why a job waits; until the next one, its status_reason is this transition's.
    PendingState.objects.filter(job_id=job.pk).delete()
    if was_holding:
        _attempt_close(job=job, reason=reason, now=now)


def job_stop_request(*, job: Job, outcome: str, reason: str, why: str, now) -> None:
    """Ask the executor that took a placed job to stop it: STOPPING, capacity held, until the deadline.

    The caller holds the job's queue lock and the job's row lock.
    """
    environment = job.job_queue.service_environment
    deadline = stop_deadline(now=now, grace_seconds=environment.stop_grace_seconds)
    _job_fields_save(
        job=job, changes=stopping_fields(outcome=outcome, reason=reason, why=why, deadline=deadline)
    )
    job_event_record(
        kind=EventKind.STOPPING,
        job=job,
        now=now,
        message=f"{job.name} stopping until {deadline:%H:%M:%S}: {why}",
    )
    work_changed(environment=environment)


def _job_fields_save(*, job: Job, changes: dict) -> None:
    for name, value in changes.items():
        setattr(job, name, value)
    job.save(update_fields=list(changes))


def _attempt_close(*, job: Job, reason: str, now) -> None:
    JobAttempt.objects.filter(job=job, stopped_at__isnull=True).update(stopped_at=now, status_reason=reason)
    if tasks_close([job.pk], now=now) and job.job_queue_id is not None:
        work_changed(environment=job.job_queue.service_environment)  # its executors free the claimed slots


def simulated_executor_tick(*, job_queue_id: int, now=None) -> int:
    """Advance the queue's jobs on a `simulated` environment: start-up delay, then `duration_seconds`.

    SCHEDULED -> STARTING at once (the simulated executor takes the job then), STARTING -> RUNNING after
    SIMULATED_STARTUP_SECONDS from scheduling, RUNNING -> SUCCEEDED after duration_seconds (a job without one
    runs until cancelled); a STOPPING job stops SIMULATED_STOP_SECONDS after it was asked to (never after its
    deadline). Returns moves made.
    """
    now = now or timezone.now()
    startup = timedelta(seconds=settings.SIMULATED_STARTUP_SECONDS)
    stop_delay = timedelta(seconds=settings.SIMULATED_STOP_SECONDS)
    moves = 0
    with transaction.atomic():
        queue = queue_lock(job_queue_id)
        if queue.service_environment.executor != ServiceEnvironment.Executor.SIMULATED:
            return 0
        grace = timedelta(seconds=queue.service_environment.stop_grace_seconds)
        placed = Job.objects.select_for_update().filter(job_queue=queue, status__in=HOLDING_STATUSES)
        for job in placed.order_by("id"):
            if job.status == JobStatus.STOPPING:
                if job.stop_deadline - grace + stop_delay <= now:
                    job_stopped(job=job, actor=None, now=now, how="simulated")
                    moves += 1
                continue
            if job.status == JobStatus.SCHEDULED:
                _job_advance(
                    job=job, status=JobStatus.STARTING, reason="starting (simulated)", actor=None, now=now
                )
                job.taken_at = now
                job.save(update_fields=["taken_at"])
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


# At most this many jobs are taken by one call of the work endpoint: an executor asks again for more.
MAX_STARTS_PER_CALL = 50


@dataclass(frozen=True)
class Work:
    """What an external executor should do now: jobs it has just taken to start, and jobs to stop."""

    start: list[dict]
    stop: list[dict]


def executor_seen(
    *,
    environment: ServiceEnvironment,
    name: str,
    host: str,
    now,
    instance_type: str = "",
    free_slots: int | None = None,
    gang_capable: bool = False,
    total_slots: int | None = None,
    address: str = "",
    ports: str = "",
) -> Executor:
    """The executor record for (environment, name), created on first sight; it was seen now, polling for
    `instance_type` with `free_slots` instances it could start (of `total_slots`), taking tasks or not."""
    executor, _ = Executor.objects.update_or_create(
        service_environment=environment,
        name=name,
        defaults={
            "host": host,
            "last_seen_at": now,
            "offered_instance_type": instance_type,
            "offered_slots": free_slots,
            "gang_capable": gang_capable,
            "total_slots": total_slots,
            "address": address,
            "ports": ports,
        },
    )
    return executor


def _has_tasks(*states: str) -> Exists:
    """Whether a job's current attempt has tasks in these states."""
    return Exists(JobTask.objects.filter(job=OuterRef("pk"), attempt=OuterRef("attempt"), state__in=states))


def _fitting(rows, free_slots: int | None) -> list[int]:
    """The ids of the (id, instances) rows to take, in order: all of them, or those that fit in `free_slots`."""
    if free_slots is None:
        return [job_id for job_id, _ in rows]
    chosen = []
    for job_id, count in rows:
        if count <= free_slots:
            chosen.append(job_id)
            free_slots -= count
    return chosen


def executor_work_take(
    *,
    environment: ServiceEnvironment,
    executor: Executor,
    instance_type: str | None = None,
    free_slots: int | None = None,
) -> Work:
    """Take the environment's SCHEDULED jobs nobody has taken (a claim), and list the caller's jobs to stop
    (those it took, and those no executor claimed).

    With `free_slots`, only jobs whose instances fit in what the executor can start now are taken, in order,
    a job too large for what is left skipped (left for an executor with room) for smaller ones after it.

    The claim is a conditional UPDATE (still SCHEDULED, still untaken) under the queue's row lock, which
    orders it with passes (a pass never preempts a job as untaken while it is being taken) and with other
    executors' claims: two executors never take the same job. Takes the queue lock itself when there is
    something to take; the caller holds no lock.
    """
    if environment.executor != ServiceEnvironment.Executor.EXTERNAL:
        raise Conflict(f"environment {environment.name} runs its jobs on the simulated executor")
    jobs = Job.objects.filter(job_queue__service_environment=environment)
    if instance_type:
        jobs = jobs.filter(selected_instance_type__name=instance_type)
    # A job some executor has claimed part of (as tasks) is that gang's: an executor without tasks never
    # takes it whole.
    untaken = jobs.filter(status=JobStatus.SCHEDULED, taken_at__isnull=True).exclude(
        _has_tasks(TaskState.WAITING)
    )
    if free_slots is not None:
        untaken = untaken.filter(selected_instance_count__lte=free_slots)
    taken: list[int] = []
    if free_slots != 0 and untaken.exists():
        now = timezone.now()
        with transaction.atomic():
            queue_lock(environment.job_queue.pk)
            rows = untaken.order_by("scheduled_at", "id").values_list("id", "selected_instance_count")
            candidates = _fitting(rows[:MAX_STARTS_PER_CALL], free_slots)
            claimed = Job.objects.filter(
                pk__in=candidates, status=JobStatus.SCHEDULED, taken_at__isnull=True
            ).update(
                taken_at=now,
                taken_by=executor,
                lease_expires_at=now + timedelta(seconds=environment.lease_seconds),
            )
            if claimed:
                lease = now + timedelta(seconds=environment.lease_seconds)
                transaction.on_commit(partial(pass_due_by, environment.job_queue.pk, lease))
                taken = list(
                    Job.objects.filter(pk__in=candidates, taken_by=executor, taken_at=now).values_list(
                        "id", flat=True
                    )
                )
                Executor.objects.filter(pk=executor.pk).update(jobs_taken=F("jobs_taken") + len(taken))
    start = (
        [
            {
                "id": row["id"],
                "name": row["name"],
                "attempt": row["attempt"],
                "instance_type": row["selected_instance_type__name"],
                "instance_count": row["selected_instance_count"],
                "training_plan": row["selected_training_plan__name"],
                "payload": row["payload"],
                "stop_grace_seconds": environment.stop_grace_seconds,
                "lease_seconds": environment.lease_seconds,
                # What each instance holds: an executor maps a job's instances to its GPUs with it.
                "gpus_per_instance": row["selected_instance_type__gpu_count"],
            }
            for row in Job.objects.filter(pk__in=taken)
            .order_by("scheduled_at", "id")
            .values(
                "id",
                "name",
                "attempt",
                "selected_instance_type__name",
                "selected_instance_type__gpu_count",
                "selected_instance_count",
                "selected_training_plan__name",
                "payload",
            )
        ]
        if taken
        else []
    )
    stop = [
        {"id": row["id"], "attempt": row["attempt"], "deadline": row["stop_deadline"]}
        # Only the caller's: an agent told to stop a job another agent runs would answer "not running here"
        # (STOPPED), freeing capacity a live process still holds. A job taken by a report alone (no claim)
        # belongs to no executor in particular: every caller gets it.
        for row in jobs.filter(status=JobStatus.STOPPING, taken_at__isnull=False)
        .filter(Q(taken_by=executor) | Q(taken_by__isnull=True))
        # a job run as tasks is stopped task by task, each by its own executor
        .exclude(_has_tasks(*(state for state in TaskState if state != TaskState.RELEASED)))
        .order_by("stop_deadline", "id")
        .values("id", "attempt", "stop_deadline")
    ]
    return Work(start=start, stop=stop)
