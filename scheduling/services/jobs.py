"""Jobs as their users see them: submit, cancel, change priority; and who may do which.

`job_submit` does not take the queue lock (it only inserts rows, which the lock lets through: see
`scheduling.services.locks`); `job_cancel` and `job_set_priority` take it first, then the job's row.
Each asks for a pass on the job's queue once it commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from scheduling import retry, rules
from scheduling.errors import Conflict, NotAllowed
from scheduling.models import (
    PLACED_STATUSES,
    UNFINISHED_STATUSES,
    EventKind,
    Job,
    JobPreference,
    JobQueue,
    JobStatus,
    Membership,
    QuotaShare,
    StopOutcome,
)
from scheduling.passes.requests import pass_request
from scheduling.services.audit import job_event_record
from scheduling.services.executor import job_stop, job_stop_request
from scheduling.services.locks import job_lock


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
    attempt_duration_seconds: int | None = None
    relocate: bool = False
    retry_rules: list = field(default_factory=list)
    payload: dict = field(default_factory=dict)
    client_token: str | None = None
    submitted_via: str = ""


def user_team_role(user: AbstractBaseUser, team_id: int) -> str | None:
    return Membership.objects.filter(user=user, team_id=team_id).values_list("role", flat=True).first()


def job_submission_validate(*, user: AbstractBaseUser, submission: JobSubmission, now=None) -> Job:
    """Check a submission against every rule of behaviour.md#submission and return the unsaved job; writes nothing.

    Raises NotAllowed for another team's share, and one ValidationError naming every field at fault.
    """
    share = submission.quota_share
    if not user.is_staff and user_team_role(user, share.team_id) is None:
        raise NotAllowed(f"you are not a member of team {share.team.name}, which owns share {share.name}")
    now = now or timezone.now()
    job = Job(
        name=submission.name,
        job_queue=submission.job_queue,
        job_queue_name=submission.job_queue.name,
        quota_share=share,
        quota_share_name=share.name,
        team_id=share.team_id,
        submitted_by=user,
        scheduling_priority=submission.scheduling_priority,
        retry_attempts=submission.retry_attempts,
        preemption_retries_before_termination=submission.preemption_retries_before_termination,
        max_pending_seconds=submission.max_pending_seconds,
        duration_seconds=submission.duration_seconds,
        attempt_duration_seconds=submission.attempt_duration_seconds,
        relocate=submission.relocate,
        retry_rules=submission.retry_rules,
        submitted_via=submission.submitted_via,
        payload=submission.payload,
        client_token=submission.client_token or None,
        created_at=now,
        runnable_since=now,
        status_reason="waiting for the next scheduling pass",
    )
    errors: dict[str, list[str]] = {}
    checks = (
        lambda: rules.validate_job_target(job_queue=submission.job_queue, quota_share=share),
        lambda: rules.validate_preferences(
            job_queue=submission.job_queue,
            quota_share=share,
            entries=submission.instance_preferences,
            now=now,
        ),
        lambda: rules.validate_payload(submission.payload),
        lambda: _retry_rules_check(submission.retry_rules),
        lambda: rules.validate_payload_runnable(
            payload=submission.payload, environment=submission.job_queue.service_environment
        ),
        # Field validators only: the database constraints stay the backstop (checking them here costs a
        # query each), and client_token races are settled by the unique constraint below.
        lambda: job.full_clean(
            exclude=[
                "job_queue",
                "job_queue_name",
                "quota_share",
                "quota_share_name",
                "team",
                "submitted_by",
                "payload",
            ],
            validate_unique=False,
            validate_constraints=False,
        ),
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


def _retry_rules_check(retry_rules: object) -> None:
    problems = retry.validate_rules(retry_rules)
    if problems:
        raise ValidationError({"retry_rules": problems})


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
            JobPreference.objects.bulk_create(
                [
                    JobPreference(
                        job=job,
                        position=i,
                        instance_type=e.instance_type,
                        instance_count=e.instance_count,
                        training_plan=e.training_plan,
                    )
                    for i, e in enumerate(submission.instance_preferences)
                ]
            )
            entries = ", ".join(_entry_label(e) for e in submission.instance_preferences)
            job_event_record(
                kind=EventKind.SUBMITTED,
                job=job,
                actor=user,
                now=now,
                message=f"{user.get_username()} submitted {job.name} to share {share.name}: {entries}",
            )
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
    raise Conflict(
        f"client_token {job.client_token!r} was already used for a job you can no longer see; "
        "submit with a new client_token"
    )


def _entry_label(entry: rules.PreferenceInput) -> str:
    plan = f" on plan {entry.training_plan.name}" if entry.training_plan else ""
    return f"{entry.instance_type.name} x{entry.instance_count}{plan}"


def job_can_manage(*, user: AbstractBaseUser, job: Job) -> bool:
    """Staff, the submitter and the managers of the job's team may cancel or reprioritise it."""
    if user.is_staff or job.submitted_by_id == user.pk:
        return True
    return user_team_role(user, job.team_id) == Membership.Role.MANAGER


