"""Every write quotaportal makes: keyword-only, typed, `<entity>_<verb>`.

Locking: every change to a job's state holds its queue's row lock (`_lock_queue`), taken first, so a pass,
a cancellation, an executor report and the simulated executor never interleave on one queue. Passes are
enqueued after commit, never inside the transaction that caused them.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import IntegrityError, models, transaction
from django.utils import timezone

from scheduling import rules
from scheduling.errors import Conflict, NotAllowed
from scheduling.models import (
    PLACED_STATUSES,
    UNFINISHED_STATUSES,
    EnvironmentCapacity,
    Event,
    EventKind,
    Job,
    JobAttempt,
    JobPreference,
    JobQueue,
    JobStatus,
    Membership,
    PendingState,
    QuotaShare,
    SchedulingPass,
    ServiceEnvironment,
    ShareCapacityLimit,
    ShareUsageSample,
    State,
    Team,
    TrainingPlan,
)
from scheduling.passes import snapshot

logger = logging.getLogger("quotaportal.scheduling")


# --- passes are enqueued after commit -------------------------------------------------------------------


def pass_request(*, job_queue_id: int, trigger: str) -> None:
    """Ask for a pass on the queue once the current transaction commits (unless QUOTAPORTAL_AUTOPASS=0)."""
    if not settings.QUOTAPORTAL_AUTOPASS:
        return
    from scheduling.tasks import run_queue_pass

    # One request per queue per transaction: a batch of a hundred submissions wants one pass, not a hundred.
    # The callbacks live on the connection, so a rolled-back transaction forgets its requests with them.
    pending = transaction.get_connection().run_on_commit
    if any(getattr(callback, "quotaportal_queue", None) == job_queue_id for _, callback, *_ in pending):
        return

    def enqueue() -> None:
        # Across transactions too: while a pass for the queue waits in the broker, it will read this change
        # (it clears the mark before it reads), so a script submitting a hundred jobs one request at a time
        # gets a handful of passes, not a hundred. The mark expires, and every pass clears it, so a lost
        # message holds nothing up for longer than the beat's next pass.
        try:
            if settings.PASS_COALESCE_SECONDS and not cache.add(
                    pass_mark(job_queue_id), trigger, timeout=settings.PASS_COALESCE_SECONDS):
                return
        except Exception as exc:  # the cache is down: ask anyway, a pass too many is harmless
            logger.warning("pass requests for queue %s not coalesced: the cache is unavailable (%s)",
                           job_queue_id, exc)
        # The change has committed: a broker outage must not turn its request into an error. The beat runs
        # the queue's pass once the broker is back (it sends a pass for every queue every few seconds).
        try:
            run_queue_pass.delay(job_queue_id, trigger)
        except Exception as exc:  # kombu.exceptions.OperationalError, or whatever the transport raises
            pass_mark_clear(job_queue_id)
            logger.warning("pass for queue %s not enqueued (%s): the broker is unavailable (%s); "
                           "the beat will run it", job_queue_id, trigger, exc)

    enqueue.quotaportal_queue = job_queue_id
    transaction.on_commit(enqueue)


def pass_mark(job_queue_id: int) -> str:
    """The cache key that says a pass for the queue is waiting in the broker."""
    return f"quotaportal:pass-queued:{job_queue_id}"


def pass_mark_clear(job_queue_id: int) -> None:
    """Called by a pass before it reads the queue: requests from now on need a pass of their own."""
    try:
        cache.delete(pass_mark(job_queue_id))
    except Exception as exc:
        logger.warning("pass mark of queue %s not cleared: the cache is unavailable (%s)", job_queue_id, exc)


def _lock_queue(job_queue_id: int) -> JobQueue:
    """Take the queue's row lock; the caller must be inside `transaction.atomic`.

    FOR NO KEY UPDATE serializes everything that changes the queue's jobs, as FOR UPDATE would, but lets a
    submission insert rows that refer to the queue meanwhile: their foreign-key checks take FOR KEY SHARE,
    which FOR UPDATE blocks, so every submission used to wait for the pass in progress.
    """
    return (JobQueue.objects.select_for_update(no_key=True).select_related("service_environment")
            .get(pk=job_queue_id))


# --- configuration audit --------------------------------------------------------------------------------


def config_state(obj: models.Model) -> dict[str, Any]:
    """A JSON-able picture of a configuration object, limits included, for before/after audit events."""
    state: dict[str, Any] = {}
    for model_field in obj._meta.concrete_fields:
        value = getattr(obj, model_field.attname)
        state[model_field.name] = value if isinstance(value, (int, float, str, bool, type(None))) else str(value)
    if obj.pk is not None:
        if hasattr(obj, "capacity_limits"):
            state["capacity_limits"] = {
                limit.instance_type.name: limit.max_capacity
                for limit in obj.capacity_limits.select_related("instance_type")
            }
        if hasattr(obj, "quota_shares") and obj._meta.model_name == "trainingplan":
            state["quota_shares"] = sorted(obj.quota_shares.values_list("name", flat=True))
    return state


def config_change_record(
    *, actor: AbstractBaseUser | None, obj: models.Model, action: str,
    before: dict[str, Any] | None, after: dict[str, Any] | None,
) -> Event | None:
    """Write the CONFIG_CHANGED audit event for a created, changed or deleted configuration object."""
    if action == "changed" and before == after:
        return None
    label = obj._meta.verbose_name
    changed = sorted(k for k in set(before or {}) | set(after or {}) if (before or {}).get(k) != (after or {}).get(k))
    who = getattr(actor, "username", None) or "system"
    detail = f": {', '.join(changed)}" if action == "changed" else ""
    queue_id = _queue_id_of(obj)
    event = Event.objects.create(
        kind=EventKind.CONFIG_CHANGED,
        actor=actor if getattr(actor, "pk", None) else None,
        job_queue_id=queue_id,
        quota_share=obj if isinstance(obj, QuotaShare) and action != "deleted" else None,
        message=f"{who} {action} {label} {obj}{detail}",
        data={"object": obj._meta.label, "id": obj.pk, "action": action, "before": before, "after": after},
    )
    if queue_id is not None:
        pass_request(job_queue_id=queue_id, trigger="config")
    return event


def _queue_id_of(obj: models.Model) -> int | None:
    if isinstance(obj, JobQueue):
        return obj.pk
    if isinstance(obj, ServiceEnvironment):
        return JobQueue.objects.filter(service_environment=obj).values_list("pk", flat=True).first()
    return getattr(obj, "job_queue_id", None)


# --- quota shares ---------------------------------------------------------------------------------------


@transaction.atomic
def quota_share_delete(*, share: QuotaShare, actor: AbstractBaseUser | None) -> None:
    """Delete a DISABLED share, cancelling its unfinished jobs first (SPEC 1)."""
    if share.state != State.DISABLED:
        raise ValidationError({"state": [f"disable share {share.name} before deleting it"]})
    _lock_queue(share.job_queue_id)
    now = timezone.now()
    for job in Job.objects.select_for_update().filter(quota_share=share, status__in=UNFINISHED_STATUSES):
        _job_stop(job=job, status=JobStatus.CANCELLED, reason=f"share {share.name} was deleted", now=now)
        _event(kind=EventKind.CANCELLED, job=job, message=f"cancelled: share {share.name} was deleted",
               actor=actor, now=now)
    before = config_state(share)
    config_change_record(actor=actor, obj=share, action="deleted", before=before, after=None)
    share.delete()


# --- jobs -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobSubmission:
    name: str
    job_queue: JobQueue
    quota_share: QuotaShare
    instance_preferences: Sequence[rules.PreferenceInput]
    scheduling_priority: int = 0
    retry_attempts: int = 1
    preemption_retries_before_termination: int | None = None
    max_pending_seconds: int | None = None
    duration_seconds: int | None = None
    payload: dict = field(default_factory=dict)
    client_token: str | None = None


def user_team_role(user: AbstractBaseUser, team_id: int) -> str | None:
    return Membership.objects.filter(user=user, team_id=team_id).values_list("role", flat=True).first()


def job_submission_validate(*, user: AbstractBaseUser, submission: JobSubmission, now=None) -> Job:
    """Check a submission against every rule of SPEC section 4 and return the unsaved job; writes nothing.

    Raises NotAllowed for another team's share, and one ValidationError naming every field at fault.
    """
    share = submission.quota_share
    if not user.is_staff and user_team_role(user, share.team_id) is None:
        raise NotAllowed(f"you are not a member of team {share.team.name}, which owns share {share.name}")
    now = now or timezone.now()
    job = Job(
        name=submission.name, job_queue=submission.job_queue, quota_share=share, team_id=share.team_id,
        submitted_by=user, scheduling_priority=submission.scheduling_priority,
        retry_attempts=submission.retry_attempts,
        preemption_retries_before_termination=submission.preemption_retries_before_termination,
        max_pending_seconds=submission.max_pending_seconds, duration_seconds=submission.duration_seconds,
        payload=submission.payload, client_token=submission.client_token or None,
        created_at=now, runnable_since=now, status_reason="waiting for the next scheduling pass",
    )
    errors: dict[str, list[str]] = {}
    checks = (
        lambda: rules.validate_job_target(job_queue=submission.job_queue, quota_share=share),
        lambda: rules.validate_preferences(job_queue=submission.job_queue, quota_share=share,
                                           entries=submission.instance_preferences, now=now),
        lambda: rules.validate_payload(submission.payload),
        # Field validators only: the database constraints stay the backstop (checking them here costs a
        # query each), and client_token races are settled by the unique constraint below.
        lambda: job.full_clean(exclude=["job_queue", "quota_share", "team", "submitted_by", "payload"],
                               validate_unique=False, validate_constraints=False),
    )
    for check in checks:
        try:
            check()
        except ValidationError as exc:
            for key, messages in exc.message_dict.items():
                errors.setdefault(key, []).extend(messages)
    if errors:
        raise ValidationError(errors)
    return job


def job_submit(*, user: AbstractBaseUser, submission: JobSubmission) -> tuple[Job, bool]:
    """Validate a submission whole and create the job with its preference list; (job, created).

    A repeated `client_token` of the same user returns the first job, even when the repeats race: the
    unique constraint decides, and the loser reads the winner's row. A submitter who can no longer see that
    job (they left its team) gets a Conflict that says nothing about it.
    """
    if submission.client_token:
        existing = Job.objects.filter(submitted_by=user, client_token=submission.client_token).first()
        if existing is not None:
            return _job_repeated(user=user, job=existing), False
    now = timezone.now()
    job = job_submission_validate(user=user, submission=submission, now=now)
    share = submission.quota_share
    try:
        with transaction.atomic():
            job.save()
            JobPreference.objects.bulk_create([
                JobPreference(job=job, position=i, instance_type=e.instance_type, instance_count=e.instance_count,
                              training_plan=e.training_plan)
                for i, e in enumerate(submission.instance_preferences)
            ])
            entries = ", ".join(_entry_label(e) for e in submission.instance_preferences)
            _event(kind=EventKind.SUBMITTED, job=job, actor=user, now=now,
                   message=f"{user.get_username()} submitted {job.name} to share {share.name}: {entries}")
            pass_request(job_queue_id=job.job_queue_id, trigger="submit")
    except IntegrityError:
        if not submission.client_token:
            raise
        existing = Job.objects.get(submitted_by=user, client_token=submission.client_token)
        return _job_repeated(user=user, job=existing), False
    return job, True


def _job_repeated(*, user: AbstractBaseUser, job: Job) -> Job:
    """The job a repeated client_token submitted, if its submitter may still see it (staff, its team)."""
    if user.is_staff or user_team_role(user, job.team_id) is not None:
        return job
    raise Conflict(f"client_token {job.client_token!r} was already used for a job you can no longer see; "
                   "submit with a new client_token")


def _entry_label(entry: rules.PreferenceInput) -> str:
    plan = f" on plan {entry.training_plan.name}" if entry.training_plan else ""
    return f"{entry.instance_type.name} x{entry.instance_count}{plan}"


def job_can_manage(*, user: AbstractBaseUser, job: Job) -> bool:
    """Staff, the submitter and the managers of the job's team may cancel or reprioritise it."""
    if user.is_staff or job.submitted_by_id == user.pk:
        return True
    return user_team_role(user, job.team_id) == Membership.Role.MANAGER


