"""ARNs in AWS's formats, built from names (ids for jobs), with the region and account of the settings.

Inputs are parsed leniently (any partition, region and account) and matched on resource type and name.
"""

from __future__ import annotations

import re

from django.conf import settings

from awsapi.errors import invalid

_ARN = re.compile(r"^arn:aws[a-z-]*:(?P<service>[a-z0-9-]+):[a-z0-9-]*:[0-9]*:(?P<resource>.+)$")
_SAGEMAKER_NAME = re.compile(r"[^a-zA-Z0-9-]+")


def _prefix(service: str = "batch") -> str:
    return f"arn:aws:{service}:{settings.AWS_REGION}:{settings.AWS_ACCOUNT_ID}:"


def service_environment_arn(name: str) -> str:
    return f"{_prefix()}service-environment/{name}"


def scheduling_policy_arn(name: str) -> str:
    return f"{_prefix()}scheduling-policy/{name}"


def job_queue_arn(name: str) -> str:
    return f"{_prefix()}job-queue/{name}"


def quota_share_arn(queue_name: str, share_name: str) -> str:
    return f"{_prefix()}job-queue/{queue_name}/quota-share/{share_name}"


def service_job_arn(job_id: int) -> str:
    return f"{_prefix()}service-job/{job_id}"


def training_job_name(name: str) -> str:
    """A SageMaker training-job name (`[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}`) made from a job's name."""
    cleaned = _SAGEMAKER_NAME.sub("-", name).strip("-")[:50].strip("-")
    return cleaned or "job"


def training_job_arn(name: str, attempt: int) -> str:
    """An attempt's training job: the job's training-job name and the attempt number."""
    return f"{_prefix('sagemaker')}training-job/{name}-a{attempt}"


def training_plan_arn(name: str) -> str:
    return f"{_prefix('sagemaker')}training-plan/{name}"


def resource_of(text: str, *, path: str, kind: str | None = None) -> tuple[str, str]:
    """(resource type, rest) of a Batch ARN, e.g. ("job-queue", "training"); `kind` requires that type."""
    match = _ARN.match(text)
    if match is None or match["service"] != "batch" or "/" not in match["resource"]:
        raise invalid(path, f"{text!r} is not an AWS Batch ARN")
    resource, _, rest = match["resource"].partition("/")
    if kind is not None and resource != kind:
        raise invalid(path, f"{text!r} is not the ARN of a {kind.replace('-', ' ')}")
    return resource, rest


def name_of(text: str, *, path: str, kind: str) -> str:
    """A name given by itself or inside an ARN of `kind` ("job-queue", "service-environment", ...)."""
    if text.startswith("arn:"):
        _, rest = resource_of(text, path=path, kind=kind)
        if "/" in rest:
            raise invalid(path, f"{text!r} is not the ARN of a {kind.replace('-', ' ')}")
        return rest
    return text


def quota_share_names(text: str, *, path: str) -> tuple[str, str]:
    """(queue name, share name) of a quota share's ARN."""
    _, rest = resource_of(text, path=path, kind="job-queue")
    queue, separator, share = rest.partition("/quota-share/")
    if not separator or not queue or not share or "/" in share:
        raise invalid(path, f"{text!r} is not the ARN of a quota share")
    return queue, share


def job_id_of(text: str, *, path: str) -> int:
    """A job id given by itself or as a service job's ARN (the SageMaker SDK sends the ARN)."""
    raw = name_of(text, path=path, kind="service-job") if text.startswith("arn:") else text
    if not raw.isdigit() or len(raw) > 18:
        raise invalid(path, f"{text!r} is not a job id or a service job's ARN")
    return int(raw)


def plan_name_of(text: str, *, path: str) -> str:
    """A training plan's name from its SageMaker ARN (`...:training-plan/<name>`)."""
    match = _ARN.match(text)
    if match is None or match["service"] != "sagemaker" or not match["resource"].startswith("training-plan/"):
        raise invalid(path, f"{text!r} is not a SageMaker training plan ARN")
    return match["resource"].removeprefix("training-plan/")
