"""The AWS side's own writes: scheduling policies (and the queues using them), tags, service-job records.

Every write to quotaportal's own objects goes through `scheduling.services`; these only keep what AWS has and
quotaportal does not. A policy's rule reaches its queues through `job_queue_update` (audited, a pass follows).
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from awsapi.models import QueuePolicy, ResourceTags, SchedulingPolicy, ServiceJob
from scheduling.errors import Conflict
from scheduling.models import Job, JobQueue
from scheduling.services import configuration as config_services
from scheduling.services.audit import config_change_record, config_state


def tags_of(resource: str, object_id: int) -> dict[str, str]:
    row = ResourceTags.objects.filter(resource=resource, object_id=object_id).first()
    return dict(row.tags) if row is not None else {}


def tags_of_many(resource: str, object_ids) -> dict[int, dict[str, str]]:
    rows = ResourceTags.objects.filter(resource=resource, object_id__in=list(object_ids))
    return {row.object_id: dict(row.tags) for row in rows}


@transaction.atomic
def tags_merge(*, resource: str, object_id: int, tags: dict[str, str]) -> dict[str, str]:
    """Add or overwrite tags; at most 50 on one object."""
    row, _ = ResourceTags.objects.select_for_update().get_or_create(resource=resource, object_id=object_id)
    merged = {**row.tags, **tags}
    if len(merged) > 50:
        raise Conflict(f"an object holds at most 50 tags; this would make {len(merged)}")
    row.tags = merged
    row.save(update_fields=["tags"])
    return merged


@transaction.atomic
def tags_remove(*, resource: str, object_id: int, keys: list[str]) -> None:
    row = ResourceTags.objects.select_for_update().filter(resource=resource, object_id=object_id).first()
    if row is not None:
        row.tags = {key: value for key, value in row.tags.items() if key not in set(keys)}
        row.save(update_fields=["tags"])


def tags_forget(*, resource: str, object_id: int) -> None:
    ResourceTags.objects.filter(resource=resource, object_id=object_id).delete()


@transaction.atomic
def scheduling_policy_create(
    *, name: str, strategy: str, tags: dict[str, str] | None, actor: AbstractBaseUser | None
) -> SchedulingPolicy:
    policy = SchedulingPolicy(name=name, idle_resource_assignment_strategy=strategy)
    policy.full_clean()
    policy.save()
    if tags:
        tags_merge(resource="scheduling-policy", object_id=policy.pk, tags=tags)
    config_change_record(actor=actor, obj=policy, action="created", before=None, after=config_state(policy))
    return policy


@transaction.atomic
def scheduling_policy_update(
    *, policy: SchedulingPolicy, strategy: str, actor: AbstractBaseUser | None
) -> SchedulingPolicy:
    """Change a policy's idle-capacity rule, and with it every queue that uses the policy."""
    policy = SchedulingPolicy.objects.select_for_update().get(pk=policy.pk)
    before = config_state(policy)
    policy.idle_resource_assignment_strategy = strategy
    policy.save(update_fields=["idle_resource_assignment_strategy"])
    config_change_record(actor=actor, obj=policy, action="changed", before=before, after=config_state(policy))
    for link in QueuePolicy.objects.filter(policy=policy).select_related("job_queue"):
        config_services.job_queue_update(
            job_queue=link.job_queue, changes={"idle_capacity_assignment": strategy}, actor=actor
        )
    return policy


@transaction.atomic
def scheduling_policy_delete(*, policy: SchedulingPolicy, actor: AbstractBaseUser | None) -> None:
    used_by = sorted(QueuePolicy.objects.filter(policy=policy).values_list("job_queue__name", flat=True))
    if used_by:
        raise Conflict(f"scheduling policy {policy.name} is used by job queue(s) {', '.join(used_by)}")
    config_change_record(actor=actor, obj=policy, action="deleted", before=config_state(policy), after=None)
    tags_forget(resource="scheduling-policy", object_id=policy.pk)
    policy.delete()


@transaction.atomic
def queue_policy_set(*, job_queue: JobQueue, policy: SchedulingPolicy | None) -> None:
    """Which policy a queue uses (None: none); the caller wrote the policy's rule onto the queue."""
    if policy is None:
        QueuePolicy.objects.filter(job_queue=job_queue).delete()
        return
    QueuePolicy.objects.update_or_create(job_queue=job_queue, defaults={"policy": policy})


def service_job_record(*, job: Job, service_request_payload: str, training_job_name: str) -> ServiceJob:
    return ServiceJob.objects.create(
        job=job, service_request_payload=service_request_payload, training_job_name=training_job_name
    )
