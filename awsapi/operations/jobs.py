"""Service jobs: submit, describe, list, terminate, reprioritise, and the queue's snapshot, onto the same
services and selectors as /api/v1/jobs/. A job's id is its quotaportal id; its ARN carries the same id."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from django.db import transaction
from django.db.models import F, Prefetch, Q
from django.utils import timezone

from awsapi import arns, records, sagemaker
from awsapi.errors import AccessDenied, ClientError, invalid
from awsapi.models import ServiceJob, Tagged
from awsapi.operations.common import as_aws, queue_named
from awsapi.protocol import Members, compact, epoch_ms, max_results, page_position, page_token
from scheduling import retry
from scheduling.errors import Conflict, NotAllowed
from scheduling.models import (
    FINISHED_STATUSES,
    HOLDING_STATUSES,
    MAX_ATTEMPT_DURATION_SECONDS,
    MAX_STORED_INT,
    Job,
    JobAttempt,
    JobStatus,
    QuotaShare,
    ServiceEnvironment,
    StopOutcome,
    pending_words_load,
)
from scheduling.selectors.jobs import jobs_in_full
from scheduling.selectors.queue import queue_snapshot
from scheduling.selectors.visibility import visible_jobs
from scheduling.services import jobs as job_services

SAGEMAKER_TRAINING = "SAGEMAKER_TRAINING"
DURATION_TAG = "quotaportal:durationSeconds"
AWS_STATUSES = ("SUBMITTED", "PENDING", "RUNNABLE", "SCHEDULED", "STARTING", "RUNNING", "SUCCEEDED", "FAILED")
FILTERS = ("JOB_NAME", "BEFORE_CREATED_AT", "AFTER_CREATED_AT", "SHARE_IDENTIFIER", "QUOTA_SHARE_NAME")
RULE_NAMES = {
    "action": "action",
    "onStatusReason": "on_status_reason",
    "onReason": "on_reason",
    "onExitCode": "on_exit_code",
}
SNAPSHOT_JOBS = 100

SUBMIT_PATHS = {
    "name": "jobName",
    "job_queue": "jobQueue",
    "quota_share": "quotaShareName",
    "scheduling_priority": "schedulingPriority",
    "retry_attempts": "retryStrategy.attempts",
    "retry_rules": "retryStrategy.evaluateOnExit",
    "preemption_retries_before_termination": "preemptionConfiguration.preemptionRetriesBeforeTermination",
    "attempt_duration_seconds": "timeoutConfig.attemptDurationSeconds",
    "max_pending_seconds": "serviceRequestPayload.StoppingCondition.MaxPendingTimeInSeconds",
    "duration_seconds": f"tags.{DURATION_TAG}",
    "payload": "serviceRequestPayload",
    "client_token": "clientToken",
}


# --- reading a job the AWS way ---------------------------------------------------------------------------


def _visible(user):
    return Job.objects.filter(visible_jobs(user=user))


def job_for(user, text: str, path: str = "jobId") -> Job:
    """A job the user may see, by id or ARN; another team's job is as unknown as a missing one."""
    job_id = arns.job_id_of(text, path=path)
    job = _visible(user).filter(pk=job_id).first()
    if job is None:
        raise invalid(path, f"no job {text}")
    return job


def aws_status(job: Job) -> str:
    """CANCELLED reads as FAILED (the SDK's wait() ends on SUCCEEDED or FAILED only); STOPPING as RUNNING
    once its attempt started, SCHEDULED before."""
    if job.status == JobStatus.CANCELLED:
        return "FAILED"
    if job.status == JobStatus.STOPPING:
        return "RUNNING" if _started(job) else "SCHEDULED"
    return job.status


def _started(job: Job) -> bool:
    return job.started_at is not None and job.scheduled_at is not None and job.started_at >= job.scheduled_at


def _terminated(job: Job) -> bool:
    return job.status == JobStatus.CANCELLED or (
        job.status == JobStatus.STOPPING and job.stop_outcome == StopOutcome.CANCELLED
    )


def _training_job_name(job: Job) -> str:
    try:
        return job.aws.training_job_name
    except ServiceJob.DoesNotExist:
        return arns.training_job_name(job.name)


def _resource_id(job: Job, attempt: int) -> dict:
    return {"name": "TrainingJobArn", "value": arns.training_job_arn(_training_job_name(job), attempt)}


