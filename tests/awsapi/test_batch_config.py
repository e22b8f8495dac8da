"""Environments, scheduling policies, queues and quota shares through boto3: every operation, the rules of
quotaportal's services behind them, what AWS has and quotaportal lacks refused by name, nothing half-made."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from awsapi.models import QueuePolicy
from scheduling.models import Event, EventKind, JobQueue, QuotaShare, ServiceEnvironment
from tests.api.support import G5, P4, P5

pytestmark = pytest.mark.django_db(transaction=True)
ACCOUNT = "arn:aws:batch:us-east-1:000000000000"


def refused(call, **kwargs) -> str:
    """The ClientException's message (any other error fails the test)."""
    with pytest.raises(ClientError) as caught:
        call(**kwargs)
    error = caught.value.response["Error"]
    assert error["Code"] == "ClientException", error
    return error["Message"]


@pytest.fixture
def admin(world, batch_for):
    return batch_for(world.admin)


def environment(batch, name="fleet-2", **extra):
    return batch.create_service_environment(
        serviceEnvironmentName=name,
        serviceEnvironmentType="SAGEMAKER_TRAINING",
        capacityLimits=[{"capacityUnit": P5, "maxCapacity": 8}, {"capacityUnit": P4, "maxCapacity": 4}],
        **extra,
    )


def test_an_environment_is_created_described_updated_and_deleted(admin):
    made = environment(admin, tags={"quotaportal:executor": "simulated", "cost-center": "42"})
    assert made["serviceEnvironmentArn"] == f"{ACCOUNT}:service-environment/fleet-2"
    assert ServiceEnvironment.objects.get(name="fleet-2").executor == "simulated"
    described = admin.describe_service_environments(serviceEnvironments=[made["serviceEnvironmentArn"]])
    (detail,) = described["serviceEnvironments"]
    assert detail["capacityLimits"] == [
        {"maxCapacity": 4, "capacityUnit": P4},
        {"maxCapacity": 8, "capacityUnit": P5},
    ]
    assert detail["tags"] == {"quotaportal:executor": "simulated", "cost-center": "42"}
    assert detail["state"] == "ENABLED" and detail["status"] == "VALID"
    admin.update_service_environment(
        serviceEnvironment="fleet-2",
        state="DISABLED",
        capacityLimits=[{"capacityUnit": G5, "maxCapacity": 2}],
    )
    detail = admin.describe_service_environments(serviceEnvironments=["fleet-2"])["serviceEnvironments"][0]
    assert detail["state"] == "DISABLED" and detail["capacityLimits"] == [
        {"maxCapacity": 2, "capacityUnit": G5}
    ]
    admin.delete_service_environment(serviceEnvironment=made["serviceEnvironmentArn"])
    assert not ServiceEnvironment.objects.filter(name="fleet-2").exists()
    assert (
        Event.objects.filter(
            kind=EventKind.CONFIG_CHANGED, data__object="scheduling.ServiceEnvironment"
        ).count()
        == 3
    )


def test_an_environment_defaults_to_the_external_executor(admin):
    environment(admin)
    assert ServiceEnvironment.objects.get(name="fleet-2").executor == "external"


def test_environment_input_boto3_lets_through_is_refused_naming_the_member(admin):
    def create(**kwargs):
        body = dict(serviceEnvironmentName="fleet-3", serviceEnvironmentType="SAGEMAKER_TRAINING")
        return admin.create_service_environment(**{**body, **kwargs})

    assert refused(create, capacityLimits=[{"capacityUnit": "NUM_INSTANCES", "maxCapacity": 4}]).startswith(
        "capacityLimits[0].capacityUnit: not supported"
    )
    assert "capacityLimits[0].capacityUnit: unknown instance type 'ml.nope'" in refused(
        create, capacityLimits=[{"capacityUnit": "ml.nope", "maxCapacity": 4}]
    )
    assert (
        refused(create, capacityLimits=[{"capacityUnit": P5}]) == "capacityLimits[0].maxCapacity: is required"
    )
    assert "capacityLimits[0].maxCapacity: must be between" in refused(
        create, capacityLimits=[{"capacityUnit": P5, "maxCapacity": -3}]
    )
    assert refused(create, serviceEnvironmentType="ECS", capacityLimits=[]).startswith(
        "serviceEnvironmentType"
    )
    assert "listed more than once" in refused(
        create,
        capacityLimits=[{"capacityUnit": P5, "maxCapacity": 1}, {"capacityUnit": P5, "maxCapacity": 2}],
    )
    assert not ServiceEnvironment.objects.filter(name="fleet-3").exists()


def test_lowering_capacity_under_the_shares_limits_is_refused_and_changes_nothing(admin, world):
    message = refused(
        admin.update_service_environment,
        serviceEnvironment="gpu-fleet",
        capacityLimits=[{"capacityUnit": P5, "maxCapacity": 1}],
    )
    assert message.startswith("capacityLimits")
    assert world.queue.service_environment.capacity_by_type()[P5] == 8


