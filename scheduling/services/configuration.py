"""Configuration writes: queues, service environments, quota shares, training plans, instance types, teams.

Each write validates with `scheduling.rules` (cross-row) and the model's own field rules, saves, and records
the CONFIG_CHANGED event in the same transaction, so a rejected change leaves neither rows nor an event. A
change that reaches a queue (its shares, plans, environment or the queue itself) takes that queue's lock
first (`scheduling.services.locks.queue_lock`) and asks for a pass on it once it commits. The pages, the API
and the Django admin all write through these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.utils import timezone

from scheduling import rules
from scheduling.errors import Conflict
from scheduling.models import (
    UNFINISHED_STATUSES,
    EnvironmentCapacity,
    Event,
    EventKind,
    Job,
    JobPreference,
    JobQueue,
    JobStatus,
    Membership,
    QuotaShare,
    ServiceEnvironment,
    ShareCapacityLimit,
    State,
    Team,
    TrainingPlan,
)
from scheduling.passes.requests import pass_request
from scheduling.services.audit import config_change_record, config_state, job_event_record
from scheduling.services.executor import job_stop
from scheduling.services.locks import queue_lock


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
    return [
        rules.LimitInput(limit.instance_type, limit.max_capacity, getattr(limit, "lending_limit", None))
        for limit in obj.capacity_limits.select_related("instance_type")
    ]


def _share_limits_write(share: QuotaShare, limits: Sequence[rules.LimitInput]) -> None:
    """A share's capacity limit rows, one per limit given (the caller has validated them)."""
    ShareCapacityLimit.objects.bulk_create(
        ShareCapacityLimit(
            quota_share=share,
            instance_type=limit.instance_type,
            max_capacity=limit.max_capacity,
            lending_limit=limit.lending_limit,
        )
        for limit in limits
    )


def _environment_capacities_write(
    environment: ServiceEnvironment, limits: Sequence[rules.LimitInput]
) -> None:
    """An environment's on-demand capacity rows, one per limit given (the caller has validated them)."""
    EnvironmentCapacity.objects.bulk_create(
        EnvironmentCapacity(
            service_environment=environment,
            instance_type=limit.instance_type,
            max_capacity=limit.max_capacity,
        )
        for limit in limits
    )


def _config_pass_request(event: Event | None) -> None:
    """Ask for a pass on the queue a recorded change reaches; a change that changed nothing, or of an object
    of no queue (an instance type, a team), asks for none."""
    if event is not None and event.job_queue_id is not None:
        pass_request(job_queue_id=event.job_queue_id, trigger="config")


@transaction.atomic
def config_object_create(
    *, model: type[models.Model], fields: dict[str, Any], actor: AbstractBaseUser | None
) -> models.Model:
    """Create a configuration object without nested rows (instance type, team, job queue); audited."""
    obj = model(**fields)
    obj.full_clean()
    obj.save()
    event = config_change_record(actor=actor, obj=obj, action="created", before=None, after=config_state(obj))
    _config_pass_request(event)
    return obj


@transaction.atomic
def config_object_update(
    *, obj: models.Model, changes: dict[str, Any], actor: AbstractBaseUser | None
) -> models.Model:
    """Change a configuration object without nested rows (instance type, team); audited."""
    obj = type(obj).objects.select_for_update().get(pk=obj.pk)
    before = config_state(obj)
    for name, value in changes.items():
        setattr(obj, name, value)
    obj.full_clean()
    obj.save()
    event = config_change_record(
        actor=actor, obj=obj, action="changed", before=before, after=config_state(obj)
    )
    _config_pass_request(event)
    return obj


@transaction.atomic
def config_object_delete(*, obj: models.Model, actor: AbstractBaseUser | None) -> None:
    """Delete a configuration object nothing protects; 409 naming what still refers to it otherwise."""
    event = config_change_record(actor=actor, obj=obj, action="deleted", before=config_state(obj), after=None)
    _config_pass_request(event)
    try:
        obj.delete()
    except models.ProtectedError as exc:
        # Raising rolls the audit event back with everything else.
        counts: dict[tuple[str, str], int] = {}
        for row in exc.protected_objects:
            label = (str(row._meta.verbose_name), str(row._meta.verbose_name_plural))
            counts[label] = counts.get(label, 0) + 1
        used_by = ", ".join(f"{n} {one if n == 1 else many}" for (one, many), n in sorted(counts.items()))
        raise Conflict(
            f"{obj._meta.verbose_name} {obj} is still referenced by {used_by}; remove those first"
        ) from None


