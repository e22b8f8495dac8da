"""Jobs on several executors (multi-host.md): claims, the roster, lost tasks and start deadlines.

An executor that asks for tasks (`gang=1` on the work endpoint) claims instances of the environment's placed
jobs, oldest placement first: one task per claim, ranks in claim order. Nothing starts until every instance
of the job is claimed; then, in the same transaction, the job gets its roster (every rank's address, the main
address and port) and each member's next poll carries it (`go`). Every claim goes to the oldest job still
gathering, so two jobs never each hold half of what both need.

A pass settles what only time decides (`gangs_settle`, before the engine runs): a task whose executor went
silent for `lease_seconds` is lost (before the roster its claim is simply released), and a placed job not
started by all its tasks within the environment's `start_deadline_seconds` goes back to RUNNABLE
(START_TIMEOUT) and waits 1, 2, 4 ... up to 60 minutes before the pass places it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from django.db import transaction
from django.db.models import F, Q, Sum
from django.utils import timezone

from scheduling.errors import Conflict
from scheduling.models import (
    HOLDING_STATUSES,
    LIVE_TASK_STATES,
    EventKind,
    Executor,
    Job,
    JobQueue,
    JobStatus,
    JobTask,
    ServiceEnvironment,
    StopOutcome,
    TaskState,
)
from scheduling.passes.due import pass_due_by
from scheduling.passes.starts import start_backoff_seconds
from scheduling.passes.work import work_changed
from scheduling.selectors.jobs import executor_offers, offers_text
from scheduling.services.audit import job_event_record
from scheduling.services.executor import (
    MAX_STARTS_PER_CALL,
    gang_fail,
    job_stop,
    job_stop_request,
    job_stopped,
    ranks_text,
    tasks_lease_sync,
)
from scheduling.services.locks import queue_lock

DEFAULT_PORTS = (29400, 29499)
# How long a released claim is still listed to its executor as a stop, so it frees the slots it reserved.
RELEASED_LISTED_SECONDS = 60


@dataclass(frozen=True)
class GangWork:
    """What an executor that asks for tasks should do now: tasks it has just claimed, tasks whose roster is
    out (start them), and tasks to stop."""

    start: list[dict]
    go: list[dict]
    stop: list[dict]


def parse_ports(text: str) -> tuple[int, int]:
    """`29400-29499` (or one port) as (first, last); ValueError naming what is wrong."""
    first, _, last = text.partition("-")
    try:
        low, high = int(first), int(last or first)
    except ValueError:
        raise ValueError(f"ports must be FIRST-LAST, e.g. 29400-29499, not {text!r}") from None
    if not 1024 <= low <= high <= 65535:
        raise ValueError(f"ports must be FIRST-LAST within 1024-65535, first <= last, not {text!r}")
    return low, high


# --- claims and the roster --------------------------------------------------------------------------------


def gang_work_take(
    *,
    environment: ServiceEnvironment,
    executor: Executor,
    instance_type: str | None,
    free_slots: int,
    gpus_per_instance: dict[str, int] | None = None,
) -> GangWork:
    """Claim instances of the environment's gathering jobs for `executor` (at most `free_slots`), and list its
    tasks to start and to stop. Takes the queue lock itself when there is something to claim; the caller
    holds no lock."""
    if environment.executor != ServiceEnvironment.Executor.EXTERNAL:
        raise Conflict(f"environment {environment.name} runs its jobs on the simulated executor")
    jobs = Job.objects.filter(job_queue__service_environment=environment)
    if instance_type:
        jobs = jobs.filter(selected_instance_type__name=instance_type)
    gathering = jobs.filter(status=JobStatus.SCHEDULED, taken_at__isnull=True)
    claimed: list[int] = []  # task ids
    now = timezone.now()
    if free_slots > 0 and gathering.exists():
        with transaction.atomic():
            queue_lock(environment.job_queue.pk)
            claimed = _claim(
                environment=environment,
                executor=executor,
                rows=list(
                    gathering.order_by("scheduled_at", "id").values_list(
                        "id", "attempt", "selected_instance_count"
                    )[:MAX_STARTS_PER_CALL]
                ),
                free_slots=free_slots,
                now=now,
            )
    return GangWork(
        start=_start_entries(environment=environment, task_ids=claimed),
        go=_go_entries(executor=executor, exclude=claimed),
        stop=_stop_entries(environment=environment, executor=executor, jobs=jobs, now=now),
    )


def _claim(
    *, environment: ServiceEnvironment, executor: Executor, rows: list[tuple], free_slots: int, now
) -> list[int]:
    """Under the queue lock: one task per job the executor's free slots reach, oldest placement first."""
    held = dict(
        JobTask.objects.filter(
            job_id__in=[job_id for job_id, _, _ in rows], state=TaskState.WAITING, job__attempt=F("attempt")
        )
        .values("job_id")
        .annotate(instances=Sum("instances"))
        .values_list("job_id", "instances")
    )
    lease = now + timedelta(seconds=environment.lease_seconds)
    claimed: list[int] = []
    for job_id, attempt, count in rows:
        remaining = count - (held.get(job_id) or 0)
        if remaining <= 0:
            continue
        take = min(free_slots, remaining)
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.status != JobStatus.SCHEDULED or job.taken_at is not None or job.attempt != attempt:
            continue
        ranks = set(
            JobTask.objects.filter(job=job, attempt=attempt)
            .exclude(state=TaskState.RELEASED)
            .values_list("rank", flat=True)
        )
        rank = next(r for r in range(len(ranks) + 1) if r not in ranks)
        task = JobTask.objects.create(
            job=job,
            attempt=attempt,
            rank=rank,
            instances=take,
            executor=executor,
            executor_name=executor.name,
            address=executor.address or executor.host,
            claimed_at=now,
            lease_expires_at=lease,
        )
        claimed.append(task.pk)
        tasks_lease_sync(job=job)
        if take == remaining:
            _roster_issue(job=job, executor=executor, now=now)
        else:
            job.status_reason = (
                f"gathering: {count - remaining + take} of {count} instances claimed; "
                "nothing starts until all are"
            )
            job.save(update_fields=["status_reason"])
        free_slots -= take
        if free_slots <= 0:
            break
    if claimed:
        Executor.objects.filter(pk=executor.pk).update(
            jobs_taken=F("jobs_taken") + len(claimed),
            offered_slots=free_slots,
        )
        transaction.on_commit(partial(pass_due_by, environment.job_queue.pk, lease))
    return claimed


