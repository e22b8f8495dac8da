"""`POST <portal>/aws/batch/v1/<operation>` in botocore's rest-json protocol, and the tag routes.

Every request is signed (SigV4, `awsapi.auth`) and runs as its access key's user, in one transaction: an
operation that fails writes nothing. Errors are answered the way botocore parses them: the status, the
`x-amzn-ErrorType` header and a body `{"__type", "message"}`.
"""

from __future__ import annotations

import json
import logging
import uuid
from urllib.parse import quote

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from awsapi.auth import signed_user
from awsapi.errors import AwsError, ClientError
from awsapi.operations import config, jobs, tags
from awsapi.protocol import Members

logger = logging.getLogger("quotaportal.awsapi")

OPERATIONS = {
    "createserviceenvironment": config.create_service_environment,
    "describeserviceenvironments": config.describe_service_environments,
    "updateserviceenvironment": config.update_service_environment,
    "deleteserviceenvironment": config.delete_service_environment,
    "createschedulingpolicy": config.create_scheduling_policy,
    "describeschedulingpolicies": config.describe_scheduling_policies,
    "updateschedulingpolicy": config.update_scheduling_policy,
    "deleteschedulingpolicy": config.delete_scheduling_policy,
    "listschedulingpolicies": config.list_scheduling_policies,
    "createjobqueue": config.create_job_queue,
    "describejobqueues": config.describe_job_queues,
    "updatejobqueue": config.update_job_queue,
    "deletejobqueue": config.delete_job_queue,
    "createquotashare": config.create_quota_share,
    "describequotashare": config.describe_quota_share,
    "updatequotashare": config.update_quota_share,
    "deletequotashare": config.delete_quota_share,
    "listquotashares": config.list_quota_shares,
    "submitservicejob": jobs.submit_service_job,
    "describeservicejob": jobs.describe_service_job,
    "listservicejobs": jobs.list_service_jobs,
    "terminateservicejob": jobs.terminate_service_job,
    "terminateservicejobs": jobs.terminate_service_jobs,
    "updateservicejob": jobs.update_service_job,
    "getjobqueuesnapshot": jobs.get_job_queue_snapshot,
}
TAGS_SEGMENT = "/v1/tags/"


def _error(exc: AwsError, request_id: str) -> JsonResponse:
    response = JsonResponse({"__type": exc.code, "message": exc.message}, status=exc.status)
    response["x-amzn-ErrorType"] = exc.code
    response["x-amzn-RequestId"] = request_id
    return response


def _body(request: HttpRequest) -> Members:
    raw = request.body  # read, and its size checked, by the signature check before
    if not raw.strip():
        return Members({})
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ClientError(f"the request body is not JSON that can be read ({exc})") from None
    return Members(data)


def _answer(request: HttpRequest, raw_path: str, run) -> JsonResponse:
    request_id = str(uuid.uuid4())
    try:
        user = signed_user(request, raw_path=raw_path)
        with transaction.atomic():
            body = run(user)
    except AwsError as exc:
        return _error(exc, request_id)
    except RequestDataTooBig:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return _error(ClientError(f"the request body is larger than {limit} bytes", status=413), request_id)
    except Exception:
        logger.exception("AWS API request %s failed", request_id)
        return _error(AwsError("internal error; retry", code="ServerException", status=500), request_id)
    response = JsonResponse(body, status=200)
    response["x-amzn-RequestId"] = request_id
    return response


@csrf_exempt
def batch_operation(request: HttpRequest, operation: str) -> JsonResponse:
    def run(user):
        if request.method != "POST":
            raise ClientError(f"operation {operation} is called with POST")
        function = OPERATIONS.get(operation.lower())
        if function is None:
            raise ClientError(
                f"operation {operation} is not supported by quotaportal: it serves the quota-management and "
                "service-job operations of AWS Batch (service environments, scheduling policies, job queues, "
                "quota shares, service jobs, tags), not container jobs"
            )
        return function(user, _body(request))

    return _answer(request, request.path, run)


@csrf_exempt
def batch_tags(request: HttpRequest, resource_arn: str) -> JsonResponse:
    # WSGI hands over the path decoded; the client signed it encoded, the ARN as one segment (`/` as %2F).
    prefix = request.path[: request.path.index(TAGS_SEGMENT)]
    raw_path = prefix + TAGS_SEGMENT + quote(resource_arn, safe="-_.~")

    def run(user):
        if request.method == "GET":
            return tags.list_tags_for_resource(user, _body(request), resource_arn)
        if request.method == "POST":
            return tags.tag_resource(user, _body(request), resource_arn)
        if request.method == "DELETE":
            return tags.untag_resource(user, request.GET.getlist("tagKeys"), resource_arn)
        raise ClientError(f"{request.method} is not a tag operation")

    return _answer(request, raw_path, run)