@transaction.atomic
def job_cancel(*, job_id: int, actor: AbstractBaseUser | None, reason: str = "") -> Job:
    """Cancel an unfinished job; its capacity is free for the pass that follows."""
    job = Job.objects.get(pk=job_id)
    _lock_queue(job.job_queue_id)
    job = Job.objects.select_for_update().get(pk=job_id)
    if actor is not None and not job_can_manage(user=actor, job=job):
        raise NotAllowed("only the submitter, a manager of the team or staff may cancel this job")
    if job.status not in UNFINISHED_STATUSES:
        raise Conflict(f"job {job.pk} is already {job.status} and cannot be cancelled")
    now = timezone.now()
    who = getattr(actor, "username", None) or "system"
    text = f"cancelled by {who}" + (f": {reason}" if reason else "")
    _job_stop(job=job, status=JobStatus.CANCELLED, reason=text, now=now)
    _event(kind=EventKind.CANCELLED, job=job, actor=actor, now=now, message=f"{job.name} {text}")
    pass_request(job_queue_id=job.job_queue_id, trigger="cancel")
    return job


@transaction.atomic
def job_set_priority(*, job_id: int, priority: int, actor: AbstractBaseUser | None) -> Job:
    """Change an unfinished job's scheduling_priority (0..9999); audited."""
    if not 0 <= priority <= 9999:
        raise ValidationError({"scheduling_priority": ["scheduling_priority must be between 0 and 9999"]})
    job = Job.objects.get(pk=job_id)
    _lock_queue(job.job_queue_id)
    job = Job.objects.select_for_update().get(pk=job_id)
    if actor is not None and not job_can_manage(user=actor, job=job):
        raise NotAllowed("only the submitter, a manager of the team or staff may change this job's priority")
    if job.status not in UNFINISHED_STATUSES:
        raise Conflict(f"job {job.pk} is {job.status}; only unfinished jobs can change priority")
    if job.scheduling_priority == priority:
        return job
    before = job.scheduling_priority
    job.scheduling_priority = priority
    job.save(update_fields=["scheduling_priority"])
    who = getattr(actor, "username", None) or "system"
    _event(kind=EventKind.CONFIG_CHANGED, job=job, actor=actor, now=timezone.now(),
           message=f"{who} changed the priority of {job.name} from {before} to {priority}",
           data={"object": "scheduling.Job", "id": job.pk, "action": "changed",
                 "before": {"scheduling_priority": before}, "after": {"scheduling_priority": priority}})
    pass_request(job_queue_id=job.job_queue_id, trigger="priority")
    return job