def _roster_issue(*, job: Job, executor: Executor, now) -> None:
    """Every instance is claimed: fix the main port (from rank 0's executor's range, one its other live
    jobs do not use), and hand out the roster; every member's waiting poll wakes."""
    tasks = list(JobTask.objects.filter(job=job, attempt=job.attempt).exclude(state=TaskState.RELEASED))
    main = next(t for t in tasks if t.rank == 0)
    owner = Executor.objects.filter(pk=main.executor_id).first()
    low, high = DEFAULT_PORTS
    if owner is not None and owner.ports:
        low, high = parse_ports(owner.ports)
    used = set(
        JobTask.objects.filter(executor_id=main.executor_id, state__in=LIVE_TASK_STATES, port__isnull=False)
        .exclude(pk=main.pk)
        .values_list("port", flat=True)
    )
    main.port = next((port for port in range(low, high + 1) if port not in used), low)
    main.save(update_fields=["port"])
    hosts = ", ".join(f"{t.rank}: {t.executor_name}" for t in sorted(tasks, key=lambda t: t.rank))
    job.status = JobStatus.STARTING
    job.taken_at = now
    job.roster_at = now
    job.status_reason = (
        f"starting: all {job.selected_instance_count} instance(s) claimed ({hosts}); main "
        f"{main.address}:{main.port}"
    )
    job.save(update_fields=["status", "taken_at", "roster_at", "status_reason"])
    work_changed(environment=job.job_queue.service_environment)