@transaction.atomic
def job_queue_update(
    *, job_queue: JobQueue, changes: dict[str, Any], actor: AbstractBaseUser | None
) -> JobQueue:
    """Change a queue; a new environment must hold the limits of the queue's shares
    (behaviour.md#capacity-what-a-share-may-hold)."""
    job_queue = queue_lock(job_queue.pk)
    environment = changes.get("service_environment")
    if environment is not None and environment.pk != job_queue.service_environment_id:
        try:
            rules.validate_environment_capacity(
                job_queue=job_queue, capacities=_capacities(_limits_of(environment))
            )
        except ValidationError as exc:
            raise ValidationError({"service_environment": exc.messages}) from None
    job_queue = config_object_update(obj=job_queue, changes=changes, actor=actor)
    # A job shows the names it was submitted under; a rename renames them, as it does the queue's own page.
    Job.objects.filter(job_queue=job_queue).exclude(job_queue_name=job_queue.name).update(
        job_queue_name=job_queue.name
    )
    return job_queue


def _jobs_cancel(*, jobs, why: str, actor: AbstractBaseUser | None, now) -> None:
    """Cancel the unfinished `jobs` because their share or queue goes, each with its CANCELLED event.

    The caller holds their queue's lock; placed jobs free their capacity as a user's cancel does.
    """
    for job in jobs.select_for_update().filter(status__in=UNFINISHED_STATUSES).order_by("id"):
        job_stop(job=job, status=JobStatus.CANCELLED, reason=f"cancelled: {why}", now=now)
        job_event_record(
            kind=EventKind.CANCELLED, job=job, actor=actor, now=now, message=f"{job.name} cancelled: {why}"
        )


@transaction.atomic
def job_queue_delete(*, job_queue: JobQueue, actor: AbstractBaseUser | None) -> None:
    """Delete a DISABLED queue with its shares and plans, as AWS Batch does, cancelling its unfinished jobs.

    The jobs stay, finished, with their history and their team (behaviour.md#what-there-is); they keep the queue's and
    share's names. Training plans that a job's preference list names are history too: while there are any, the
    queue is refused (409) with their names.
    """
    if job_queue.state != State.DISABLED:
        raise ValidationError({"state": [f"disable queue {job_queue.name} before deleting it"]})
    queue_lock(job_queue.pk)
    named = sorted(
        TrainingPlan.objects.filter(
            job_queue=job_queue, pk__in=JobPreference.objects.values("training_plan_id")
        ).values_list("name", flat=True)
    )
    if named:
        raise Conflict(
            f"job queue {job_queue.name} is still referenced by the preference lists of jobs naming its "
            f"training plan(s) {', '.join(named)}, which stay as history; it cannot be deleted"
        )
    _jobs_cancel(
        jobs=Job.objects.filter(job_queue=job_queue),
        why=f"queue {job_queue.name} was deleted",
        actor=actor,
        now=timezone.now(),
    )
    config_object_delete(obj=job_queue, actor=actor)


@transaction.atomic
def service_environment_create(
    *,
    fields: dict[str, Any],
    limits: Sequence[rules.LimitInput],
    actor: AbstractBaseUser | None,
    executor_accounts: Sequence[AbstractBaseUser] = (),
) -> ServiceEnvironment:
    """Create an environment with its on-demand capacity per instance type and the accounts serving it; audited."""
    capacities = _capacities(limits)
    rules.validate_environment_capacity(job_queue=None, capacities=capacities)
    environment = ServiceEnvironment(**fields)
    _check_fields(environment)
    environment.save()
    _environment_capacities_write(environment, limits)
    environment.executor_accounts.set(executor_accounts)
    # No pass: no queue uses an environment yet when it is created.
    config_change_record(
        actor=actor, obj=environment, action="created", before=None, after=config_state(environment)
    )
    return environment


