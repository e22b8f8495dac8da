"""ListTagsForResource, TagResource, UntagResource: tags of environments, policies, queues, shares and jobs.

Configuration objects' tags are written by staff; a job's by whoever may manage the job. Reading needs only
to see the object (another team's job is unknown)."""

from __future__ import annotations

from awsapi import arns, records
from awsapi.errors import AccessDenied, invalid
from awsapi.models import SchedulingPolicy, Tagged
from awsapi.operations.common import environment_named, queue_named, share_by_arn, staff_only
from awsapi.operations.jobs import job_for
from awsapi.protocol import Members, tags_check
from scheduling.errors import Conflict
from scheduling.services import jobs as job_services

PATH = "resourceArn"


def _resource(user, arn: str, *, writing: bool) -> tuple[str, int]:
    kind, rest = arns.resource_of(arn, path=PATH)
    if kind == "service-job":
        job = job_for(user, arn, PATH)
        if writing and not job_services.job_can_manage(user=user, job=job):
            raise AccessDenied("only the submitter, a manager of the team or staff may tag this job")
        return Tagged.SERVICE_JOB, job.pk
    if writing:
        staff_only(user)
    if kind == "job-queue" and "/quota-share/" in rest:
        return Tagged.QUOTA_SHARE, share_by_arn(arn, PATH).pk
    if kind == "job-queue":
        return Tagged.JOB_QUEUE, queue_named(arn, PATH).pk
    if kind == "service-environment":
        return Tagged.SERVICE_ENVIRONMENT, environment_named(arn, PATH).pk
    if kind == "scheduling-policy":
        policy = SchedulingPolicy.objects.filter(name=arns.name_of(arn, path=PATH, kind=kind)).first()
        if policy is None:
            raise invalid(PATH, f"no scheduling policy {rest}")
        return Tagged.SCHEDULING_POLICY, policy.pk
    raise invalid(PATH, f"quotaportal keeps no tags on {kind} resources")


def list_tags_for_resource(user, members: Members, resource_arn: str) -> dict:
    members.only()
    resource, object_id = _resource(user, resource_arn, writing=False)
    return {"tags": records.tags_of(resource, object_id)}


def tag_resource(user, members: Members, resource_arn: str) -> dict:
    members.only("tags")
    tags = tags_check(members.get("tags"), "tags")
    resource, object_id = _resource(user, resource_arn, writing=True)
    try:
        records.tags_merge(resource=resource, object_id=object_id, tags=tags)
    except Conflict as exc:
        raise invalid("tags", exc.message) from None
    return {}


def untag_resource(user, keys: list[str], resource_arn: str) -> dict:
    if not keys:
        raise invalid("tagKeys", "is required")
    for key in keys:
        if not 1 <= len(key) <= 128:
            raise invalid("tagKeys", "a tag key is 1 to 128 characters")
    resource, object_id = _resource(user, resource_arn, writing=True)
    records.tags_remove(resource=resource, object_id=object_id, keys=keys)
    return {}