def _rosters(keys: set[tuple[int, int]]) -> dict[tuple[int, int], dict]:
    """The rosters of these (job id, attempt) pairs whose roster is out: every rank's address and instances,
    rank 0's address and the main port. One query."""
    if not keys:
        return {}
    by_attempt: dict[tuple[int, int], list[dict]] = {}
    for row in (
        JobTask.objects.filter(job_id__in={job_id for job_id, _ in keys})
        .exclude(state=TaskState.RELEASED)
        .order_by("job_id", "attempt", "rank")
        .values("job_id", "attempt", "rank", "address", "instances", "executor_name", "port")
    ):
        if (row["job_id"], row["attempt"]) in keys:
            by_attempt.setdefault((row["job_id"], row["attempt"]), []).append(row)
    return {
        key: {
            "main_address": tasks[0]["address"],
            "main_port": tasks[0]["port"],
            "world_size": len(tasks),
            "tasks": [
                {
                    "rank": t["rank"],
                    "address": t["address"],
                    "instances": t["instances"],
                    "executor": t["executor_name"],
                }
                for t in tasks
            ],
        }
        for key, tasks in by_attempt.items()
    }


def _start_entries(*, environment: ServiceEnvironment, task_ids: list[int]) -> list[dict]:
    """The start entries of the tasks just claimed, with their rosters when out. Two queries."""
    if not task_ids:
        return []
    tasks = list(
        JobTask.objects.filter(pk__in=task_ids)
        .select_related("job__selected_instance_type", "job__selected_training_plan")
        .order_by("job__scheduled_at", "job_id")
    )
    rosters = _rosters({(t.job_id, t.attempt) for t in tasks if t.job.roster_at is not None})
    entries = []
    for task in tasks:
        job = task.job
        entries.append(
            {
                "id": job.pk,
                "name": job.name,
                "attempt": task.attempt,
                "instance_type": job.selected_instance_type.name,
                "instance_count": job.selected_instance_count,
                "training_plan": job.selected_training_plan.name if job.selected_training_plan else None,
                "payload": job.payload,
                "stop_grace_seconds": environment.stop_grace_seconds,
                "lease_seconds": environment.lease_seconds,
                "task": task.rank,
                "task_instances": task.instances,
                "gpus_per_instance": job.selected_instance_type.gpu_count,
                "start_deadline": job.scheduled_at + timedelta(seconds=environment.start_deadline_seconds),
                "roster": rosters.get((job.pk, task.attempt)),
            }
        )
    return entries


def _go_entries(*, executor: Executor, exclude: list[int]) -> list[dict]:
    """The executor's tasks whose roster is out and that have not said they run: repeated until they do."""
    rows = (
        JobTask.objects.filter(
            executor=executor,
            state=TaskState.WAITING,
            job__attempt=F("attempt"),
            job__roster_at__isnull=False,
            job__status__in=(JobStatus.STARTING, JobStatus.RUNNING),
        )
        .exclude(pk__in=exclude)
        .order_by("job_id", "rank")
        .values_list("job_id", "attempt", "rank")
    )
    rows = list(rows)
    rosters = _rosters({(job_id, attempt) for job_id, attempt, _ in rows})
    return [
        {"id": job_id, "attempt": attempt, "task": rank, "roster": rosters[(job_id, attempt)]}
        for job_id, attempt, rank in rows
    ]


