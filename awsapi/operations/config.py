"""Service environments, scheduling policies, job queues and quota shares, onto `scheduling.services`."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.db.models import Prefetch

from awsapi import arns, records
from awsapi.errors import invalid
from awsapi.models import QueuePolicy, SchedulingPolicy, Tagged
from awsapi.operations.common import (
    LIMIT_PATHS,
    as_aws,
    environment_named,
    instance_type_named,
    names_wanted,
    queue_named,
    share_by_arn,
    staff_only,
)
from awsapi.protocol import Members, compact, max_results, page_position, page_token
from scheduling import rules
from scheduling.models import (
    MAX_STORED_INT,
    EnvironmentCapacity,
    IdleCapacityAssignment,
    JobQueue,
    QuotaShare,
    ServiceEnvironment,
    ShareCapacityLimit,
    State,
    Team,
)
from scheduling.services import configuration as config_services

STATES = (State.ENABLED, State.DISABLED)
SAGEMAKER_TRAINING = "SAGEMAKER_TRAINING"
TEAM_TAG, EXECUTOR_TAG = "quotaportal:team", "quotaportal:executor"
STRATEGIES = tuple(QuotaShare.Strategy.values)
IDLE_STRATEGIES = tuple(IdleCapacityAssignment.values)


def _paged(members: Members, *, operation: str, query: object, rows: list) -> tuple[list, str | None]:
    """One page of `rows` (a list already in its order) and the token of the next, if any."""
    size = max_results(members)
    start = page_position(members, operation=operation, query=query) or 0
    page = rows[start : start + size]
    more = start + size < len(rows)
    return page, page_token(operation=operation, query=query, position=start + size) if more else None


def _limits(members: Members) -> list[rules.LimitInput]:
    limits = []
    for path, item in members.items("capacityLimits", low=1, high=50):
        limit = Members(item, path)
        limit.only("maxCapacity", "capacityUnit")
        unit = limit.string("capacityUnit", max_len=64)
        if unit == "NUM_INSTANCES":
            raise invalid(
                limit.at("capacityUnit"),
                "not supported by quotaportal: NUM_INSTANCES; name an instance type (e.g. ml.p5.48xlarge)",
            )
        # Optional in AWS's model for environments; quotaportal needs it everywhere.
        maximum = limit.integer("maxCapacity", low=0, high=MAX_STORED_INT)
        limits.append(rules.LimitInput(instance_type_named(unit, limit.at("capacityUnit")), maximum))
    return limits


def _state(members: Members, default=None):
    return members.string("state", default, choices=STATES)


# --- service environments --------------------------------------------------------------------------------


def _environment_detail(environment: ServiceEnvironment, tags: dict) -> dict:
    return compact(
        {
            "serviceEnvironmentName": environment.name,
            "serviceEnvironmentArn": arns.service_environment_arn(environment.name),
            "serviceEnvironmentType": SAGEMAKER_TRAINING,
            "state": environment.state,
            "status": "VALID",
            "capacityLimits": [
                {"maxCapacity": limit.max_capacity, "capacityUnit": limit.instance_type.name}
                for limit in environment.capacity_limits.all()
            ],
            "tags": tags or None,
        }
    )


def create_service_environment(user, members: Members) -> dict:
    staff_only(user)
    members.only("serviceEnvironmentName", "serviceEnvironmentType", "state", "capacityLimits", "tags")
    name = members.string("serviceEnvironmentName", max_len=128)
    members.string("serviceEnvironmentType", choices=(SAGEMAKER_TRAINING,))
    state = _state(members, State.ENABLED)
    limits = _limits(members)
    tags = members.tags()
    executor = (tags or {}).get(EXECUTOR_TAG, settings.AWS_DEFAULT_EXECUTOR)
    if executor not in ServiceEnvironment.Executor.values:
        raise invalid(f"tags.{EXECUTOR_TAG}", f"must be external or simulated, got {executor!r}")
    if ServiceEnvironment.objects.filter(name=name).exists():
        raise invalid("serviceEnvironmentName", f"a service environment named {name} already exists")
    paths = {"name": "serviceEnvironmentName", "state": "state", **LIMIT_PATHS}
    with as_aws(paths), transaction.atomic():
        environment = config_services.service_environment_create(
            fields={"name": name, "state": state, "executor": executor}, limits=limits, actor=user
        )
        if tags:
            records.tags_merge(resource=Tagged.SERVICE_ENVIRONMENT, object_id=environment.pk, tags=tags)
    return {"serviceEnvironmentName": name, "serviceEnvironmentArn": arns.service_environment_arn(name)}


def describe_service_environments(user, members: Members) -> dict:
    members.only("serviceEnvironments", "maxResults", "nextToken")
    names = names_wanted(members, "serviceEnvironments", "service-environment")
    environments = ServiceEnvironment.objects.prefetch_related(
        Prefetch("capacity_limits", queryset=EnvironmentCapacity.objects.select_related("instance_type"))
    ).order_by("name")
    if names is not None:
        environments = environments.filter(name__in=names)
    page, token = _paged(
        members, operation="describeserviceenvironments", query=names, rows=list(environments)
    )
    tags = records.tags_of_many(Tagged.SERVICE_ENVIRONMENT, [environment.pk for environment in page])
    return compact(
        {
            "serviceEnvironments": [_environment_detail(env, tags.get(env.pk, {})) for env in page],
            "nextToken": token,
        }
    )


def update_service_environment(user, members: Members) -> dict:
    staff_only(user)
    members.only("serviceEnvironment", "state", "capacityLimits")
    environment = environment_named(members.string("serviceEnvironment", max_len=2048), "serviceEnvironment")
    state = _state(members)
    limits = _limits(members) if members.get("capacityLimits", None) is not None else None
    changes = {"state": state} if state is not None else {}
    with as_aws({"state": "state", **LIMIT_PATHS}, "serviceEnvironment"):
        config_services.service_environment_update(
            environment=environment, changes=changes, limits=limits, actor=user
        )
    return {
        "serviceEnvironmentName": environment.name,
        "serviceEnvironmentArn": arns.service_environment_arn(environment.name),
    }


def delete_service_environment(user, members: Members) -> dict:
    staff_only(user)
    members.only("serviceEnvironment")
    environment = environment_named(members.string("serviceEnvironment", max_len=2048), "serviceEnvironment")
    if environment.state != State.DISABLED:
        raise invalid("serviceEnvironment", f"disable {environment.name} (state DISABLED) before deleting it")
    queue = JobQueue.objects.filter(service_environment=environment).first()
    if queue is not None:
        raise invalid(
            "serviceEnvironment",
            f"{environment.name} still serves job queue {queue.name}; delete the queue first",
        )
    with as_aws({}, "serviceEnvironment"), transaction.atomic():
        records.tags_forget(resource=Tagged.SERVICE_ENVIRONMENT, object_id=environment.pk)
        config_services.config_object_delete(obj=environment, actor=user)
    return {}


# --- scheduling policies ---------------------------------------------------------------------------------


def _quota_share_policy(members: Members) -> str | None:
    members.refuse(
        "fairsharePolicy",
        "fair-share scheduling with share identifiers; use quotaSharePolicy "
        "(idleResourceAssignmentStrategy FIFO, or FAIR_SHARE to spread idle capacity by share weight)",
    )
    policy = members.obj("quotaSharePolicy", None)
    if policy is None:
        return None
    policy.only("idleResourceAssignmentStrategy")
    return policy.string("idleResourceAssignmentStrategy", choices=IDLE_STRATEGIES)


def _policy_by_arn(text: str, path: str) -> SchedulingPolicy:
    name = _policy_name_of(text, path)
    found = SchedulingPolicy.objects.filter(name=name).first()
    if found is None:
        raise invalid(path, f"no scheduling policy {name}")
    return found


def _policy_detail(policy: SchedulingPolicy, tags: dict) -> dict:
    return compact(
        {
            "name": policy.name,
            "arn": arns.scheduling_policy_arn(policy.name),
            "quotaSharePolicy": {"idleResourceAssignmentStrategy": policy.idle_resource_assignment_strategy},
            "tags": tags or None,
        }
    )


def create_scheduling_policy(user, members: Members) -> dict:
    staff_only(user)
    members.only("name", "quotaSharePolicy", "fairsharePolicy", "tags")
    name = members.string("name", max_len=128)
    strategy = _quota_share_policy(members)
    if strategy is None:
        raise invalid(
            "quotaSharePolicy", "is required: quotaportal's scheduling policies are quota-share policies"
        )
    tags = members.tags()
    if SchedulingPolicy.objects.filter(name=name).exists():
        raise invalid("name", f"a scheduling policy named {name} already exists")
    with as_aws({"name": "name", "idle_resource_assignment_strategy": "quotaSharePolicy"}):
        records.scheduling_policy_create(name=name, strategy=strategy, tags=tags, actor=user)
    return {"name": name, "arn": arns.scheduling_policy_arn(name)}


def describe_scheduling_policies(user, members: Members) -> dict:
    members.only("arns")
    wanted = []
    for path, text in members.items("arns", low=1, high=100):
        if not isinstance(text, str):
            raise invalid(path, "must be a string")
        wanted.append(_policy_name_of(text, path))
    policies = list(SchedulingPolicy.objects.filter(name__in=wanted).order_by("name"))
    tags = records.tags_of_many(Tagged.SCHEDULING_POLICY, [policy.pk for policy in policies])
    return {"schedulingPolicies": [_policy_detail(policy, tags.get(policy.pk, {})) for policy in policies]}


def _policy_name_of(text: str, path: str) -> str:
    if not text.startswith("arn:"):
        raise invalid(path, f"{text!r} is not a scheduling policy's ARN")
    return arns.name_of(text, path=path, kind="scheduling-policy")


def update_scheduling_policy(user, members: Members) -> dict:
    staff_only(user)
    members.only("arn", "quotaSharePolicy", "fairsharePolicy")
    policy = _policy_by_arn(members.string("arn", max_len=2048), "arn")
    strategy = _quota_share_policy(members)
    if strategy is not None:
        with as_aws({"idle_capacity_assignment": "quotaSharePolicy.idleResourceAssignmentStrategy"}, "arn"):
            records.scheduling_policy_update(policy=policy, strategy=strategy, actor=user)
    return {}


def delete_scheduling_policy(user, members: Members) -> dict:
    staff_only(user)
    members.only("arn")
    policy = _policy_by_arn(members.string("arn", max_len=2048), "arn")
    with as_aws({}, "arn"):
        records.scheduling_policy_delete(policy=policy, actor=user)
    return {}


def list_scheduling_policies(user, members: Members) -> dict:
    members.only("maxResults", "nextToken")
    names = list(SchedulingPolicy.objects.order_by("name").values_list("name", flat=True))
    page, token = _paged(members, operation="listschedulingpolicies", query=None, rows=names)
    return compact(
        {"schedulingPolicies": [{"arn": arns.scheduling_policy_arn(n)} for n in page], "nextToken": token}
    )


# --- job queues ------------------------------------------------------------------------------------------


def _queue_environment(members: Members) -> ServiceEnvironment | None:
    members.refuse(
        "computeEnvironmentOrder", "compute environments (container jobs); use serviceEnvironmentOrder"
    )
    members.refuse(
        "jobStateTimeLimitActions",
        "job state time limit actions; give each job MaxPendingTimeInSeconds instead",
    )
    order = members.items("serviceEnvironmentOrder", None, high=100)
    if order is None:
        return None
    if len(order) != 1:
        raise invalid(
            "serviceEnvironmentOrder",
            f"not supported by quotaportal: a job queue draws on exactly one service environment, got {len(order)}",
        )
    path, item = order[0]
    entry = Members(item, path)
    entry.only("order", "serviceEnvironment")
    entry.integer("order", low=0, high=MAX_STORED_INT)
    return environment_named(entry.string("serviceEnvironment", max_len=2048), entry.at("serviceEnvironment"))


def _environment_free(environment: ServiceEnvironment, queue: JobQueue | None) -> None:
    other = (
        JobQueue.objects.filter(service_environment=environment)
        .exclude(pk=getattr(queue, "pk", None))
        .first()
    )
    if other is not None:
        raise invalid(
            "serviceEnvironmentOrder[0].serviceEnvironment",
            f"{environment.name} already serves job queue {other.name}; several queues per service environment "
            "are not supported by quotaportal",
        )


def _policy_given(members: Members) -> SchedulingPolicy | None:
    text = members.string("schedulingPolicyArn", None, max_len=2048)
    return None if text is None else _policy_by_arn(text, "schedulingPolicyArn")


QUEUE_PATHS = {
    "name": "jobQueueName",
    "priority": "priority",
    "state": "state",
    "service_environment": "serviceEnvironmentOrder[0].serviceEnvironment",
    "idle_capacity_assignment": "schedulingPolicyArn",
}


def _queue_detail(queue: JobQueue, policy_name: str | None, tags: dict) -> dict:
    return compact(
        {
            "jobQueueName": queue.name,
            "jobQueueArn": arns.job_queue_arn(queue.name),
            "state": queue.state,
            "schedulingPolicyArn": arns.scheduling_policy_arn(policy_name) if policy_name else None,
            "status": "VALID",
            "priority": queue.priority,
            "computeEnvironmentOrder": [],
            "serviceEnvironmentOrder": [
                {
                    "order": 1,
                    "serviceEnvironment": arns.service_environment_arn(queue.service_environment.name),
                }
            ],
            "jobQueueType": SAGEMAKER_TRAINING,
            "tags": tags or None,
            "jobStateTimeLimitActions": [],
        }
    )


def create_job_queue(user, members: Members) -> dict:
    staff_only(user)
    members.only(
        "jobQueueName",
        "state",
        "schedulingPolicyArn",
        "priority",
        "computeEnvironmentOrder",
        "serviceEnvironmentOrder",
        "jobQueueType",
        "tags",
        "jobStateTimeLimitActions",
    )
    name = members.string("jobQueueName", max_len=128)
    state = _state(members, State.ENABLED)
    priority = members.integer("priority", low=0, high=1000)
    members.string("jobQueueType", SAGEMAKER_TRAINING, choices=(SAGEMAKER_TRAINING,))
    environment = _queue_environment(members)
    if environment is None:
        raise invalid(
            "serviceEnvironmentOrder", "is required: name the one service environment the queue uses"
        )
    policy = _policy_given(members)
    tags = members.tags()
    if JobQueue.objects.filter(name=name).exists():
        raise invalid("jobQueueName", f"a job queue named {name} already exists")
    _environment_free(environment, None)
    fields = {"name": name, "state": state, "priority": priority, "service_environment": environment}
    if policy is not None:
        fields["idle_capacity_assignment"] = policy.idle_resource_assignment_strategy
    with as_aws(QUEUE_PATHS), transaction.atomic():
        queue = config_services.config_object_create(model=JobQueue, fields=fields, actor=user)
        records.queue_policy_set(job_queue=queue, policy=policy)
        if tags:
            records.tags_merge(resource=Tagged.JOB_QUEUE, object_id=queue.pk, tags=tags)
    return {"jobQueueName": name, "jobQueueArn": arns.job_queue_arn(name)}


def describe_job_queues(user, members: Members) -> dict:
    members.only("jobQueues", "maxResults", "nextToken")
    names = names_wanted(members, "jobQueues", "job-queue")
    queues = JobQueue.objects.select_related("service_environment", "aws_policy__policy").order_by("name")
    if names is not None:
        queues = queues.filter(name__in=names)
    page, token = _paged(members, operation="describejobqueues", query=names, rows=list(queues))
    tags = records.tags_of_many(Tagged.JOB_QUEUE, [queue.pk for queue in page])
    return compact(
        {
            "jobQueues": [
                _queue_detail(queue, _policy_name(queue), tags.get(queue.pk, {})) for queue in page
            ],
            "nextToken": token,
        }
    )


def _policy_name(queue: JobQueue) -> str | None:
    try:
        return queue.aws_policy.policy.name
    except QueuePolicy.DoesNotExist:
        return None


def update_job_queue(user, members: Members) -> dict:
    staff_only(user)
    members.only(
        "jobQueue",
        "state",
        "schedulingPolicyArn",
        "priority",
        "computeEnvironmentOrder",
        "serviceEnvironmentOrder",
        "jobStateTimeLimitActions",
    )
    queue = queue_named(members.string("jobQueue", max_len=2048), "jobQueue")
    changes: dict = {}
    state = _state(members)
    if state is not None:
        changes["state"] = state
    priority = members.integer("priority", None, low=0, high=1000)
    if priority is not None:
        changes["priority"] = priority
    environment = _queue_environment(members)
    if environment is not None:
        _environment_free(environment, queue)
        changes["service_environment"] = environment
    policy = _policy_given(members)
    if policy is not None:
        changes["idle_capacity_assignment"] = policy.idle_resource_assignment_strategy
    with as_aws(QUEUE_PATHS, "jobQueue"), transaction.atomic():
        if changes:
            config_services.job_queue_update(job_queue=queue, changes=changes, actor=user)
        if policy is not None:
            records.queue_policy_set(job_queue=queue, policy=policy)
    return {"jobQueueName": queue.name, "jobQueueArn": arns.job_queue_arn(queue.name)}


def delete_job_queue(user, members: Members) -> dict:
    staff_only(user)
    members.only("jobQueue")
    queue = queue_named(members.string("jobQueue", max_len=2048), "jobQueue")
    share_ids = list(queue.quota_shares.values_list("pk", flat=True))
    with as_aws({"state": "jobQueue"}, "jobQueue"), transaction.atomic():
        config_services.job_queue_delete(job_queue=queue, actor=user)
        records.tags_forget(resource=Tagged.JOB_QUEUE, object_id=queue.pk)
        for share_id in share_ids:
            records.tags_forget(resource=Tagged.QUOTA_SHARE, object_id=share_id)
    return {}


# --- quota shares ----------------------------------------------------------------------------------------

SHARE_PATHS = {
    "name": "quotaShareName",
    "team": f"tags.{TEAM_TAG}",
    "strategy": "resourceSharingConfiguration.strategy",
    "borrow_limit": "resourceSharingConfiguration.borrowLimit",
    "in_share_preemption": "preemptionConfiguration.inSharePreemption",
    "state": "state",
    "job_queue": "jobQueue",
    **LIMIT_PATHS,
}


def _sharing(members: Members, required: bool) -> dict:
    sharing = (
        members.obj("resourceSharingConfiguration")
        if required
        else members.obj("resourceSharingConfiguration", None)
    )
    if sharing is None:
        return {}
    sharing.only("strategy", "borrowLimit")
    strategy = sharing.string("strategy", choices=STRATEGIES)
    borrow_limit = sharing.integer("borrowLimit", -1, low=-1, high=MAX_STORED_INT)
    if borrow_limit != -1 and strategy != QuotaShare.Strategy.LEND_AND_BORROW:
        raise invalid(
            sharing.at("borrowLimit"), f"only a LEND_AND_BORROW share borrows; {strategy} takes -1 or none"
        )
    return {"strategy": strategy, "borrow_limit": borrow_limit}


def _preemption(members: Members, required: bool) -> dict:
    preemption = (
        members.obj("preemptionConfiguration") if required else members.obj("preemptionConfiguration", None)
    )
    if preemption is None:
        return {}
    preemption.only("inSharePreemption")
    value = preemption.string("inSharePreemption", choices=STATES)
    return {"in_share_preemption": value == State.ENABLED}


def _team_of(name: str, tags: dict | None) -> Team:
    slug = (tags or {}).get(TEAM_TAG)
    if slug is not None:
        team = Team.objects.filter(slug=slug).first()
        if team is None:
            raise invalid(f"tags.{TEAM_TAG}", f"no team with slug {slug!r}")
        return team
    team = Team.objects.filter(slug=name).first()
    if team is None:
        raise invalid(
            f"tags.{TEAM_TAG}",
            f"is required: name the team that owns the share by its slug (no team's slug is {name!r})",
        )
    return team


def _share_detail(share: QuotaShare, tags: dict | None) -> dict:
    return compact(
        {
            "quotaShareName": share.name,
            "quotaShareArn": arns.quota_share_arn(share.job_queue.name, share.name),
            "jobQueueArn": arns.job_queue_arn(share.job_queue.name),
            "capacityLimits": [
                {"maxCapacity": limit.max_capacity, "capacityUnit": limit.instance_type.name}
                for limit in share.capacity_limits.all()
            ],
            "resourceSharingConfiguration": {"strategy": share.strategy, "borrowLimit": share.borrow_limit},
            "preemptionConfiguration": {
                "inSharePreemption": State.ENABLED if share.in_share_preemption else State.DISABLED
            },
            "state": share.state,
            "status": "VALID",
            "tags": tags,
        }
    )


_share_limits = Prefetch(
    "capacity_limits", queryset=ShareCapacityLimit.objects.select_related("instance_type")
)


def create_quota_share(user, members: Members) -> dict:
    staff_only(user)
    members.only(
        "quotaShareName",
        "jobQueue",
        "capacityLimits",
        "resourceSharingConfiguration",
        "preemptionConfiguration",
        "state",
        "tags",
    )
    name = members.string("quotaShareName", max_len=128)
    queue = queue_named(members.string("jobQueue", max_len=2048), "jobQueue")
    limits = _limits(members)
    fields = {"name": name, "job_queue": queue, "state": _state(members, State.ENABLED)}
    fields.update(_sharing(members, required=True))
    fields.update(_preemption(members, required=True))
    tags = members.tags()
    fields["team"] = _team_of(name, tags)
    with as_aws(SHARE_PATHS), transaction.atomic():
        share = config_services.quota_share_create(fields=fields, limits=limits, actor=user)
        if tags:
            records.tags_merge(resource=Tagged.QUOTA_SHARE, object_id=share.pk, tags=tags)
    return {"quotaShareName": name, "quotaShareArn": arns.quota_share_arn(queue.name, name)}


def describe_quota_share(user, members: Members) -> dict:
    members.only("quotaShareArn")
    share = share_by_arn(members.string("quotaShareArn", max_len=2048), "quotaShareArn")
    share = QuotaShare.objects.select_related("job_queue").prefetch_related(_share_limits).get(pk=share.pk)
    return _share_detail(share, records.tags_of(Tagged.QUOTA_SHARE, share.pk) or None)


def update_quota_share(user, members: Members) -> dict:
    staff_only(user)
    members.only(
        "quotaShareArn", "capacityLimits", "resourceSharingConfiguration", "preemptionConfiguration", "state"
    )
    share = share_by_arn(members.string("quotaShareArn", max_len=2048), "quotaShareArn")
    limits = _limits(members) if members.get("capacityLimits", None) is not None else None
    changes = {**_sharing(members, required=False), **_preemption(members, required=False)}
    state = _state(members)
    if state is not None:
        changes["state"] = state
    with as_aws(SHARE_PATHS, "quotaShareArn"):
        config_services.quota_share_update(share=share, changes=changes, limits=limits, actor=user)
    return {
        "quotaShareName": share.name,
        "quotaShareArn": arns.quota_share_arn(share.job_queue.name, share.name),
    }


def delete_quota_share(user, members: Members) -> dict:
    staff_only(user)
    members.only("quotaShareArn")
    share = share_by_arn(members.string("quotaShareArn", max_len=2048), "quotaShareArn")
    if share.state != State.DISABLED:
        raise invalid(
            "quotaShareArn", f"disable quota share {share.name} (state DISABLED) before deleting it"
        )
    with as_aws({"state": "quotaShareArn"}, "quotaShareArn"), transaction.atomic():
        records.tags_forget(resource=Tagged.QUOTA_SHARE, object_id=share.pk)
        config_services.quota_share_delete(share=share, actor=user)
    return {}


def list_quota_shares(user, members: Members) -> dict:
    members.only("jobQueue", "maxResults", "nextToken")
    queue = queue_named(members.string("jobQueue", max_len=2048), "jobQueue")
    shares = list(
        QuotaShare.objects.filter(job_queue=queue)
        .select_related("job_queue")
        .prefetch_related(_share_limits)
        .order_by("name")
    )
    page, token = _paged(members, operation="listquotashares", query=queue.pk, rows=shares)
    return compact({"quotaShares": [_share_detail(share, None) for share in page], "nextToken": token})
