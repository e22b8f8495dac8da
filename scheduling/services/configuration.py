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
        rules.LimitInput(limit.instance_type, limit.max_capacity)
        for limit in obj.capacity_limits.select_related("instance_type")
    ]


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
    """Change a queue; a new environment must hold the limits of the queue's shares (SPEC 2)."""
    job_queue = queue_lock(job_queue.pk)
    environment = changes.get("service_environment")
    if environment is not None and environment.pk != job_queue.service_environment_id:
        try:
            rules.validate_environment_capacity(
                job_queue=job_queue, capacities=_capacities(_limits_of(environment))
            )
        except ValidationError as exc:
            raise ValidationError({"service_environment": exc.messages}) from None
    return config_object_update(obj=job_queue, changes=changes, actor=actor)


@transaction.atomic
def job_queue_delete(*, job_queue: JobQueue, actor: AbstractBaseUser | None) -> None:
    """Delete a DISABLED queue with its shares, plans and jobs, as AWS Batch does; the events stay."""
    if job_queue.state != State.DISABLED:
        raise ValidationError({"state": [f"disable queue {job_queue.name} before deleting it"]})
    queue_lock(job_queue.pk)
    # The jobs go first: their preference lists protect the queue's training plans.
    Job.objects.filter(job_queue=job_queue).delete()
    config_object_delete(obj=job_queue, actor=actor)


@transaction.atomic
def service_environment_create(
    *, fields: dict[str, Any], limits: Sequence[rules.LimitInput], actor: AbstractBaseUser | None
) -> ServiceEnvironment:
    """Create an environment with its on-demand capacity per instance type; audited."""
    capacities = _capacities(limits)
    rules.validate_environment_capacity(job_queue=None, capacities=capacities)
    environment = ServiceEnvironment(**fields)
    _check_fields(environment)
    environment.save()
    EnvironmentCapacity.objects.bulk_create(
        EnvironmentCapacity(service_environment=environment, instance_type=type_, max_capacity=maximum)
        for type_, maximum in capacities.items()
    )
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
) -> ServiceEnvironment:
    """Change an environment; `limits`, when given, replace its capacities whole (SPEC 2 checks them)."""
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
        EnvironmentCapacity.objects.bulk_create(
            EnvironmentCapacity(
                service_environment=environment,
                instance_type=limit.instance_type,
                max_capacity=limit.max_capacity,
            )
            for limit in limits
        )
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
    """Create a share with its capacity limits, which must fit beside the other shares' (SPEC 2); audited."""
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
    ShareCapacityLimit.objects.bulk_create(
        ShareCapacityLimit(
            quota_share=share, instance_type=limit.instance_type, max_capacity=limit.max_capacity
        )
        for limit in limits
    )
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
    share = QuotaShare.objects.select_related("job_queue").get(pk=share.pk)
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
        ShareCapacityLimit.objects.bulk_create(
            ShareCapacityLimit(
                quota_share=share, instance_type=limit.instance_type, max_capacity=limit.max_capacity
            )
            for limit in limits
        )
    event = config_change_record(
        actor=actor, obj=share, action="changed", before=before, after=config_state(share)
    )
    if event is not None:
        pass_request(job_queue_id=share.job_queue_id, trigger="config")
    return share


@transaction.atomic
def quota_share_delete(*, share: QuotaShare, actor: AbstractBaseUser | None) -> None:
    """Delete a DISABLED share, cancelling its unfinished jobs first (SPEC 1)."""
    if share.state != State.DISABLED:
        raise ValidationError({"state": [f"disable share {share.name} before deleting it"]})
    queue_lock(share.job_queue_id)
    now = timezone.now()
    for job in Job.objects.select_for_update().filter(quota_share=share, status__in=UNFINISHED_STATUSES):
        job_stop(job=job, status=JobStatus.CANCELLED, reason=f"share {share.name} was deleted", now=now)
        job_event_record(
            kind=EventKind.CANCELLED,
            job=job,
            actor=actor,
            now=now,
            message=f"cancelled: share {share.name} was deleted",
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