def _stop_entries(*, environment: ServiceEnvironment, executor: Executor, jobs, now) -> list[dict]:
    """The executor's tasks to stop: those of STOPPING jobs, and claims released lately (their slots are
    reserved on the executor until it hears); then the whole jobs it took without tasks, as before."""
    tasks = (
        JobTask.objects.filter(executor=executor, job__attempt=F("attempt"))
        .filter(
            # A job whose rank 0 succeeded lets the others finish: they are stopped only past its deadline
            # (their heartbeats are refused then).
            Q(state__in=LIVE_TASK_STATES, job__status=JobStatus.STOPPING)
            & ~Q(job__stop_outcome=StopOutcome.SUCCEEDED)
            | Q(state=TaskState.RELEASED, ended_at__gte=now - timedelta(seconds=RELEASED_LISTED_SECONDS))
        )
        .order_by("job_id", "rank")
        .values_list("job_id", "attempt", "rank", "job__stop_deadline")
    )
    stop = [
        {"id": job_id, "attempt": attempt, "task": rank, "deadline": deadline or now}
        for job_id, attempt, rank, deadline in tasks
    ]
    stop += [
        {"id": row["id"], "attempt": row["attempt"], "task": 0, "deadline": row["stop_deadline"]}
        for row in jobs.filter(status=JobStatus.STOPPING, taken_at__isnull=False, taken_by=executor)
        .order_by("stop_deadline", "id")
        .values("id", "attempt", "stop_deadline")
    ]
    return stop


# --- what the pass settles -----------------------------------------------------------------------------------


def gangs_settle(*, job_queue: JobQueue, job_ids: list[int], now: datetime) -> int:
    """Settle the queue's jobs whose lease ran out or whose start deadline passed; returns how many moved.

    Jobs taken whole without tasks and lost are left to the pass's own housekeeping (EXECUTOR_LOST). The
    caller holds the queue's lock.
    """
    environment = job_queue.service_environment
    deadline = timedelta(seconds=environment.start_deadline_seconds)
    moved = 0
    for job in Job.objects.select_for_update().filter(pk__in=job_ids).order_by("id"):
        if job.status not in HOLDING_STATUSES:
            continue
        tasks = list(JobTask.objects.select_for_update().filter(job=job, attempt=job.attempt))
        if tasks and job.lease_expires_at is not None and job.lease_expires_at <= now:
            _tasks_lost(job=job, tasks=tasks, environment=environment, now=now)
            moved += 1
            job.refresh_from_db()
        if (
            job.status in (JobStatus.SCHEDULED, JobStatus.STARTING)
            and job.scheduled_at is not None
            and job.scheduled_at + deadline <= now
        ):
            _start_timeout(job=job, environment=environment, now=now)
            moved += 1
    return moved


def _tasks_lost(*, job: Job, tasks: list[JobTask], environment: ServiceEnvironment, now) -> None:
    """Tasks whose lease ran out: a claim before the roster is released (nothing ran); after it, the task is
    LOST and the attempt ends as one (EXECUTOR_LOST, naming the rank); survivors stop with the grace period."""
    expired = [t for t in tasks if t.is_live and t.lease_expires_at is not None and t.lease_expires_at <= now]
    silence = f"no report for {environment.lease_seconds} s"
    for task in expired:
        task.ended_at, task.lease_expires_at = now, None
        if job.roster_at is None:
            task.state, task.reason = TaskState.RELEASED, f"claim released: {silence}"
        else:
            task.state, task.reason = TaskState.LOST, f"lost: {silence}"
            job_event_record(
                kind=EventKind.TASK_LOST,
                job=job,
                now=now,
                message=f"{job.name}: rank {task.rank} on {task.executor_name} lost ({silence})",
            )
            Executor.objects.filter(pk=task.executor_id).update(jobs_lost=F("jobs_lost") + 1)
        task.save(update_fields=["state", "reason", "ended_at", "lease_expires_at"])
    tasks_lease_sync(job=job)
    lost = [t for t in expired if t.state == TaskState.LOST]
    if not lost:
        return
    survivors = [t for t in tasks if t.is_live]
    named = ", ".join(f"rank {t.rank} on {t.executor_name}" for t in lost)
    if job.status == JobStatus.STOPPING:
        if not survivors:
            job_stopped(job=job, actor=None, now=now, how=f"its last task, {named}, was lost")
        return
    why = f"{named} sent no report for {environment.lease_seconds} s"
    if survivors:
        gang_fail(job=job, why=why, actor=None, now=now, lost=True)
        return
    job.failed_attempts += 1
    if job.failed_attempts < job.retry_attempts:
        left = job.retry_attempts - job.failed_attempts
        text = f"EXECUTOR_LOST: {why}; attempt {job.failed_attempts} failed, retrying, {left} attempt(s) left"
        status = JobStatus.RUNNABLE
    else:
        text = f"EXECUTOR_LOST: {why}; failed after {job.failed_attempts} attempt(s)"
        status = JobStatus.FAILED
    job_stop(job=job, status=status, reason=text, now=now)
    job_event_record(kind=EventKind.EXECUTOR_LOST, job=job, now=now, message=f"{job.name}: {text}")
    if status == JobStatus.FAILED:
        job_event_record(kind=EventKind.FAILED, job=job, now=now, message=f"{job.name}: {text}")


