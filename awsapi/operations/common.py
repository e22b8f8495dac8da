"""What every operation shares: who may write, lookups by name or ARN, quotaportal errors in AWS's terms."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from django.core.exceptions import ValidationError

from awsapi import arns
from awsapi.errors import AccessDenied, ClientError, invalid
from awsapi.protocol import validation_message
from scheduling.errors import DomainError, NotAllowed
from scheduling.models import InstanceType, JobQueue, QuotaShare, ServiceEnvironment

LIMIT_PATHS = {
    "capacity_limits": "capacityLimits",
    "max_capacity": "maxCapacity",
    "instance_type": "capacityUnit",
}


def staff_only(user) -> None:
    if not user.is_staff:
        raise AccessDenied("only staff may change the configuration")


@contextmanager
def as_aws(
    paths: Mapping[str, str], default_path: str = "", *, refusal_is_invalid: bool = False
) -> Iterator[None]:
    """quotaportal's errors raised inside, answered as AWS's (field names rewritten to member paths).

    `refusal_is_invalid`: a refusal names a member the caller may not use (a submission to another team's
    share), answered as a ClientException on that member, as any other bad value of it."""
    try:
        yield
    except ValidationError as exc:
        raise ClientError(validation_message(exc, paths, default_path)) from None
    except NotAllowed as exc:
        message = f"{default_path}: {exc.message}" if default_path else exc.message
        raise (ClientError if refusal_is_invalid else AccessDenied)(message) from None
    except DomainError as exc:
        raise ClientError(f"{default_path}: {exc.message}" if default_path else exc.message) from None


def environment_named(text: str, path: str) -> ServiceEnvironment:
    name = arns.name_of(text, path=path, kind="service-environment")
    found = ServiceEnvironment.objects.filter(name=name).first()
    if found is None:
        raise invalid(path, f"no service environment {name}")
    return found


def queue_named(text: str, path: str) -> JobQueue:
    name = arns.name_of(text, path=path, kind="job-queue")
    found = JobQueue.objects.select_related("service_environment").filter(name=name).first()
    if found is None:
        raise invalid(path, f"no job queue {name}")
    return found


def share_by_arn(text: str, path: str) -> QuotaShare:
    queue_name, share_name = arns.quota_share_names(text, path=path)
    found = (
        QuotaShare.objects.select_related("job_queue", "team")
        .filter(job_queue__name=queue_name, name=share_name)
        .first()
    )
    if found is None:
        raise invalid(path, f"no quota share {share_name} in job queue {queue_name}")
    return found


def instance_type_named(name: str, path: str) -> InstanceType:
    found = InstanceType.objects.filter(name=name).first()
    if found is None:
        known = ", ".join(InstanceType.objects.values_list("name", flat=True)[:20])
        raise invalid(path, f"unknown instance type {name!r} (known: {known})")
    return found


def names_wanted(members, name: str, kind: str) -> list[str] | None:
    """The names (or ARNs) a Describe* asks for, as names; None: all."""
    given = members.items(name, None, high=100)
    if given is None:
        return None
    names = []
    for path, text in given:
        if not isinstance(text, str):
            raise invalid(path, "must be a string")
        names.append(arns.name_of(text, path=path, kind=kind))
    return names
