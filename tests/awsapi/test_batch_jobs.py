"""Service jobs through boto3: submit, describe (by id and by ARN), list with AWS's filters and paging,
terminate, reprioritise, the queue snapshot, tags; validation of everything boto3 lets through; who may see
and touch which job; a borrow and its reclaim read through preemptionSummary."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from awsapi.models import ServiceJob
from scheduling.models import Job, JobStatus, QuotaShare
from scheduling.passes import run as passes
from tests.api.support import G5, P4, P5
from tests.awsapi.conftest import payload
from tests.factories import job_in

pytestmark = pytest.mark.django_db(transaction=True)
PLAN_ARN = "arn:aws:sagemaker:us-west-2:123456789012:training-plan/nlp-p5-december"


def error_of(call, **kwargs) -> tuple[str, str]:
    with pytest.raises(ClientError) as caught:
        call(**kwargs)
    error = caught.value.response["Error"]
    return error["Code"], error["Message"]


def refused(call, **kwargs) -> str:
    code, message = error_of(call, **kwargs)
    assert code == "ClientException", message
    return message


def submit(batch, name="pretrain", share="nlp", body=None, **extra):
    return batch.submit_service_job(
        jobName=name,
        jobQueue="training",
        serviceJobType="SAGEMAKER_TRAINING",
        quotaShareName=share,
        serviceRequestPayload=body or payload(),
        **extra,
    )


def run_pass(world):
    passes.queue_pass_run(job_queue_id=world.queue.pk, trigger="test")


@pytest.fixture
def ana(simulated, batch_for):
    return batch_for(simulated.ana)


def test_a_job_is_submitted_described_by_id_and_arn_and_placed_by_the_pass(simulated, ana):
    made = submit(
        ana,
        body=payload(
            {"InstanceType": P5, "InstanceCount": 2, "TrainingPlanArns": [PLAN_ARN]},
            {"InstanceType": P4, "InstanceCount": 2},
        ),
        schedulingPriority=5,
        retryStrategy={"attempts": 2, "evaluateOnExit": [{"action": "EXIT", "onStatusReason": "OOM*"}]},
        timeoutConfig={"attemptDurationSeconds": 86400},
        preemptionConfiguration={"preemptionRetriesBeforeTermination": 3},
        tags={"experiment": "llm"},
    )
    job = Job.objects.get(pk=int(made["jobId"]))
    assert made["jobArn"] == f"arn:aws:batch:us-east-1:000000000000:service-job/{job.pk}"
    assert job.submitted_via == "aws" and job.attempt_duration_seconds == 86400
    assert job.retry_rules == [{"action": "EXIT", "on_status_reason": "OOM*"}]
    assert [
        (p.instance_type.name, p.instance_count, p.training_plan and p.training_plan.name)
        for p in job.instance_preferences.all()
    ] == [
        (P5, 2, "nlp-p5-december"),
        (P4, 2, None),
    ]
    by_id = ana.describe_service_job(jobId=made["jobId"])
    by_arn = ana.describe_service_job(jobId=made["jobArn"])
    for body in (by_id, by_arn):
        body.pop("ResponseMetadata")
    assert by_id == by_arn
    assert by_id["status"] == "RUNNABLE" and by_id["schedulingPriority"] == 5
    assert by_id["retryStrategy"] == {
        "attempts": 2,
        "evaluateOnExit": [{"action": "EXIT", "onStatusReason": "OOM*"}],
    }
    assert by_id["timeoutConfig"] == {"attemptDurationSeconds": 86400}
    assert by_id["tags"] == {"experiment": "llm"}
    assert (
        json.loads(by_id["serviceRequestPayload"])["ResourceConfig"]["InstancePreferences"][0]["InstanceType"]
        == P5
    )
    run_pass(simulated)
    placed = ana.describe_service_job(jobId=made["jobId"])
    assert placed["status"] == "SCHEDULED"
    assert placed["capacityUsage"] == [{"capacityUnit": P5, "quantity": 2}]
    assert placed["latestAttempt"]["serviceResourceId"] == {
        "name": "TrainingJobArn",
        "value": "arn:aws:sagemaker:us-east-1:000000000000:training-job/llm-20261204234847-a1",
    }
    assert isinstance(placed["createdAt"], int) and isinstance(placed["scheduledAt"], int)
    assert placed["scheduledAt"] >= placed["createdAt"]


def test_a_repeated_client_token_returns_the_first_job(ana):
    first = submit(ana, clientToken="token-1")
    again = submit(ana, name="other", clientToken="token-1")
    assert again["jobId"] == first["jobId"]
    assert Job.objects.count() == 1 and ServiceJob.objects.count() == 1


def test_the_command_comes_from_the_entrypoint_or_quotaportal_command(world, batch_for):
    ana = batch_for(world.ana)  # gpu-fleet runs an external executor: a command is needed
    assert refused(submit, batch=ana).startswith(
        "serviceRequestPayload.AlgorithmSpecification.ContainerEntrypoint"
    )
    spec = {
        "TrainingImage": "i",
        "ContainerEntrypoint": ["python"],
        "ContainerArguments": ["train.py", "--lr", "0.1"],
    }
    body = payload(
        AlgorithmSpecification=spec,
        Environment={"WANDB_MODE": "offline"},
        HyperParameters={"lr": "0.1", "batch-size": "8"},
    )
    made = submit(ana, body=body)
    job = Job.objects.get(pk=int(made["jobId"]))
    assert job.payload["command"] == ["python", "train.py", "--lr", "0.1"]
    assert job.payload["env"] == {
        "WANDB_MODE": "offline",
        "SM_HPS": '{"batch-size": "8", "lr": "0.1"}',
        "SM_HP_LR": "0.1",  # SM_HP_BATCH-SIZE cannot be a variable: only SM_HPS carries it
    }
    made = submit(
        ana, name="sdk", body=payload(Environment={"QUOTAPORTAL_COMMAND": "torchrun --nproc 8 'train it.py'"})
    )
    assert Job.objects.get(pk=int(made["jobId"])).payload["command"] == [
        "torchrun",
        "--nproc",
        "8",
        "train it.py",
    ]


def test_submissions_boto3_lets_through_are_refused_naming_the_member(simulated, ana):
    base = "serviceRequestPayload.ResourceConfig"
    assert refused(
        ana.submit_service_job,
        jobName="j",
        jobQueue="training",
        serviceJobType="ECS",
        quotaShareName="nlp",
        serviceRequestPayload=payload(),
    ).startswith("serviceJobType: must be one of SAGEMAKER_TRAINING")
    assert refused(submit, batch=ana, schedulingPriority=99999).startswith(
        "schedulingPriority: must be between 0 and 9999"
    )
    assert refused(submit, batch=ana, retryStrategy={"attempts": 0}).startswith("retryStrategy.attempts")
    assert refused(
        submit, batch=ana, retryStrategy={"attempts": 1, "evaluateOnExit": [{"action": "MAYBE"}]}
    ).startswith("retryStrategy.evaluateOnExit[0].action")
    assert refused(submit, batch=ana, timeoutConfig={"attemptDurationSeconds": 2_592_001}).startswith(
        "timeoutConfig.attemptDurationSeconds"
    )
    assert refused(submit, batch=ana, body="not json").startswith("serviceRequestPayload: is not valid JSON")
    assert refused(submit, batch=ana, body="[1]").startswith("serviceRequestPayload: must be a JSON object")
    six = [{"InstanceType": t, "InstanceCount": 1} for t in (P5, P4, G5, "a", "b", "c")]
    assert refused(submit, batch=ana, body=payload(*six)).startswith(
        f"{base}.InstancePreferences: must list 1 to 5"
    )
    repeated = [{"InstanceType": P5, "InstanceCount": 1}, {"InstanceType": P5, "InstanceCount": 2}]
    assert refused(submit, batch=ana, body=payload(*repeated)).startswith(
        f"{base}.InstancePreferences[1].InstanceType: ml.p5.48xlarge repeats"
    )
    unknown = [{"InstanceType": P5, "InstanceCount": 1}, {"InstanceType": "ml.x", "InstanceCount": 1}]
    assert "InstancePreferences[1].InstanceType: unknown instance type 'ml.x'" in refused(
        submit, batch=ana, body=payload(*unknown)
    )
    plan = [
        {"InstanceType": P5, "InstanceCount": 1, "TrainingPlanArns": [PLAN_ARN.replace("december", "june")]}
    ]
    assert refused(submit, batch=ana, body=payload(*plan)).startswith(
        f"{base}.InstancePreferences[0].TrainingPlanArns[0]: no training plan"
    )
    too_many = [{"InstanceType": P5, "InstanceCount": 1}, {"InstanceType": P4, "InstanceCount": 500}]
    message = refused(submit, batch=ana, body=payload(*too_many))
    assert message.startswith(f"{base}.InstancePreferences[1]"), message
    mixed = [{"InstanceType": P5, "InstanceCount": 1}, {"InstanceType": P4}]
    assert "on every preference or on none" in refused(submit, batch=ana, body=payload(*mixed))
    groups = json.dumps(
        {"ResourceConfig": {"InstanceGroups": [{"InstanceType": P5}], "InstanceType": P5, "InstanceCount": 1}}
    )
    assert refused(submit, batch=ana, body=groups).startswith(
        f"{base}.InstanceGroups: not supported by quotaportal"
    )
    assert refused(submit, batch=ana, body=json.dumps({})).startswith(f"{base}: is required")
    assert refused(submit, batch=ana, shareIdentifier="a").startswith("shareIdentifier: not supported")
    assert refused(submit, batch=ana, share="nobody").startswith(
        "quotaShareName: job queue training has no quota share"
    )
    assert refused(
        ana.submit_service_job,
        jobName="bad name",
        jobQueue="training",
        serviceJobType="SAGEMAKER_TRAINING",
        quotaShareName="nlp",
        serviceRequestPayload=payload(),
    ).startswith("jobName")
    assert Job.objects.count() == 0


def test_the_single_instance_type_form_names_its_own_members(simulated, ana):
    body = json.dumps({"ResourceConfig": {"InstanceType": P4, "InstanceCount": 500}})
    assert refused(submit, batch=ana, body=body).startswith(
        "serviceRequestPayload.ResourceConfig.InstanceCount"
    )
    made = submit(
        ana,
        body=json.dumps(
            {
                "ResourceConfig": {"InstanceType": P4, "InstanceCount": 2},
                "StoppingCondition": {"MaxPendingTimeInSeconds": 3600},
            }
        ),
    )
    job = Job.objects.get(pk=int(made["jobId"]))
    assert job.max_pending_seconds == 3600 and job.instance_preferences.get().instance_count == 2


def test_another_teams_share_is_refused_and_its_jobs_are_unknown(simulated, batch_for):
    ana, chen = batch_for(simulated.ana), batch_for(simulated.chen)
    code, message = error_of(submit, batch=chen, share="nlp")
    assert code == "ClientException" and message.startswith("quotaShareName:")
    assert not Job.objects.exists()
    made = submit(ana)
    for call, kwargs in (
        (chen.describe_service_job, {"jobId": made["jobArn"]}),
        (chen.terminate_service_job, {"jobId": made["jobId"], "reason": "x"}),
        (chen.update_service_job, {"jobId": made["jobId"], "schedulingPriority": 9}),
        (chen.list_tags_for_resource, {"resourceArn": made["jobArn"]}),
    ):
        assert refused(call, **kwargs).startswith(("jobId: no job", "resourceArn: no job"))
    assert chen.list_service_jobs(jobQueue="training", jobStatus="RUNNABLE")["jobSummaryList"] == []
    assert Job.objects.get().status == JobStatus.RUNNABLE and Job.objects.get().scheduling_priority == 0


def test_a_member_cannot_terminate_a_teammates_job_but_a_manager_and_staff_can(simulated, batch_for):
    ana = batch_for(simulated.ana)
    first, second = submit(ana, name="a"), submit(ana, name="b")
    other = batch_for(simulated.users["ben"])  # manager of nlp
    other.terminate_service_job(jobId=first["jobArn"], reason="making room")
    described = ana.describe_service_job(jobId=first["jobId"])
    assert described["status"] == "FAILED" and described["isTerminated"] is True
    assert "making room" in described["statusReason"]
    batch_for(simulated.admin).update_service_job(jobId=second["jobArn"], schedulingPriority=7)
    assert Job.objects.get(pk=int(second["jobId"])).scheduling_priority == 7


def test_terminate_service_jobs_reports_each_job(simulated, batch_for):
    ana, chen = batch_for(simulated.ana), batch_for(simulated.chen)
    mine = submit(ana, name="mine")
    theirs = submit(
        chen, name="theirs", share="vision", body=payload({"InstanceType": G5, "InstanceCount": 1})
    )
    answer = ana.terminate_service_jobs(
        jobs=[mine["jobId"], "999999", theirs["jobArn"], "not-an-id"], reason="cleanup"
    )
    assert answer["successful"] == [mine["jobId"], "999999", theirs["jobArn"]]
    assert [error["job"] for error in answer["errors"]] == ["not-an-id"]
    assert Job.objects.get(pk=int(mine["jobId"])).status == JobStatus.CANCELLED
    assert Job.objects.get(pk=int(theirs["jobId"])).status == JobStatus.RUNNABLE


def test_update_service_job_changes_the_priority_within_range(ana):
    made = submit(ana)
    answer = ana.update_service_job(jobId=made["jobArn"], schedulingPriority=42)
    assert answer["jobId"] == made["jobId"]
    assert ana.describe_service_job(jobId=made["jobId"])["schedulingPriority"] == 42
    assert refused(ana.update_service_job, jobId=made["jobId"], schedulingPriority=10000).startswith(
        "schedulingPriority"
    )


def test_list_service_jobs_follows_aws_filters_and_pages(simulated, ana):
    ids = [submit(ana, name=f"sweep-{index}")["jobId"] for index in range(5)]
    submit(ana, name="other")
    assert ana.list_service_jobs(jobQueue="training")["jobSummaryList"] == []  # no status, no filter: RUNNING
    runnable = ana.list_service_jobs(jobQueue="training", jobStatus="RUNNABLE")["jobSummaryList"]
    assert len(runnable) == 6 and runnable[0]["jobName"] == "other"  # newest first
    named = ana.list_service_jobs(jobQueue="training", filters=[{"name": "JOB_NAME", "values": ["SWEEP-*"]}])
    assert sorted(row["jobId"] for row in named["jobSummaryList"]) == sorted(ids)
    by_share = ana.list_service_jobs(
        jobStatus="RUNNING", filters=[{"name": "QUOTA_SHARE_NAME", "values": ["nlp"]}]
    )
    assert by_share["jobSummaryList"] == []
    paginator = ana.get_paginator("list_service_jobs")
    pages = list(
        paginator.paginate(jobQueue="training", jobStatus="RUNNABLE", PaginationConfig={"PageSize": 4})
    )
    assert [len(page["jobSummaryList"]) for page in pages] == [4, 2]
    assert refused(
        ana.list_service_jobs, jobStatus="RUNNABLE", filters=[{"name": "SHARE_IDENTIFIER", "values": ["x"]}]
    ).startswith("filters[0].name: not supported")
    assert refused(ana.list_service_jobs, jobStatus="BORED").startswith("jobStatus")
    token = pages[0]["nextToken"]
    assert "another request" in refused(ana.list_service_jobs, jobStatus="SUCCEEDED", nextToken=token)
    run_pass(simulated)
    scheduled = ana.list_service_jobs(jobQueue="training", jobStatus="SCHEDULED")["jobSummaryList"]
    assert scheduled and all(row["latestAttempt"] for row in scheduled)


def test_the_snapshot_shows_the_front_of_the_queue_and_usage(simulated, ana):
    running = submit(ana, name="small", body=payload({"InstanceType": P5, "InstanceCount": 4}))
    run_pass(simulated)
    waiting = submit(ana, body=payload({"InstanceType": P5, "InstanceCount": 2}))  # nlp is at its limit
    run_pass(simulated)
    snapshot = ana.get_job_queue_snapshot(jobQueue="training")
    assert [row["jobArn"] for row in snapshot["frontOfQueue"]["jobs"]] == [waiting["jobArn"]]
    assert snapshot["frontOfQuotaShares"]["quotaShares"] == {"nlp": [snapshot["frontOfQueue"]["jobs"][0]]}
    assert snapshot["queueUtilization"]["totalCapacityUsage"] == [{"capacityUnit": P5, "quantity": 4.0}]
    usage = {
        row["quotaShareName"]: row["capacityUsage"]
        for row in snapshot["queueUtilization"]["quotaShareUtilization"]["topCapacityUtilization"]
    }
    assert usage == {"nlp": [{"capacityUnit": P5, "quantity": 4.0}], "vision": []}
    assert running["jobId"] != waiting["jobId"]


def test_tags_are_listed_added_and_removed(simulated, batch_for):
    ana, admin = batch_for(simulated.ana), batch_for(simulated.admin)
    made = submit(ana, tags={"a": "1"})
    ana.tag_resource(resourceArn=made["jobArn"], tags={"b": "2"})
    ana.untag_resource(resourceArn=made["jobArn"], tagKeys=["a"])
    assert ana.list_tags_for_resource(resourceArn=made["jobArn"])["tags"] == {"b": "2"}
    share_arn = "arn:aws:batch:us-east-1:000000000000:job-queue/training/quota-share/nlp"
    admin.tag_resource(resourceArn=share_arn, tags={"owner": "nlp team", "path/like": "x"})
    admin.untag_resource(resourceArn=share_arn, tagKeys=["path/like"])
    assert ana.list_tags_for_resource(resourceArn=share_arn)["tags"] == {"owner": "nlp team"}
    code, _ = error_of(ana.tag_resource, resourceArn=share_arn, tags={"x": "y"})
    assert code == "AccessDeniedException"
    assert refused(ana.tag_resource, resourceArn=made["jobArn"], tags={"aws:x": "y"}).startswith("tags.aws:x")


def test_a_borrow_and_its_reclaim_are_seen_in_the_preemption_summary(simulated, batch_for):
    admin = batch_for(simulated.admin)
    admin.update_quota_share(
        quotaShareArn="arn:aws:batch:us-east-1:000000000000:job-queue/training/quota-share/nlp",
        resourceSharingConfiguration={"strategy": "LEND"},
    )
    # No free pool: P4 capacity is what the two shares own (nlp 4, vision 6).
    admin.update_service_environment(
        serviceEnvironment="gpu-fleet",
        capacityLimits=[
            {"capacityUnit": P5, "maxCapacity": 8},
            {"capacityUnit": P4, "maxCapacity": 10},
            {"capacityUnit": G5, "maxCapacity": 24},
        ],
    )
    vision = batch_for(simulated.chen)
    borrower = submit(
        vision, name="borrower", share="vision", body=payload({"InstanceType": P4, "InstanceCount": 10})
    )
    run_pass(simulated)
    assert vision.describe_service_job(jobId=borrower["jobArn"])["status"] == "SCHEDULED"
    owner = submit(
        batch_for(simulated.ana), name="owner", body=payload({"InstanceType": P4, "InstanceCount": 4})
    )
    run_pass(simulated)
    described = vision.describe_service_job(jobId=borrower["jobArn"])
    assert described["status"] == "RUNNABLE"
    summary = described["preemptionSummary"]
    assert summary["preemptedAttemptCount"] == 1
    (attempt,) = summary["recentPreemptedAttempts"]
    assert attempt["statusReason"].startswith("PREEMPTED_RECLAIM")
    assert attempt["serviceResourceId"]["value"].endswith("-a1")
    assert Job.objects.get(pk=int(owner["jobId"])).status == JobStatus.SCHEDULED
    assert QuotaShare.objects.get(name="nlp").strategy == "LEND"


def test_a_job_submitted_elsewhere_reads_as_a_service_job_with_its_preferences(simulated, ana):
    job = job_in(simulated.nlp, [(P5, 2, simulated.plan), (P4, 1)], name="from-the-api", user=simulated.ana)
    described = ana.describe_service_job(jobId=str(job.pk))
    request = json.loads(described["serviceRequestPayload"])
    assert request["ResourceConfig"]["InstancePreferences"] == [
        {
            "InstanceType": P5,
            "InstanceCount": 2,
            "TrainingPlanArns": [PLAN_ARN.replace("us-west-2:123456789012", "us-east-1:000000000000")],
        },
        {"InstanceType": P4, "InstanceCount": 1},
    ]
    # What Describe answers can be submitted again as it is.
    again = submit(ana, name="resubmitted", body=described["serviceRequestPayload"])
    assert Job.objects.get(pk=int(again["jobId"])).instance_preferences.count() == 2