def _start_timeout(*, job: Job, environment: ServiceEnvironment, now) -> None:
    """Not started by all its tasks in time: back to RUNNABLE (START_TIMEOUT), not a failed attempt, and no
    placement before the backoff ends. Whatever runs of it is stopped with the grace period first."""
    why = start_wait_reason(job=job, environment=environment, now=now)
    job.start_timeouts += 1
    wait = start_backoff_seconds(job.start_timeouts)
    job.not_before = now + timedelta(seconds=wait)
    job.save(update_fields=["start_timeouts", "not_before"])
    text = (
        f"START_TIMEOUT: not started within {environment.start_deadline_seconds} s of placement: {why}; "
        f"not placed again before {job.not_before:%H:%M:%S} UTC"
    )
    job_event_record(kind=EventKind.START_TIMEOUT, job=job, now=now, message=f"{job.name}: {text}")
    if job.taken_at is not None:
        job_stop_request(job=job, outcome=JobStatus.RUNNABLE, reason=text, why=text, now=now)
    else:
        job_stop(job=job, status=JobStatus.RUNNABLE, reason=text, now=now)
        work_changed(environment=environment)


def start_wait_reason(*, job: Job, environment: ServiceEnvironment, now) -> str:
    """Why a placed job has not started: which ranks are missing or not running, and what the executors of
    its type offer (or that none could ever hold it). Two queries."""
    count = job.selected_instance_count or 0
    type_name = job.selected_instance_type.name if job.selected_instance_type_id else "?"
    tasks = list(JobTask.objects.filter(job=job, attempt=job.attempt).exclude(state=TaskState.RELEASED))
    claimed = sum(t.instances for t in tasks)
    parts = []
    if job.taken_at is not None and not tasks:
        parts.append(
            f"taken whole by {job.taken_by.name if job.taken_by_id else 'an executor'}, never reported running"
        )
    elif claimed < count:
        first_missing = len(tasks)
        parts.append(
            f"{count - claimed} of {count} instances never claimed (from rank {first_missing} on)"
            + (
                f"; claimed: {', '.join(f'rank {t.rank} by {t.executor_name}' for t in tasks)}"
                if tasks
                else ""
            )
        )
    else:
        waiting = [t.rank for t in tasks if t.state != TaskState.RUNNING]
        if waiting:
            parts.append(f"{ranks_text(waiting)} never reported running")
    parts.append(
        offers_text(executor_offers(environment=environment, now=now), type_name=type_name, count=count)
    )
    return "; ".join(parts)


def offer_update(*, environment: ServiceEnvironment, name: str, free_slots: int) -> None:
    """An executor's free slots changed while its poll waits: the poll wakes and claims with the new figure.
    An executor never seen is a Conflict (it polls first)."""
    changed = Executor.objects.filter(service_environment=environment, name=name).update(
        offered_slots=free_slots, last_seen_at=timezone.now()
    )
    if not changed:
        raise Conflict(f"no executor named {name} polls environment {environment.name}: poll first")
    work_changed(environment=environment)


def offered_slots(*, executor: Executor) -> int:
    """The free slots the executor last said it has (its poll, less what it claimed since, or its offer)."""
    return Executor.objects.filter(pk=executor.pk).values_list("offered_slots", flat=True).first() or 0