def _attempt_body(job: Job, attempt: JobAttempt) -> dict:
    return compact(
        {
            "serviceResourceId": _resource_id(job, attempt.attempt),
            "startedAt": epoch_ms(attempt.started_at),
            "stoppedAt": epoch_ms(attempt.stopped_at),
            "statusReason": attempt.status_reason or None,
        }
    )


def _status_reason(job: Job) -> str | None:
    reason = job.current_reason
    if job.status == JobStatus.CANCELLED:
        return reason or "cancelled"
    if job.status == JobStatus.FAILED:
        return reason or "failed"
    return reason or None


def _capacity_usage(job: Job) -> list[dict] | None:
    if job.status not in HOLDING_STATUSES or job.selected_instance_type is None:
        return None
    return [{"capacityUnit": job.selected_instance_type.name, "quantity": job.selected_instance_count}]


def _summary(job: Job) -> dict:
    attempts = list(job.attempts.all())
    return compact(
        {
            "latestAttempt": {"serviceResourceId": _resource_id(job, attempts[-1].attempt)}
            if attempts
            else None,
            "capacityUsage": _capacity_usage(job),
            "createdAt": epoch_ms(job.created_at),
            "jobArn": arns.service_job_arn(job.pk),
            "jobId": str(job.pk),
            "jobName": job.name,
            "scheduledAt": epoch_ms(job.scheduled_at),
            "serviceJobType": SAGEMAKER_TRAINING,
            "quotaShareName": job.quota_share_name,
            "status": aws_status(job),
            "statusReason": _status_reason(job),
            "startedAt": epoch_ms(job.started_at),
            "stoppedAt": epoch_ms(job.stopped_at),
            "isTerminated": _terminated(job),
        }
    )


def _payload_of(job: Job) -> str:
    """The request as it was sent; for a job submitted elsewhere, its preference list in SageMaker's words."""
    try:
        return job.aws.service_request_payload
    except ServiceJob.DoesNotExist:
        preferences = [
            compact(
                {
                    "InstanceType": entry.instance_type.name,
                    "InstanceCount": entry.instance_count,
                    "TrainingPlanArns": [arns.training_plan_arn(entry.training_plan.name)]
                    if entry.training_plan is not None
                    else None,
                }
            )
            for entry in job.instance_preferences.all()
        ]
        return json.dumps(
            {
                "TrainingJobName": _training_job_name(job),
                "ResourceConfig": {"InstancePreferences": preferences},
            }
        )


def _rules_out(rules: list) -> list[dict]:
    back = {ours: theirs for theirs, ours in RULE_NAMES.items()}
    return [{back[name]: value for name, value in rule.items() if value is not None} for rule in rules]


def describe_body(job: Job, tags: dict) -> dict:
    attempts = list(job.attempts.all())
    preempted = [
        attempt for attempt in attempts if attempt.status_reason.startswith(("PREEMPTED", "PREEMPTION"))
    ]
    return compact(
        {
            "attempts": [_attempt_body(job, attempt) for attempt in attempts],
            "capacityUsage": _capacity_usage(job),
            "createdAt": epoch_ms(job.created_at),
            "isTerminated": _terminated(job),
            "jobArn": arns.service_job_arn(job.pk),
            "jobId": str(job.pk),
            "jobName": job.name,
            "jobQueue": arns.job_queue_arn(job.job_queue_name),
            "latestAttempt": {"serviceResourceId": _resource_id(job, attempts[-1].attempt)}
            if attempts
            else None,
            "retryStrategy": compact(
                {"attempts": job.retry_attempts, "evaluateOnExit": _rules_out(job.retry_rules) or None}
            ),
            "scheduledAt": epoch_ms(job.scheduled_at),
            "schedulingPriority": job.scheduling_priority,
            "serviceRequestPayload": _payload_of(job),
            "serviceJobType": SAGEMAKER_TRAINING,
            "quotaShareName": job.quota_share_name,
            "preemptionConfiguration": {
                "preemptionRetriesBeforeTermination": job.preemption_retries_before_termination
            }
            if job.preemption_retries_before_termination is not None
            else None,
            "preemptionSummary": {
                "preemptedAttemptCount": job.preemption_count,
                "recentPreemptedAttempts": [_attempt_body(job, attempt) for attempt in preempted[-5:]],
            },
            "startedAt": epoch_ms(job.started_at),
            "status": aws_status(job),
            "statusReason": _status_reason(job),
            "stoppedAt": epoch_ms(job.stopped_at),
            "tags": tags or None,
            "timeoutConfig": {"attemptDurationSeconds": job.attempt_duration_seconds}
            if job.attempt_duration_seconds is not None
            else None,
        }
    )