@transaction.atomic
def service_environment_update(
    *,
    environment: ServiceEnvironment,
    changes: dict[str, Any],
    limits: Sequence[rules.LimitInput] | None,
    actor: AbstractBaseUser | None,
    executor_accounts: Sequence[AbstractBaseUser] | None = None,
) -> ServiceEnvironment:
    """Change an environment; `limits`, when given, replace its capacities whole
    (behaviour.md#capacity-what-a-share-may-hold checks them), and
    `executor_accounts`, when given, replace the accounts that serve it (audited with the rest)."""
    job_queue = JobQueue.objects.filter(service_environment_id=environment.pk).first()
    if job_queue is not None:
        # The queue lock orders this change with share changes and passes that read the same capacities.
        queue_lock(job_queue.pk)
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
        _environment_capacities_write(environment, limits)
    if executor_accounts is not None:
        environment.executor_accounts.set(executor_accounts)
    event = config_change_record(
        actor=actor, obj=environment, action="changed", before=before, after=config_state(environment)
    )
    if event is not None and job_queue is not None:
        pass_request(job_queue_id=job_queue.pk, trigger="config")
    return environment


@transaction.atomic
def quota_share_create(
    *, fields: dict[str, Any], limits: Sequence[rules.LimitInput], actor: AbstractBaseUser | None
) -> QuotaShare:
    """Create a share with its capacity limits, which must fit beside the other shares'
    (behaviour.md#capacity-what-a-share-may-hold); audited."""
    share = QuotaShare(**fields)
    # Two shares created at once must not both fit in the same spare capacity: the queue lock orders them.
    queue_lock(share.job_queue.pk)
    rules.validate_quota_share(
        share=None,
        job_queue=share.job_queue,
        name=share.name,
        strategy=share.strategy,
        borrow_limit=share.borrow_limit,
        limits=limits,
    )
    _check_fields(share)
    share.save()
    _share_limits_write(share, limits)
    config_change_record(actor=actor, obj=share, action="created", before=None, after=config_state(share))
    pass_request(job_queue_id=share.job_queue_id, trigger="config")
    return share


@transaction.atomic
def quota_share_update(
    *,
    share: QuotaShare,
    changes: dict[str, Any],
    limits: Sequence[rules.LimitInput] | None,
    actor: AbstractBaseUser | None,
) -> QuotaShare:
    """Change a share; `limits`, when given, replace its capacity limits whole. A share stays in its queue."""
    queue_lock(share.job_queue_id)
    share = QuotaShare.objects.select_related("job_queue", "team").get(pk=share.pk)
    new_queue = changes.get("job_queue")
    if new_queue is not None and new_queue.pk != share.job_queue_id:
        raise ValidationError(
            {
                "job_queue": [
                    f"share {share.name} cannot move to another queue; "
                    f"create a share in queue {new_queue.name} instead"
                ]
            }
        )
    new_team = changes.get("team")
    if new_team is not None and new_team.pk != share.team_id:
        # A job belongs to the team that submitted it, for good: a share moves only once it has none waiting
        # or running, so the new team never finds the old team's jobs in it (as AWS keeps a share's owner).
        unfinished = Job.objects.filter(quota_share=share, status__in=UNFINISHED_STATUSES).count()
        if unfinished:
            raise ValidationError(
                {
                    "team": [
                        f"share {share.name} has {unfinished} unfinished job(s) of team {share.team.name}; "
                        "it can move to another team once they have finished or been cancelled"
                    ]
                }
            )
    before = config_state(share)
    for name, value in changes.items():
        setattr(share, name, value)
    rules.validate_quota_share(
        share=share,
        job_queue=share.job_queue,
        name=share.name,
        strategy=share.strategy,
        borrow_limit=share.borrow_limit,
        limits=limits if limits is not None else _limits_of(share),
    )
    _check_fields(share)
    share.save()
    if limits is not None:
        share.capacity_limits.all().delete()
        _share_limits_write(share, limits)
    if "name" in changes:
        Job.objects.filter(quota_share=share).exclude(quota_share_name=share.name).update(
            quota_share_name=share.name
        )
    event = config_change_record(
        actor=actor, obj=share, action="changed", before=before, after=config_state(share)
    )
    if event is not None:
        pass_request(job_queue_id=share.job_queue_id, trigger="config")
    return share


@transaction.atomic
def quota_share_delete(*, share: QuotaShare, actor: AbstractBaseUser | None) -> None:
    """Delete a DISABLED share, cancelling its unfinished jobs first (behaviour.md#what-there-is).

    Its jobs stay, finished, readable by their team with their attempts, events and payload; they keep the
    share's name (`Job.quota_share_name`) and lose only the link.
    """
    if share.state != State.DISABLED:
        raise ValidationError({"state": [f"disable share {share.name} before deleting it"]})
    queue_lock(share.job_queue_id)
    _jobs_cancel(
        jobs=Job.objects.filter(quota_share=share),
        why=f"share {share.name} was deleted",
        actor=actor,
        now=timezone.now(),
    )
    before = config_state(share)
    config_change_record(actor=actor, obj=share, action="deleted", before=before, after=None)
    pass_request(job_queue_id=share.job_queue_id, trigger="config")
    share.delete()