def job_finished_message(job: Job, action: str) -> str:
    """Why an action on a job that has moved on is refused, in words a person reads on the job's page."""
    return f"{job.name} has already ended ({job.status}), so it can no longer {action}; nothing was changed."


@transaction.atomic
def job_cancel(*, job_id: int, actor: AbstractBaseUser | None, reason: str = "") -> Job:
    """Cancel an unfinished job; its capacity is free for the pass that follows.

    A placed job its executor has taken is asked to stop (STOPPING, outcome CANCELLED): it keeps its
    capacity until the executor reports it STOPPED or its grace period ends. Cancelling a STOPPING job only
    makes its outcome CANCELLED.
    """
    job = job_lock(job_id)
    if actor is not None and not job_can_manage(user=actor, job=job):
        raise NotAllowed("only the submitter, a manager of the team or staff may cancel this job")
    if job.status not in UNFINISHED_STATUSES:
        raise Conflict(job_finished_message(job, "be cancelled"))
    now = timezone.now()
    who = getattr(actor, "username", None) or "system"
    text = f"cancelled by {who}" + (f": {reason}" if reason else "")
    if job.status == JobStatus.STOPPING:
        job.stop_outcome, job.stop_reason = StopOutcome.CANCELLED, text
        job.save(update_fields=["stop_outcome", "stop_reason"])
        return job
    if job.status in PLACED_STATUSES and job.taken:
        job_stop_request(job=job, outcome=StopOutcome.CANCELLED, reason=text, why=text, now=now)
        return job
    job_stop(job=job, status=JobStatus.CANCELLED, reason=text, now=now)
    job_event_record(kind=EventKind.CANCELLED, job=job, actor=actor, now=now, message=f"{job.name} {text}")
    pass_request(job_queue_id=job.job_queue_id, trigger="cancel")
    return job


@transaction.atomic
def job_set_priority(*, job_id: int, priority: int, actor: AbstractBaseUser | None) -> Job:
    """Change an unfinished job's scheduling_priority (0..9999); audited."""
    if not 0 <= priority <= 9999:
        raise ValidationError({"scheduling_priority": ["scheduling_priority must be between 0 and 9999"]})
    job = job_lock(job_id)
    if actor is not None and not job_can_manage(user=actor, job=job):
        raise NotAllowed("only the submitter, a manager of the team or staff may change this job's priority")
    if job.status not in UNFINISHED_STATUSES:
        raise Conflict(job_finished_message(job, "change priority"))
    if job.scheduling_priority == priority:
        return job
    before = job.scheduling_priority
    job.scheduling_priority = priority
    job.save(update_fields=["scheduling_priority"])
    who = getattr(actor, "username", None) or "system"
    job_event_record(
        kind=EventKind.CONFIG_CHANGED,
        job=job,
        actor=actor,
        now=timezone.now(),
        message=f"{who} changed the priority of {job.name} from {before} to {priority}",
        data={
            "object": "scheduling.Job",
            "id": job.pk,
            "action": "changed",
            "before": {"scheduling_priority": before},
            "after": {"scheduling_priority": priority},
        },
    )
    pass_request(job_queue_id=job.job_queue_id, trigger="priority")
    return job