def test_a_policy_writes_its_rule_onto_the_queues_using_it(admin, world):
    made = admin.create_scheduling_policy(
        name="fair", quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"}
    )
    assert made["arn"] == f"{ACCOUNT}:scheduling-policy/fair"
    admin.update_job_queue(jobQueue="training", schedulingPolicyArn=made["arn"])
    admin.update_scheduling_policy(
        arn=made["arn"], quotaSharePolicy={"idleResourceAssignmentStrategy": "FAIR_SHARE"}
    )
    assert JobQueue.objects.get(name="training").idle_capacity_assignment == "FAIR_SHARE"
    (policy,) = admin.describe_scheduling_policies(arns=[made["arn"]])["schedulingPolicies"]
    assert policy["quotaSharePolicy"] == {"idleResourceAssignmentStrategy": "FAIR_SHARE"}
    assert admin.list_scheduling_policies()["schedulingPolicies"] == [{"arn": made["arn"]}]
    assert "used by job queue(s) training" in refused(admin.delete_scheduling_policy, arn=made["arn"])
    assert QueuePolicy.objects.filter(job_queue__name="training").exists()


def test_a_fair_share_policy_and_an_unknown_strategy_are_refused_by_name(admin):
    message = refused(
        admin.create_scheduling_policy,
        name="fs",
        fairsharePolicy={"shareDistribution": [{"shareIdentifier": "a", "weightFactor": 1.0}]},
    )
    assert message.startswith("fairsharePolicy: not supported by quotaportal")
    assert refused(
        admin.create_scheduling_policy, name="fs", quotaSharePolicy={"idleResourceAssignmentStrategy": "LIFO"}
    ).startswith("quotaSharePolicy.idleResourceAssignmentStrategy: must be one of FIFO, FAIR_SHARE")


def test_a_queue_is_created_with_one_environment_and_a_policy_described_and_deleted(admin):
    environment(admin, name="fleet-4")
    policy = admin.create_scheduling_policy(
        name="p", quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"}
    )
    made = admin.create_job_queue(
        jobQueueName="research",
        priority=10,
        jobQueueType="SAGEMAKER_TRAINING",
        schedulingPolicyArn=policy["arn"],
        serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": "fleet-4"}],
        tags={"team": "research"},
    )
    assert made["jobQueueArn"] == f"{ACCOUNT}:job-queue/research"
    (queue,) = admin.describe_job_queues(jobQueues=["research"])["jobQueues"]
    assert queue["schedulingPolicyArn"] == policy["arn"]
    assert queue["serviceEnvironmentOrder"] == [
        {"order": 1, "serviceEnvironment": f"{ACCOUNT}:service-environment/fleet-4"}
    ]
    assert queue["computeEnvironmentOrder"] == [] and queue["tags"] == {"team": "research"}
    admin.update_job_queue(jobQueue=made["jobQueueArn"], priority=20, state="DISABLED")
    assert JobQueue.objects.get(name="research").priority == 20
    admin.delete_job_queue(jobQueue="research")
    assert not JobQueue.objects.filter(name="research").exists()


def test_queue_features_quotaportal_lacks_are_refused_by_name(admin, world):
    environment(admin, name="fleet-5")

    def create(**kwargs):
        body = dict(
            jobQueueName="q2",
            priority=1,
            serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": "fleet-5"}],
        )
        return admin.create_job_queue(**{**body, **kwargs})

    assert "several queues per service environment are not supported" in refused(
        create, serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": "gpu-fleet"}]
    )
    assert "exactly one service environment" in refused(
        create,
        serviceEnvironmentOrder=[
            {"order": 1, "serviceEnvironment": "fleet-5"},
            {"order": 2, "serviceEnvironment": "gpu-fleet"},
        ],
    )
    assert refused(create, computeEnvironmentOrder=[{"order": 1, "computeEnvironment": "ce"}]).startswith(
        "computeEnvironmentOrder: not supported"
    )
    assert refused(
        create,
        jobStateTimeLimitActions=[
            {"reason": "r", "state": "RUNNABLE", "maxTimeSeconds": 600, "action": "CANCEL"}
        ],
    ).startswith("jobStateTimeLimitActions: not supported")
    assert refused(create, jobQueueType="ECS").startswith("jobQueueType")
    assert refused(create, priority=5000).startswith("priority: must be between 0 and 1000")
    assert "disable" in refused(admin.delete_job_queue, jobQueue="training")
    assert not JobQueue.objects.filter(name="q2").exists()


def share(admin, name="research", **extra):
    body = dict(
        quotaShareName=name,
        jobQueue="training",
        capacityLimits=[{"capacityUnit": G5, "maxCapacity": 4}],
        resourceSharingConfiguration={"strategy": "LEND_AND_BORROW", "borrowLimit": 50},
        preemptionConfiguration={"inSharePreemption": "ENABLED"},
        tags={"quotaportal:team": "vision"},
    )
    return admin.create_quota_share(**{**body, **extra})