@transaction.atomic
def training_plan_create(
    *, fields: dict[str, Any], quota_shares: Sequence[QuotaShare], actor: AbstractBaseUser | None
) -> TrainingPlan:
    """Create a training plan open to `quota_shares` (none = every share of its queue); audited."""
    plan = TrainingPlan(**fields)
    rules.validate_training_plan(
        plan=None,
        job_queue=plan.job_queue,
        instance_count=plan.instance_count,
        start_time=plan.start_time,
        end_time=plan.end_time,
        quota_shares=quota_shares,
    )
    _check_fields(plan)
    plan.save()
    plan.quota_shares.set(quota_shares)
    config_change_record(actor=actor, obj=plan, action="created", before=None, after=config_state(plan))
    pass_request(job_queue_id=plan.job_queue_id, trigger="config")
    return plan


@transaction.atomic
def training_plan_update(
    *,
    plan: TrainingPlan,
    changes: dict[str, Any],
    quota_shares: Sequence[QuotaShare] | None,
    actor: AbstractBaseUser | None,
) -> TrainingPlan:
    """Change a training plan; `quota_shares`, when given, replace the shares that may draw on it."""
    plan = TrainingPlan.objects.select_for_update().get(pk=plan.pk)
    before = config_state(plan)
    for name, value in changes.items():
        setattr(plan, name, value)
    shares = list(quota_shares) if quota_shares is not None else list(plan.quota_shares.all())
    rules.validate_training_plan(
        plan=plan,
        job_queue=plan.job_queue,
        instance_count=plan.instance_count,
        start_time=plan.start_time,
        end_time=plan.end_time,
        quota_shares=shares,
    )
    _check_fields(plan)
    plan.save()
    if quota_shares is not None:
        plan.quota_shares.set(quota_shares)
    event = config_change_record(
        actor=actor, obj=plan, action="changed", before=before, after=config_state(plan)
    )
    if event is not None:
        pass_request(job_queue_id=plan.job_queue_id, trigger="config")
    return plan


@transaction.atomic
def team_delete(*, team: Team, actor: AbstractBaseUser | None) -> None:
    """Delete a team that owns nothing: its jobs and their events are its for good, so a team that ever
    submitted one is refused (409) saying so, as is one that still owns quota shares."""
    team = Team.objects.select_for_update().get(pk=team.pk)
    owned = [
        (QuotaShare.objects.filter(team=team).count(), "quota share"),
        (Job.objects.filter(team=team).count(), "job"),
    ]
    if any(count for count, _ in owned):
        used_by = ", ".join(f"{count} {what}{'' if count == 1 else 's'}" for count, what in owned if count)
        raise Conflict(
            f"team {team.name} is still referenced by {used_by}; a team's jobs and their history stay "
            "its own, so it cannot be deleted"
        )
    config_object_delete(obj=team, actor=actor)


@transaction.atomic
def team_member_set(
    *, team: Team, user: AbstractBaseUser, role: str, actor: AbstractBaseUser | None
) -> tuple[Membership, bool]:
    """Add a user to a team with a role, or change their role there; (membership, created). Audited; a
    membership belongs to no queue, so no pass."""
    if role not in Membership.Role.values:
        raise ValidationError({"role": [f"role must be one of {', '.join(Membership.Role.values)}"]})
    membership, created = Membership.objects.select_for_update().get_or_create(
        team=team, user=user, defaults={"role": role}
    )
    if created:
        config_change_record(
            actor=actor, obj=membership, action="created", before=None, after=config_state(membership)
        )
        return membership, True
    before = config_state(membership)
    membership.role = role
    membership.save(update_fields=["role"])
    config_change_record(
        actor=actor, obj=membership, action="changed", before=before, after=config_state(membership)
    )
    return membership, False


@transaction.atomic
def team_member_remove(*, team: Team, user_id: int, actor: AbstractBaseUser | None) -> None:
    """Take a user out of a team; audited. Their jobs stay the team's, as everything a team owns does."""
    membership = Membership.objects.select_for_update().filter(team=team, user_id=user_id).first()
    if membership is None:
        return
    config_change_record(
        actor=actor, obj=membership, action="deleted", before=config_state(membership), after=None
    )
    membership.delete()