# --- submitting ------------------------------------------------------------------------------------------


def _retry_strategy(members: Members) -> tuple[int, list[dict]]:
    strategy = members.obj("retryStrategy", None)
    if strategy is None:
        return 1, []
    strategy.only("attempts", "evaluateOnExit")
    attempts = strategy.integer("attempts", low=1, high=10)
    rules = []
    for path, item in strategy.items("evaluateOnExit", [], high=retry.MAX_RULES):
        rule = Members(item, path)
        rule.only(*RULE_NAMES)
        action = rule.string("action", choices=(retry.RETRY, retry.EXIT, "retry", "exit")).upper()
        converted = {"action": action}
        for theirs, ours in RULE_NAMES.items():
            if theirs != "action" and rule.get(theirs, None) is not None:
                pattern = rule.string(theirs, max_len=retry.MAX_PATTERN)
                if "*" in pattern[:-1]:
                    raise invalid(rule.at(theirs), "a * may only end the pattern")
                converted[ours] = pattern
        rules.append(converted)
    return attempts, rules


def submit_service_job(user, members: Members) -> dict:
    members.only(
        "jobName",
        "jobQueue",
        "retryStrategy",
        "schedulingPriority",
        "serviceRequestPayload",
        "serviceJobType",
        "shareIdentifier",
        "quotaShareName",
        "preemptionConfiguration",
        "timeoutConfig",
        "tags",
        "clientToken",
    )
    name = members.string("jobName", max_len=128)
    members.string("serviceJobType", choices=(SAGEMAKER_TRAINING,))
    members.refuse("shareIdentifier", "fair-share identifiers; name the job's quota share in quotaShareName")
    queue = queue_named(members.string("jobQueue", max_len=2048), "jobQueue")
    share_name = members.string("quotaShareName", max_len=128)
    share = QuotaShare.objects.select_related("team").filter(job_queue=queue, name=share_name).first()
    if share is None:
        raise invalid("quotaShareName", f"job queue {queue.name} has no quota share {share_name}")
    attempts, rules = _retry_strategy(members)
    priority = members.integer("schedulingPriority", 0, low=0, high=9999)
    preemption = members.obj("preemptionConfiguration", None)
    retries_before_termination = None
    if preemption is not None:
        preemption.only("preemptionRetriesBeforeTermination")
        retries_before_termination = preemption.integer(
            "preemptionRetriesBeforeTermination", None, low=0, high=MAX_STORED_INT
        )
    timeout = members.obj("timeoutConfig", None)
    attempt_duration = None
    if timeout is not None:
        timeout.only("attemptDurationSeconds")
        attempt_duration = timeout.integer(
            "attemptDurationSeconds", None, low=1, high=MAX_ATTEMPT_DURATION_SECONDS
        )
    tags = members.tags()
    duration = None
    if tags and DURATION_TAG in tags:
        text = tags[DURATION_TAG]
        if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_STORED_INT:
            raise invalid(f"tags.{DURATION_TAG}", f"must be a whole number of seconds, got {text!r}")
        duration = int(text)
    token = members.string("clientToken", None, max_len=64)
    payload_text = members.string("serviceRequestPayload", max_len=10 * 1024 * 1024)
    request = sagemaker.training_request(payload_text)
    if request.command is None and queue.service_environment.executor == ServiceEnvironment.Executor.EXTERNAL:
        raise invalid(*sagemaker.no_command_message())
    submission = job_services.JobSubmission(
        name=name,
        job_queue=queue,
        quota_share=share,
        instance_preferences=request.preferences,
        scheduling_priority=priority,
        retry_attempts=attempts,
        retry_rules=rules,
        preemption_retries_before_termination=retries_before_termination,
        max_pending_seconds=request.max_pending_seconds,
        duration_seconds=duration,
        attempt_duration_seconds=attempt_duration,
        payload=sagemaker.executor_payload(request),
        client_token=token,
        submitted_via="aws",
    )
    with (
        as_aws({**SUBMIT_PATHS, **request.paths}, "quotaShareName", refusal_is_invalid=True),
        transaction.atomic(),
    ):
        job, created = job_services.job_submit(user=user, submission=submission)
        if created:
            records.service_job_record(
                job=job,
                service_request_payload=payload_text,
                training_job_name=arns.training_job_name(request.training_job_name or name),
            )
            if tags:
                records.tags_merge(resource=Tagged.SERVICE_JOB, object_id=job.pk, tags=tags)
    return {"jobArn": arns.service_job_arn(job.pk), "jobName": job.name, "jobId": str(job.pk)}