# Legal executor reports: current status -> statuses it may move to (SPEC 4).
REPORT_TRANSITIONS: dict[str, frozenset[str]] = {
    JobStatus.SCHEDULED: frozenset({JobStatus.STARTING, JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.FAILED}),
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
    job = Job.objects.get(pk=job_id)
    _lock_queue(job.job_queue_id)
    job = Job.objects.select_for_update().get(pk=job_id)
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
        _event(kind=EventKind.STARTED, job=job, actor=actor, now=now,
               message=f"{job.name} started on {job.selected_instance_type} x{job.selected_instance_count}")
        return
    if status == JobStatus.SUCCEEDED:
        _job_stop(job=job, status=JobStatus.SUCCEEDED, reason=reason or "succeeded", now=now)
        _event(kind=EventKind.SUCCEEDED, job=job, actor=actor, now=now, message=f"{job.name} succeeded")
        pass_request(job_queue_id=job.job_queue_id, trigger="finish")
        return
    # FAILED: retry while attempts are left (retry_attempts counts every attempt, the first included).
    job.failed_attempts += 1
    why = reason or "the executor reported a failure"
    if job.failed_attempts < job.retry_attempts:
        left = job.retry_attempts - job.failed_attempts
        text = f"attempt {job.failed_attempts} failed ({why}); retrying, {left} attempt(s) left"
        _job_stop(job=job, status=JobStatus.RUNNABLE, reason=text, now=now)
    else:
        text = f"failed after {job.failed_attempts} attempt(s): {why}"
        _job_stop(job=job, status=JobStatus.FAILED, reason=text, now=now)
    _event(kind=EventKind.FAILED, job=job, actor=actor, now=now, message=f"{job.name}: {text}")
    pass_request(job_queue_id=job.job_queue_id, trigger="finish")


def _job_stop(*, job: Job, status: str, reason: str, now) -> None:
    """Release a job's capacity and close its open attempt; RUNNABLE puts it back in its share's queue."""
    was_placed = job.status in PLACED_STATUSES
    job.status = status
    job.status_reason = reason
    update = ["status", "status_reason", "failed_attempts", "selected_instance_type", "selected_instance_count",
              "selected_training_plan", "borrowed_instances", "stopped_at", "runnable_since"]
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
        JobAttempt.objects.filter(job=job, stopped_at__isnull=True).update(stopped_at=now, status_reason=reason)


def _event(*, kind: str, job: Job, message: str, now, actor: AbstractBaseUser | None = None,
           data: dict | None = None) -> Event:
    return Event.objects.create(
        kind=kind, job=job, job_queue_id=job.job_queue_id, quota_share_id=job.quota_share_id,
        instance_type_id=job.selected_instance_type_id, instances=job.selected_instance_count,
        actor=actor if getattr(actor, "pk", None) else None, message=message, data=data or {}, created_at=now,
    )


# --- the scheduling pass --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PassResult:
    job_queue_id: int
    admitted: list[int]
    preempted: list[int]
    duration_ms: float
    record: SchedulingPass | None


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Hold Python's cyclic garbage collector off while the queue's row lock is held.

    A pass over a busy queue builds some hundred thousand short-lived objects, and the collector would stop it
    about 150 times to scan them (a tenth of the pass on 12,000 jobs, measured by `bench_pass`), while every
    change to the queue waits for the lock. Reference counting frees them as the pass drops them; whatever cycles
    are left wait for the collector's next run, after the commit.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def queue_pass_run(*, job_queue_id: int, trigger: str = "beat") -> PassResult:
    """One scheduling pass over one queue, in one transaction, serialized per queue by its row lock (SPEC 3)."""
    started = time.perf_counter()
    with _collector_paused(), transaction.atomic():
        queue = _lock_queue(job_queue_id)
        now = timezone.now()
        outcome = snapshot.pass_execute(job_queue=queue, now=now, trigger=trigger, started=started)
    logger.info(
        "pass queue=%s trigger=%s admitted=%d preempted=%d duration_ms=%.1f",
        queue.name, trigger, len(outcome.admitted), len(outcome.preempted), outcome.duration_ms,
    )
    return PassResult(job_queue_id=job_queue_id, admitted=outcome.admitted, preempted=outcome.preempted,
                      duration_ms=outcome.duration_ms, record=outcome.record)


# --- the simulated executor -----------------------------------------------------------------------------


def simulated_executor_tick(*, job_queue_id: int, now=None) -> int:
    """Advance the queue's jobs on a `simulated` environment: start-up delay, then `duration_seconds`.

    SCHEDULED -> STARTING at once, STARTING -> RUNNING after SIMULATED_STARTUP_SECONDS from scheduling,
    RUNNING -> SUCCEEDED after duration_seconds (a job without one runs until cancelled). Returns moves made.
    """
    now = now or timezone.now()
    startup = timedelta(seconds=settings.SIMULATED_STARTUP_SECONDS)
    moves = 0
    with transaction.atomic():
        queue = _lock_queue(job_queue_id)
        if queue.service_environment.executor != ServiceEnvironment.Executor.SIMULATED:
            return 0
        placed = Job.objects.select_for_update().filter(job_queue=queue, status__in=PLACED_STATUSES)
        for job in placed.order_by("id"):
            if job.status == JobStatus.SCHEDULED:
                _job_advance(job=job, status=JobStatus.STARTING, reason="starting (simulated)", actor=None, now=now)
                moves += 1
            if job.status == JobStatus.STARTING and job.scheduled_at and job.scheduled_at + startup <= now:
                _job_advance(job=job, status=JobStatus.RUNNING, reason="running (simulated)", actor=None, now=now)
                moves += 1
            if (job.status == JobStatus.RUNNING and job.duration_seconds is not None and job.started_at
                    and job.started_at + timedelta(seconds=job.duration_seconds) <= now):
                _job_advance(job=job, status=JobStatus.SUCCEEDED, reason="completed (simulated)", actor=None,
                             now=now)
                moves += 1
    return moves


# --- history ---------------------------------------------------------------------------------------------


def history_prune(*, now=None) -> int:
    """Delete utilization samples and pass records older than HISTORY_DAYS; returns rows deleted."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.HISTORY_DAYS)
    samples, _ = ShareUsageSample.objects.filter(taken_at__lt=cutoff).delete()
    passes, _ = SchedulingPass.objects.filter(started_at__lt=cutoff).delete()
    return samples + passes


# --- configuration writes (API) -------------------------------------------------------------------------
#
# Each write validates with `scheduling.rules` (cross-row) and the model's own field rules, saves, and records
# the CONFIG_CHANGED event in the same transaction, so a rejected change leaves neither rows nor an event.


def _check_fields(obj: models.Model) -> None:
    """The model's field-level rules (and unique fields); the cross-row rules have already run."""
    obj.full_clean(validate_constraints=False)


def _capacities(limits: Sequence[rules.LimitInput]) -> dict:
    """Limits as the instance type -> max_capacity mapping `rules.validate_environment_capacity` reads."""
    seen: dict[str, int] = {}
    for limit in limits:
        seen[limit.instance_type.name] = seen.get(limit.instance_type.name, 0) + 1
    repeated = sorted(name for name, times in seen.items() if times > 1)
    if repeated:
        message = f"instance type {', '.join(repeated)} is listed more than once"
        raise ValidationError({"capacity_limits": [message]})
    return {limit.instance_type: limit.max_capacity for limit in limits}


def _limits_of(obj: models.Model) -> list[rules.LimitInput]:
    return [rules.LimitInput(limit.instance_type, limit.max_capacity)
            for limit in obj.capacity_limits.select_related("instance_type")]


@transaction.atomic
def config_object_create(*, model: type[models.Model], fields: dict[str, Any],
                         actor: AbstractBaseUser | None) -> models.Model:
    """Create a configuration object without nested rows (instance type, team, job queue); audited."""
    obj = model(**fields)
    obj.full_clean()
    obj.save()
    config_change_record(actor=actor, obj=obj, action="created", before=None, after=config_state(obj))
    return obj


@transaction.atomic
def config_object_update(*, obj: models.Model, changes: dict[str, Any],
                         actor: AbstractBaseUser | None) -> models.Model:
    """Change a configuration object without nested rows (instance type, team); audited."""
    obj = type(obj).objects.select_for_update().get(pk=obj.pk)
    before = config_state(obj)
    for name, value in changes.items():
        setattr(obj, name, value)
    obj.full_clean()
    obj.save()
    config_change_record(actor=actor, obj=obj, action="changed", before=before, after=config_state(obj))
    return obj


@transaction.atomic
def config_object_delete(*, obj: models.Model, actor: AbstractBaseUser | None) -> None:
    """Delete a configuration object nothing protects; 409 naming what still refers to it otherwise."""
    config_change_record(actor=actor, obj=obj, action="deleted", before=config_state(obj), after=None)
    try:
        obj.delete()
    except models.ProtectedError as exc:
        # Raising rolls the audit event back with everything else.
        counts: dict[tuple[str, str], int] = {}
        for row in exc.protected_objects:
            label = (str(row._meta.verbose_name), str(row._meta.verbose_name_plural))
            counts[label] = counts.get(label, 0) + 1
        used_by = ", ".join(f"{n} {one if n == 1 else many}" for (one, many), n in sorted(counts.items()))
        raise Conflict(f"{obj._meta.verbose_name} {obj} is still referenced by {used_by}; "
                       f"remove those first") from None


@transaction.atomic
def job_queue_update(*, job_queue: JobQueue, changes: dict[str, Any],
                     actor: AbstractBaseUser | None) -> JobQueue:
    """Change a queue; a new environment must hold the limits of the queue's shares (SPEC 2)."""
    job_queue = _lock_queue(job_queue.pk)
    environment = changes.get("service_environment")
    if environment is not None and environment.pk != job_queue.service_environment_id:
        try:
            rules.validate_environment_capacity(job_queue=job_queue,
                                                capacities=_capacities(_limits_of(environment)))
        except ValidationError as exc:
            raise ValidationError({"service_environment": exc.messages}) from None
    return config_object_update(obj=job_queue, changes=changes, actor=actor)


@transaction.atomic
def job_queue_delete(*, job_queue: JobQueue, actor: AbstractBaseUser | None) -> None:
    """Delete a DISABLED queue with its shares, plans and jobs, as AWS Batch does; the events stay."""
    if job_queue.state != State.DISABLED:
        raise ValidationError({"state": [f"disable queue {job_queue.name} before deleting it"]})
    _lock_queue(job_queue.pk)
    # The jobs go first: their preference lists protect the queue's training plans.
    Job.objects.filter(job_queue=job_queue).delete()
    config_object_delete(obj=job_queue, actor=actor)


@transaction.atomic
def service_environment_create(*, fields: dict[str, Any], limits: Sequence[rules.LimitInput],
                               actor: AbstractBaseUser | None) -> ServiceEnvironment:
    """Create an environment with its on-demand capacity per instance type; audited."""
    capacities = _capacities(limits)
    rules.validate_environment_capacity(job_queue=None, capacities=capacities)
    environment = ServiceEnvironment(**fields)
    _check_fields(environment)
    environment.save()
    EnvironmentCapacity.objects.bulk_create(
        EnvironmentCapacity(service_environment=environment, instance_type=type_, max_capacity=maximum)
        for type_, maximum in capacities.items())
    config_change_record(actor=actor, obj=environment, action="created", before=None,
                         after=config_state(environment))
    return environment


@transaction.atomic
def service_environment_update(*, environment: ServiceEnvironment, changes: dict[str, Any],
                               limits: Sequence[rules.LimitInput] | None,
                               actor: AbstractBaseUser | None) -> ServiceEnvironment:
    """Change an environment; `limits`, when given, replace its capacities whole (SPEC 2 checks them)."""
    job_queue = JobQueue.objects.filter(service_environment_id=environment.pk).first()
    if job_queue is not None:
        # The queue lock orders this change with share changes and passes that read the same capacities.
        _lock_queue(job_queue.pk)
    environment = ServiceEnvironment.objects.get(pk=environment.pk)
    before = config_state(environment)
    for name, value in changes.items():
        setattr(environment, name, value)
    if limits is not None:
        rules.validate_environment_capacity(job_queue=job_queue, capacities=_capacities(limits))
    _check_fields(environment)
    environment.save()
    if limits is not None:
        environment.capacity_limits.all().delete()
        EnvironmentCapacity.objects.bulk_create(
            EnvironmentCapacity(service_environment=environment, instance_type=limit.instance_type,
                                max_capacity=limit.max_capacity) for limit in limits)
    config_change_record(actor=actor, obj=environment, action="changed", before=before,
                         after=config_state(environment))
    return environment


@transaction.atomic
def quota_share_create(*, fields: dict[str, Any], limits: Sequence[rules.LimitInput],
                       actor: AbstractBaseUser | None) -> QuotaShare:
    """Create a share with its capacity limits, which must fit beside the other shares' (SPEC 2); audited."""
    share = QuotaShare(**fields)
    # Two shares created at once must not both fit in the same spare capacity: the queue lock orders them.
    _lock_queue(share.job_queue.pk)
    rules.validate_quota_share(share=None, job_queue=share.job_queue, name=share.name,
                               strategy=share.strategy, borrow_limit=share.borrow_limit, limits=limits)
    _check_fields(share)
    share.save()
    ShareCapacityLimit.objects.bulk_create(
        ShareCapacityLimit(quota_share=share, instance_type=limit.instance_type,
                           max_capacity=limit.max_capacity) for limit in limits)
    config_change_record(actor=actor, obj=share, action="created", before=None, after=config_state(share))
    return share


@transaction.atomic
def quota_share_update(*, share: QuotaShare, changes: dict[str, Any],
                       limits: Sequence[rules.LimitInput] | None,
                       actor: AbstractBaseUser | None) -> QuotaShare:
    """Change a share; `limits`, when given, replace its capacity limits whole. A share stays in its queue."""
    _lock_queue(share.job_queue_id)
    share = QuotaShare.objects.select_related("job_queue").get(pk=share.pk)
    new_queue = changes.get("job_queue")
    if new_queue is not None and new_queue.pk != share.job_queue_id:
        raise ValidationError({"job_queue": [f"share {share.name} cannot move to another queue; "
                                             f"create a share in queue {new_queue.name} instead"]})
    before = config_state(share)
    for name, value in changes.items():
        setattr(share, name, value)
    rules.validate_quota_share(share=share, job_queue=share.job_queue, name=share.name,
                               strategy=share.strategy, borrow_limit=share.borrow_limit,
                               limits=limits if limits is not None else _limits_of(share))
    _check_fields(share)
    share.save()
    if limits is not None:
        share.capacity_limits.all().delete()
        ShareCapacityLimit.objects.bulk_create(
            ShareCapacityLimit(quota_share=share, instance_type=limit.instance_type,
                               max_capacity=limit.max_capacity) for limit in limits)
    config_change_record(actor=actor, obj=share, action="changed", before=before, after=config_state(share))
    return share


@transaction.atomic
def training_plan_create(*, fields: dict[str, Any], quota_shares: Sequence[QuotaShare],
                         actor: AbstractBaseUser | None) -> TrainingPlan:
    """Create a training plan open to `quota_shares` (none = every share of its queue); audited."""
    plan = TrainingPlan(**fields)
    rules.validate_training_plan(plan=None, job_queue=plan.job_queue, instance_count=plan.instance_count,
                                 start_time=plan.start_time, end_time=plan.end_time,
                                 quota_shares=quota_shares)
    _check_fields(plan)
    plan.save()
    plan.quota_shares.set(quota_shares)
    config_change_record(actor=actor, obj=plan, action="created", before=None, after=config_state(plan))
    return plan


@transaction.atomic
def training_plan_update(*, plan: TrainingPlan, changes: dict[str, Any],
                         quota_shares: Sequence[QuotaShare] | None,
                         actor: AbstractBaseUser | None) -> TrainingPlan:
    """Change a training plan; `quota_shares`, when given, replace the shares that may draw on it."""
    plan = TrainingPlan.objects.select_for_update().get(pk=plan.pk)
    before = config_state(plan)
    for name, value in changes.items():
        setattr(plan, name, value)
    shares = list(quota_shares) if quota_shares is not None else list(plan.quota_shares.all())
    rules.validate_training_plan(plan=plan, job_queue=plan.job_queue, instance_count=plan.instance_count,
                                 start_time=plan.start_time, end_time=plan.end_time, quota_shares=shares)
    _check_fields(plan)
    plan.save()
    if quota_shares is not None:
        plan.quota_shares.set(quota_shares)
    config_change_record(actor=actor, obj=plan, action="changed", before=before, after=config_state(plan))
    return plan


@transaction.atomic
def team_member_set(*, team: Team, user: AbstractBaseUser, role: str,
                    actor: AbstractBaseUser | None) -> tuple[Membership, bool]:
    """Add a user to a team with a role, or change their role there; (membership, created). Audited."""
    if role not in Membership.Role.values:
        raise ValidationError({"role": [f"role must be one of {', '.join(Membership.Role.values)}"]})
    membership, created = Membership.objects.select_for_update().get_or_create(
        team=team, user=user, defaults={"role": role})
    if created:
        config_change_record(actor=actor, obj=membership, action="created", before=None,
                             after=config_state(membership))
        return membership, True
    before = config_state(membership)
    membership.role = role
    membership.save(update_fields=["role"])
    config_change_record(actor=actor, obj=membership, action="changed", before=before,
                         after=config_state(membership))
    return membership, False