def test_a_quota_share_is_created_for_the_team_its_tag_names_described_listed_updated_deleted(admin, world):
    made = share(admin)
    arn = made["quotaShareArn"]
    assert arn == f"{ACCOUNT}:job-queue/training/quota-share/research"
    created = QuotaShare.objects.get(name="research")
    assert created.team == world.team_vision and created.borrow_limit == 50 and created.in_share_preemption
    detail = admin.describe_quota_share(quotaShareArn=arn)
    assert detail["resourceSharingConfiguration"] == {"strategy": "LEND_AND_BORROW", "borrowLimit": 50}
    assert detail["preemptionConfiguration"] == {"inSharePreemption": "ENABLED"}
    assert detail["capacityLimits"] == [{"maxCapacity": 4, "capacityUnit": G5}]
    assert detail["tags"] == {"quotaportal:team": "vision"}
    names = [row["quotaShareName"] for row in admin.list_quota_shares(jobQueue="training")["quotaShares"]]
    assert names == ["nlp", "research", "vision"]
    admin.update_quota_share(
        quotaShareArn=arn, resourceSharingConfiguration={"strategy": "RESERVE"}, state="DISABLED"
    )
    updated = QuotaShare.objects.get(name="research")
    assert updated.strategy == "RESERVE" and updated.borrow_limit == -1 and updated.state == "DISABLED"
    admin.delete_quota_share(quotaShareArn=arn)
    assert not QuotaShare.objects.filter(name="research").exists()


def test_quota_share_input_is_checked_and_nothing_is_half_created(admin, world):
    assert refused(share, admin=admin, resourceSharingConfiguration={"strategy": "FOO"}).startswith(
        "resourceSharingConfiguration.strategy: must be one of RESERVE, LEND, LEND_AND_BORROW"
    )
    assert refused(
        share, admin=admin, resourceSharingConfiguration={"strategy": "LEND", "borrowLimit": 20}
    ).startswith("resourceSharingConfiguration.borrowLimit: only a LEND_AND_BORROW share borrows")
    assert refused(share, admin=admin, preemptionConfiguration={"inSharePreemption": "MAYBE"}).startswith(
        "preemptionConfiguration.inSharePreemption"
    )
    assert refused(share, admin=admin, tags={"quotaportal:team": "nobody"}).startswith(
        "tags.quotaportal:team"
    )
    assert refused(share, admin=admin, tags={"other": "x"}).startswith("tags.quotaportal:team: is required")
    over = refused(share, admin=admin, capacityLimits=[{"capacityUnit": P5, "maxCapacity": 5}])
    assert over.startswith("capacityLimits") and P5 in over
    assert refused(share, admin=admin, capacityLimits=[{"capacityUnit": P5, "maxCapacity": 0}]).startswith(
        "capacityLimits"
    )
    nlp_arn = f"{ACCOUNT}:job-queue/training/quota-share/nlp"
    assert refused(admin.update_quota_share, quotaShareArn=nlp_arn, capacityLimits=[]).startswith(
        "capacityLimits: must have 1 to 50 entries"
    )
    assert "disable quota share nlp" in refused(
        admin.delete_quota_share, quotaShareArn=f"{ACCOUNT}:job-queue/training/quota-share/nlp"
    )
    assert "is not the ARN of a quota share" in refused(
        admin.describe_quota_share, quotaShareArn=f"{ACCOUNT}:job-queue/training"
    )
    assert not QuotaShare.objects.filter(name="research").exists()


def test_only_staff_change_the_configuration_and_everyone_signed_in_reads_it(world, batch_for):
    ana = batch_for(world.ana)
    with pytest.raises(ClientError) as caught:
        share(ana)
    assert caught.value.response["Error"]["Code"] == "AccessDeniedException"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(ClientError):
        environment(ana)
    assert [row["quotaShareName"] for row in ana.list_quota_shares(jobQueue="training")["quotaShares"]] == [
        "nlp",
        "vision",
    ]
    assert len(ana.describe_service_environments()["serviceEnvironments"]) == 1


def test_describe_pages_with_next_tokens(admin):
    for index in range(3):
        environment(admin, name=f"fleet-p{index}")
    paginator = admin.get_paginator("describe_service_environments")
    pages = list(paginator.paginate(PaginationConfig={"PageSize": 2}))
    assert [len(page["serviceEnvironments"]) for page in pages] == [2, 2]
    assert "nextToken: not a token this API issued" in refused(
        admin.describe_service_environments, nextToken="forged"
    )
    assert refused(admin.describe_service_environments, maxResults=5000).startswith("maxResults")


def test_an_unsupported_operation_is_refused_by_name(admin):
    assert "operation listjobs is not supported by quotaportal" in refused(
        admin.list_jobs, jobQueue="training"
    )


def test_an_unused_policy_is_deleted_with_its_tags(admin):
    made = admin.create_scheduling_policy(
        name="spare", quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"}, tags={"a": "b"}
    )
    assert admin.list_tags_for_resource(resourceArn=made["arn"])["tags"] == {"a": "b"}
    admin.delete_scheduling_policy(arn=made["arn"])
    assert admin.describe_scheduling_policies(arns=[made["arn"]])["schedulingPolicies"] == []
    assert refused(admin.list_tags_for_resource, resourceArn=made["arn"]).startswith(
        "resourceArn: no scheduling policy"
    )