# --- reading ---------------------------------------------------------------------------------------------


def describe_service_job(user, members: Members) -> dict:
    members.only("jobId")
    job = job_for(user, members.string("jobId", max_len=2048))
    job = jobs_in_full().select_related("aws").get(pk=job.pk)
    return describe_body(job, records.tags_of(Tagged.SERVICE_JOB, job.pk))


def _status_q(status: str) -> Q:
    stopping_started = Q(
        status=JobStatus.STOPPING, started_at__isnull=False, started_at__gte=F("scheduled_at")
    )
    if status == "RUNNING":
        return Q(status=JobStatus.RUNNING) | stopping_started
    if status == "SCHEDULED":
        return Q(status=JobStatus.SCHEDULED) | (Q(status=JobStatus.STOPPING) & ~stopping_started)
    if status == "FAILED":
        return Q(status__in=[JobStatus.FAILED, JobStatus.CANCELLED])
    if status in ("SUBMITTED", "PENDING"):
        return Q(pk__in=[])  # quotaportal validates at once: a job is RUNNABLE from its submission
    return Q(status=status)


def _ms_filter(path: str, text: str) -> datetime:
    try:
        if not (text.isascii() and text.isdigit()):
            raise ValueError(text)
        return datetime.fromtimestamp(int(text) / 1000, tz=UTC)
    except (ValueError, OverflowError, OSError):
        raise invalid(path, f"must be milliseconds since the epoch, got {text!r}") from None


def _filter_q(members: Members) -> tuple[Q | None, str | None]:
    """The one filter AWS allows a list, as a condition, and its name."""
    given = members.items("filters", None, high=1)
    if not given:
        return None, None
    path, item = given[0]
    entry = Members(item, path)
    entry.only("name", "values")
    name = entry.string("name", choices=FILTERS)
    values = entry.items("values", low=1, high=100)
    texts = []
    for value_path, value in values:
        if not isinstance(value, str) or not 1 <= len(value) <= 256:
            raise invalid(value_path, "must be a string of 1 to 256 characters")
        texts.append(value)
    if name == "SHARE_IDENTIFIER":
        raise invalid(
            entry.at("name"), "not supported by quotaportal: fair-share identifiers; use QUOTA_SHARE_NAME"
        )
    if name == "QUOTA_SHARE_NAME":
        return Q(quota_share_name__in=texts), name
    if name == "JOB_NAME":
        condition = Q(pk__in=[])
        for text in texts:
            condition |= Q(name__istartswith=text[:-1]) if text.endswith("*") else Q(name__iexact=text)
        return condition, name
    moment = _ms_filter(f"{path}.values[0]", texts[0])
    return (Q(created_at__lt=moment) if name == "BEFORE_CREATED_AT" else Q(created_at__gt=moment)), name


def list_service_jobs(user, members: Members) -> dict:
    members.only("jobQueue", "jobStatus", "maxResults", "nextToken", "filters")
    jobs = _visible(user)
    queue_text = members.string("jobQueue", None, max_len=2048)
    if queue_text is not None:
        jobs = jobs.filter(job_queue_name=arns.name_of(queue_text, path="jobQueue", kind="job-queue"))
    status = members.string("jobStatus", None, choices=AWS_STATUSES)
    condition, filter_name = _filter_q(members)
    if condition is not None:
        jobs = jobs.filter(condition)
    # AWS: no status and no filter lists RUNNING jobs; a filter ignores the status unless it names a share.
    if status is None and condition is None:
        status = "RUNNING"
    if status is not None and filter_name in (None, "QUOTA_SHARE_NAME"):
        jobs = jobs.filter(_status_q(status))
    query = [queue_text, status, members.get("filters", None)]
    after = page_position(members, operation="listservicejobs", query=query)
    if after is not None:
        jobs = jobs.filter(pk__lt=after)
    size = max_results(members)
    rows = list(
        jobs.select_related("selected_instance_type", "aws", "pending")
        .prefetch_related(Prefetch("attempts", queryset=JobAttempt.objects.order_by("scheduled_at", "id")))
        .order_by("-id")[: size + 1]
    )
    page = rows[:size]
    pending_words_load(page)  # the page's reasons, worded in one query
    token = (
        page_token(operation="listservicejobs", query=query, position=page[-1].pk)
        if len(rows) > size
        else None
    )
    return compact({"jobSummaryList": [_summary(job) for job in page], "nextToken": token})


# --- changing --------------------------------------------------------------------------------------------


def _terminate(user, text: str, reason: str, path: str) -> None:
    job = job_for(user, text, path)
    if job.status in FINISHED_STATUSES:
        return  # AWS: terminating a finished job changes nothing
    try:
        job_services.job_cancel(job_id=job.pk, actor=user, reason=reason)
    except NotAllowed as exc:
        raise AccessDenied(f"{path}: {exc.message}") from None
    except Conflict:
        return  # it finished meanwhile


def _reason(members: Members) -> str:
    return members.string("reason", min_len=0, max_len=500)


def terminate_service_job(user, members: Members) -> dict:
    members.only("jobId", "reason")
    _terminate(user, members.string("jobId", max_len=2048), _reason(members), "jobId")
    return {}


def terminate_service_jobs(user, members: Members) -> dict:
    members.only("jobs", "reason")
    reason = _reason(members)
    successful, errors = [], []
    for path, text in members.items("jobs", low=1, high=50):
        if not isinstance(text, str):
            raise invalid(path, "must be a job id or ARN")
        try:
            _terminate(user, text, reason, path)
        except AccessDenied as exc:
            errors.append({"job": text, "code": "AccessDenied", "message": exc.message})
        except ClientError as exc:
            if exc.message.startswith(f"{path}: no job"):
                successful.append(text)  # AWS: an unknown job counts as terminated
            else:
                errors.append({"job": text, "code": "ClientException", "message": exc.message})
        else:
            successful.append(text)
    return {"successful": successful, "errors": errors}


def update_service_job(user, members: Members) -> dict:
    members.only("jobId", "schedulingPriority")
    job = job_for(user, members.string("jobId", max_len=2048))
    priority = members.integer("schedulingPriority", low=0, high=9999)
    with as_aws({"scheduling_priority": "schedulingPriority"}, "jobId"):
        job_services.job_set_priority(job_id=job.pk, priority=priority, actor=user)
    return {"jobArn": arns.service_job_arn(job.pk), "jobName": job.name, "jobId": str(job.pk)}


# --- the queue's snapshot --------------------------------------------------------------------------------


def get_job_queue_snapshot(user, members: Members) -> dict:
    members.only("jobQueue")
    queue = queue_named(members.string("jobQueue", max_len=2048), "jobQueue")
    now = timezone.now()
    snapshot = queue_snapshot(job_queue=queue, now=now, job_limit=SNAPSHOT_JOBS)
    taken = epoch_ms(now)

    def position(job: Job) -> dict:
        return {
            "jobArn": arns.service_job_arn(job.pk),
            "earliestTimeAtPosition": epoch_ms(job.runnable_since),
        }

    fronts: dict[str, list[dict]] = {}
    for job in snapshot.jobs:
        fronts.setdefault(job.quota_share_name, [position(job)])
    usage_by_share = []
    for share in snapshot.usage.shares:
        held = [{"capacityUnit": row.instance_type, "quantity": row.usage} for row in share.rows if row.usage]
        usage_by_share.append({"quotaShareName": share.name, "capacityUsage": held})
    totals = [
        {"capacityUnit": row.instance_type, "quantity": row.owned + row.borrowed}
        for row in snapshot.usage.types
        if row.owned + row.borrowed
    ]
    return {
        "frontOfQueue": {"jobs": [position(job) for job in snapshot.jobs], "lastUpdatedAt": taken},
        "frontOfQuotaShares": {"quotaShares": fronts, "lastUpdatedAt": taken},
        "queueUtilization": {
            "totalCapacityUsage": totals,
            "quotaShareUtilization": {"topCapacityUtilization": usage_by_share},
            "lastUpdatedAt": taken,
        },
    }
