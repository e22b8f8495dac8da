"""Request and response bodies. References inside bodies are names (`"job_queue": "training"`).

Serializers check shapes and resolve names to rows, naming the field at fault; the rules that span rows
(limits against capacity, preference lists, plans) stay in `scheduling.rules`, run by the services.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.db import models
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.validators import UniqueValidator

from scheduling import rules
from scheduling.models import (
    MAX_BUDGET_GPU_HOURS,
    MAX_PREFERENCES,
    MAX_STORED_INT,
    MIN_STORED_INT,
    BudgetPeriod,
    BudgetScope,
    Event,
    IdleCapacityAssignment,
    InstanceType,
    Job,
    JobAttempt,
    JobQueue,
    JobTask,
    Membership,
    QuotaShare,
    ServiceEnvironment,
    State,
    Team,
    TrainingPlan,
)
from scheduling.selectors.budgets import share_budgets
from scheduling.selectors.events import event_text
from scheduling.services import executor as executor_services
from scheduling.services import jobs as job_services
from scheduling.services.gangs import parse_ports

UNSTORABLE_TEXT = re.compile("[\x00\ud800-\udfff]")
# What PostgreSQL's integer columns hold. SQLite holds 64 bits, so without these bounds it would keep 2**40
# seconds, and every pass of the queue would then overflow computing a datetime from it.
STORED_INT_RANGES = {
    "IntegerField": (MIN_STORED_INT, MAX_STORED_INT),
    "PositiveIntegerField": (0, MAX_STORED_INT),
    "SmallIntegerField": (-32_768, 32_767),
    "PositiveSmallIntegerField": (0, 32_767),
}

# --- bodies refuse fields they do not know ---------------------------------------------------------------


class RejectUnknownFields:
    """A write naming a field the body does not have is a 400 naming it, not silently ignored (a typo such
    as `sheduling_priority` would otherwise submit with the default). Read-only fields are accepted and
    ignored, so a body read from the API can be sent back; so is the browsable API forms' CSRF token."""

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            unknown = sorted(set(data) - set(self.fields) - {"csrfmiddlewaretoken"})
            if unknown:
                known = ", ".join(name for name, field in self.fields.items() if not field.read_only)
                raise serializers.ValidationError(
                    {name: [f"unknown field; this body takes {known}"] for name in unknown}
                )
        return super().to_internal_value(data)


class StrictSerializer(RejectUnknownFields, serializers.Serializer):
    pass


class StrictModelSerializer(RejectUnknownFields, serializers.ModelSerializer):
    def build_standard_field(self, field_name, model_field):
        """Integer columns refuse what PostgreSQL's would, whichever database runs (400 naming the field)."""
        field_class, kwargs = super().build_standard_field(field_name, model_field)
        bounds = STORED_INT_RANGES.get(model_field.get_internal_type())
        if bounds is not None and isinstance(model_field, models.IntegerField):
            low, high = bounds
            kwargs["min_value"] = max(kwargs.get("min_value", low), low)
            kwargs["max_value"] = min(kwargs.get("max_value", high), high)
        return field_class, kwargs


# --- references by name ----------------------------------------------------------------------------------


class NameField(serializers.SlugRelatedField):
    """A reference by name (or slug, username) inside a body; an unknown name is a 400 naming the field."""

    def __init__(self, what: str, slug_field: str = "name", **kwargs):
        kwargs["error_messages"] = {
            "does_not_exist": f"unknown {what} {{value}}",
            "invalid": f"give the {what} by its {slug_field}",
            **kwargs.get("error_messages", {}),
        }
        super().__init__(slug_field=slug_field, **kwargs)

    def to_internal_value(self, data):
        # Text PostgreSQL cannot hold (NUL, unpaired surrogates) names nothing: unknown, not a database error.
        if isinstance(data, str) and UNSTORABLE_TEXT.search(data):
            printable = data.encode("unicode_escape").decode()
            self.fail("does_not_exist", slug_name=self.slug_field, value=printable)
        return super().to_internal_value(data)


@extend_schema_field(OpenApiTypes.OBJECT)
class JsonObjectField(serializers.JSONField):
    """A JSON object (a job's payload, an event's data)."""


@extend_schema_field(
    {
        "type": "array",
        "maxItems": 5,
        "items": {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["RETRY", "EXIT"]},
                "on_status_reason": {"type": "string", "maxLength": 512},
                "on_reason": {"type": "string", "maxLength": 512},
                "on_exit_code": {"type": "string", "maxLength": 512},
            },
            "required": ["action"],
        },
    }
)
class RetryRulesField(serializers.JSONField):
    """A job's retry rules, checked whole by the submission service (each problem names its rule)."""


class ShareNameField(serializers.CharField):
    """A quota share by name; names are unique per queue, so the body's job_queue resolves it."""

    def to_representation(self, share: QuotaShare) -> str:
        return share.name


class ShareNamesField(serializers.ListField):
    """Quota shares by name, resolved inside the object's queue."""

    child = serializers.CharField(max_length=128)

    def to_representation(self, shares) -> list[str]:
        return [share.name for share in shares.all()]


# --- configuration ---------------------------------------------------------------------------------------


class CapacityLimitSerializer(StrictSerializer):
    instance_type = NameField("instance type", queryset=InstanceType.objects.all())
    # The upper bound is the database column's: a larger number is a 400, not an integer overflow.
    max_capacity = serializers.IntegerField(min_value=0, max_value=MAX_STORED_INT)


class ShareCapacityLimitSerializer(CapacityLimitSerializer):
    lending_limit = serializers.IntegerField(
        min_value=0,
        max_value=MAX_STORED_INT,
        required=False,
        allow_null=True,
        help_text=(
            "most of max_capacity a LEND or LEND_AND_BORROW share lends when idle; the rest it keeps. "
            "null or absent = lends all of it"
        ),
    )

    def to_representation(self, instance):
        # behaviour.md#what-there-is: absent = the share lends all of it, so a limit without one reads as it was
        # written.
        data = super().to_representation(instance)
        if data.get("lending_limit") is None:
            data.pop("lending_limit", None)
        return data


def limit_inputs(data: list[Mapping] | None) -> list[rules.LimitInput] | None:
    if data is None:
        return None
    return [
        rules.LimitInput(limit["instance_type"], limit["max_capacity"], limit.get("lending_limit"))
        for limit in data
    ]


class InstanceTypeSerializer(StrictModelSerializer):
    accelerated = serializers.BooleanField(read_only=True, help_text="gpu_count > 0")

    class Meta:
        model = InstanceType
        fields = ["id", "name", "gpu_count", "hourly_price", "accelerated"]


class MemberSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["username", "role"]


class TeamSerializer(StrictModelSerializer):
    members = MemberSerializer(source="memberships", many=True, read_only=True)

    class Meta:
        model = Team
        fields = ["id", "name", "slug", "members"]


class TeamMemberSerializer(StrictSerializer):
    username = NameField("user", slug_field="username", queryset=get_user_model().objects.all())
    role = serializers.ChoiceField(choices=Membership.Role.choices, default=Membership.Role.MEMBER)


class ServiceEnvironmentSerializer(StrictModelSerializer):
    capacity_limits = CapacityLimitSerializer(
        many=True, help_text="on-demand instances of each type it may run at once; written whole"
    )

    executor_accounts = NameField(
        "executor account",
        slug_field="username",
        many=True,
        required=False,
        queryset=get_user_model().objects.all(),
        help_text="usernames of the executor accounts that serve it (shown to staff only); written whole",
    )

    class Meta:
        model = ServiceEnvironment
        fields = [
            "id",
            "name",
            "state",
            "executor",
            "stop_grace_seconds",
            "lease_seconds",
            "start_deadline_seconds",
            "capacity_limits",
            "executor_accounts",
        ]

    @property
    def _readable_fields(self):
        request = self.context.get("request")
        staff = request is not None and request.user.is_staff
        for field in super()._readable_fields:
            # Who runs an environment's jobs is for staff to know: others neither read it nor pay its query.
            if staff or field.field_name != "executor_accounts":
                yield field


class JobQueueSerializer(StrictModelSerializer):
    service_environment = NameField(
        "service environment",
        queryset=ServiceEnvironment.objects.all(),
        validators=[
            UniqueValidator(
                queryset=JobQueue.objects.all(),
                message="this service environment already serves another job queue",
            )
        ],
    )

    class Meta:
        model = JobQueue
        fields = [
            "id",
            "name",
            "priority",
            "state",
            "service_environment",
            "ordering",
            "idle_capacity_assignment",
            "preemption_min_runtime_seconds",
            "relocation_min_runtime_seconds",
        ]


class BudgetSerializer(StrictSerializer):
    gpu_hours = serializers.DecimalField(
        max_digits=12,
        decimal_places=3,
        min_value=Decimal("0.001"),
        max_value=MAX_BUDGET_GPU_HOURS,
        help_text="GPU-hours the share may spend on on-demand capacity per period (> 0)",
    )
    period = serializers.ChoiceField(
        choices=BudgetPeriod.choices,
        default=BudgetPeriod.MONTH,
        help_text="calendar period in UTC: DAY, WEEK (from Monday) or MONTH (default)",
    )
    scope = serializers.ChoiceField(
        choices=BudgetScope.choices,
        default=BudgetScope.ALL,
        help_text="ALL (default): once spent, the share starts no new job; BORROWED: only what it holds "
        "above its limit counts, and once spent it borrows no more",
    )


class QuotaShareListSerializer(serializers.ListSerializer):
    """Reads every listed share's budget at once (3 queries), not one share at a time."""

    def to_representation(self, data):
        shares = list(data.all() if isinstance(data, models.manager.BaseManager) else data)
        self.child.context["budgets"] = share_budgets(shares=shares, now=timezone.now())
        return super().to_representation(shares)


class QuotaShareSerializer(StrictModelSerializer):
    job_queue = NameField("job queue", queryset=JobQueue.objects.all())
    team = NameField("team", slug_field="slug", queryset=Team.objects.all())
    capacity_limits = ShareCapacityLimitSerializer(
        many=True,
        help_text="1 to 5 limits, one per instance type, max_capacity >= 1, optional lending_limit; written whole",
    )
    budget = BudgetSerializer(
        required=False,
        allow_null=True,
        help_text="GPU-hour budget per calendar period; null or absent: none. A PATCH changes the keys given",
    )
    budget_used_gpu_hours = serializers.SerializerMethodField(
        help_text="GPU-hours counted against the budget in the current period (null without a budget)"
    )
    budget_resets_at = serializers.SerializerMethodField(
        help_text="when the current budget period ends (null without a budget)"
    )

    class Meta:
        model = QuotaShare
        fields = [
            "id",
            "name",
            "job_queue",
            "team",
            "capacity_limits",
            "strategy",
            "borrow_limit",
            "in_share_preemption",
            "fair_share_weight",
            "state",
            "budget",
            "budget_used_gpu_hours",
            "budget_resets_at",
        ]
        # Name uniqueness in the queue is one of rules.validate_quota_share's checks, not a second validator.
        validators = []
        list_serializer_class = QuotaShareListSerializer

    def _reading(self, share: QuotaShare):
        budgets = self.context.get("budgets")
        if budgets is None:
            budgets = self.context["budgets"] = share_budgets(shares=[share], now=timezone.now())
        return budgets.get(share.pk)

    @extend_schema_field(serializers.DecimalField(max_digits=20, decimal_places=3, allow_null=True))
    def get_budget_used_gpu_hours(self, share: QuotaShare) -> str | None:
        found = self._reading(share)
        return None if found is None else str(found.used_gpu_hours.quantize(Decimal("0.001")))

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_budget_resets_at(self, share: QuotaShare):
        found = self._reading(share)
        return None if found is None else serializers.DateTimeField().to_representation(found.resets_at)

    def validate(self, attrs):
        """The `budget` object onto the share's budget fields: null removes the budget, an object sets the
        keys it gives (a share without a budget needs gpu_hours)."""
        if "budget" not in attrs:
            return attrs
        budget = attrs.pop("budget")
        if budget is None:
            attrs["budget_gpu_hours"] = None
            return attrs
        has_budget = self.instance is not None and self.instance.budget_gpu_hours is not None
        if "gpu_hours" not in budget and not has_budget:
            raise serializers.ValidationError({"budget": {"gpu_hours": ["This field is required."]}})
        for key in ("gpu_hours", "period", "scope"):
            if key in budget:
                attrs[f"budget_{key}"] = budget[key]
        return attrs


class TrainingPlanSerializer(StrictModelSerializer):
    job_queue = NameField("job queue", queryset=JobQueue.objects.all())
    instance_type = NameField("instance type", queryset=InstanceType.objects.all())
    quota_shares = ShareNamesField(
        required=False, help_text="names of the queue's shares that may draw on it; empty = all of them"
    )
    status = serializers.ChoiceField(choices=TrainingPlan.Status.choices, read_only=True)
    in_use_instance_count = serializers.IntegerField(read_only=True)
    available_instance_count = serializers.SerializerMethodField()

    class Meta:
        model = TrainingPlan
        fields = [
            "id",
            "name",
            "job_queue",
            "instance_type",
            "instance_count",
            "start_time",
            "end_time",
            "quota_shares",
            "status",
            "in_use_instance_count",
            "available_instance_count",
        ]

    @extend_schema_field(OpenApiTypes.INT)
    def get_available_instance_count(self, plan: TrainingPlan) -> int:
        if plan.status != TrainingPlan.Status.ACTIVE:
            return 0
        return max(0, plan.instance_count - plan.in_use_instance_count)

    def validate(self, attrs):
        names = attrs.pop("quota_shares", None)
        if names is not None:
            job_queue = attrs.get("job_queue") or self.instance.job_queue
            shares = QuotaShare.objects.filter(job_queue=job_queue, name__in=names)
            found = {share.name: share for share in shares}
            unknown = ", ".join(name for name in names if name not in found)
            if unknown:
                raise serializers.ValidationError(
                    {"quota_shares": [f"queue {job_queue.name} has no quota share named {unknown}"]}
                )
            attrs["quota_shares"] = [found[name] for name in dict.fromkeys(names)]
        return attrs


# --- jobs ------------------------------------------------------------------------------------------------


class PreferenceSerializer(StrictSerializer):
    instance_type = NameField("instance type", queryset=InstanceType.objects.all())
    instance_count = serializers.IntegerField(min_value=1)
    training_plan = NameField(
        "training plan",
        queryset=TrainingPlan.objects.select_related("instance_type"),
        allow_null=True,
        default=None,
        help_text="draw on this training plan first; null = on-demand capacity",
    )


class EstimatedStartSerializer(serializers.Serializer):
    earliest = serializers.DateTimeField(allow_null=True, help_text="likely start; null: it never starts")
    latest = serializers.DateTimeField(
        allow_null=True, help_text="the start if the jobs ahead run long (their upper quartile)"
    )
    basis = serializers.CharField(help_text="one line: what the start waits for")


class TaskSerializer(serializers.ModelSerializer):
    """One executor's part of an attempt of a job on several hosts (multi-host.md)."""

    executor = serializers.CharField(source="executor_name", read_only=True)

    class Meta:
        model = JobTask
        fields = [
            "rank",
            "instances",
            "executor",
            "address",
            "port",
            "state",
            "claimed_at",
            "started_at",
            "ended_at",
            "exit_code",
            "reason",
            "output_tail",
        ]


class AttemptSerializer(serializers.ModelSerializer):
    instance_type = NameField("instance type", read_only=True)
    training_plan = NameField("training plan", read_only=True)
    tasks = TaskSerializer(
        source="attempt_tasks",
        many=True,
        read_only=True,
        help_text="the executors' tasks, by rank (empty for a job one executor took whole)",
    )

    class Meta:
        model = JobAttempt
        fields = [
            "attempt",
            "instance_type",
            "training_plan",
            "scheduled_at",
            "started_at",
            "stopped_at",
            "status_reason",
            "exit_code",
            "output_tail",
            "tasks",
        ]


class JobSerializer(StrictModelSerializer):
    """A job as behaviour.md#what-there-is lists it; the writable fields are the submission."""

    job_queue = NameField("job queue", queryset=JobQueue.objects.select_related("service_environment"))
    quota_share = ShareNameField(max_length=128, help_text="name of a quota share of job_queue")
    team = NameField("team", slug_field="slug", read_only=True)
    submitted_by = NameField("user", slug_field="username", read_only=True)
    instance_preferences = PreferenceSerializer(
        many=True,
        allow_empty=False,
        max_length=MAX_PREFERENCES,
        help_text=f"1 to {MAX_PREFERENCES} entries, tried in order",
    )
    payload = JsonObjectField(required=False, help_text="a JSON object of at most 64 KiB, for the executor")
    retry_rules = RetryRulesField(
        required=False,
        default=list,
        help_text='up to 5 rules {"action": "RETRY" | "EXIT", "on_status_reason", "on_reason", '
        '"on_exit_code"}, each condition exact or a prefix ending in *: on a failed attempt the first rule '
        "whose given conditions all match decides; none matching retries while attempts are left",
    )
    selected_instance_type = NameField("instance type", read_only=True)
    selected_training_plan = NameField("training plan", read_only=True)
    status_reason = serializers.CharField(
        source="current_reason",
        read_only=True,
        help_text="RUNNABLE: why the last scheduling pass left it waiting; otherwise why it reached its status",
    )
    queue_position = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="RUNNABLE: its place in its share's queue at the last pass (1 = next); otherwise null",
    )
    estimated_start = EstimatedStartSerializer(
        read_only=True,
        allow_null=True,
        help_text="RUNNABLE: when it is likely to start if no other job arrives; otherwise null",
    )
    attempts = AttemptSerializer(many=True, read_only=True)

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "job_queue",
            "quota_share",
            "team",
            "submitted_by",
            "scheduling_priority",
            "instance_preferences",
            "retry_attempts",
            "retry_rules",
            "preemption_retries_before_termination",
            "max_pending_seconds",
            "duration_seconds",
            "attempt_duration_seconds",
            "relocate",
            "payload",
            "client_token",
            "submitted_via",
            "status",
            "status_reason",
            "selected_instance_type",
            "selected_instance_count",
            "selected_training_plan",
            "borrowed_instances",
            "queue_position",
            "estimated_start",
            "preemption_count",
            "attempt",
            "stop_deadline",
            "attempts",
            "created_at",
            "scheduled_at",
            "started_at",
            "stopped_at",
        ]
        read_only_fields = [
            "submitted_via",
            "status",
            "status_reason",
            "selected_instance_count",
            "borrowed_instances",
            "queue_position",
            "preemption_count",
            "attempt",
            "stop_deadline",
            "created_at",
            "scheduled_at",
            "started_at",
            "stopped_at",
        ]
        # client_token's uniqueness is job_submit's business: a repeat returns the first job, it is no error.
        validators = []

    def to_representation(self, job: Job) -> dict:
        body = super().to_representation(job)
        # The names it was submitted under, which outlive a deleted queue or share.
        body["job_queue"], body["quota_share"] = job.job_queue_name, job.quota_share_name
        return body

    def validate(self, attrs):
        job_queue, name = attrs["job_queue"], attrs["quota_share"]
        share = QuotaShare.objects.select_related("team").filter(job_queue=job_queue, name=name).first()
        if share is None:
            raise serializers.ValidationError(
                {"quota_share": [f"queue {job_queue.name} has no quota share named {name}"]}
            )
        attrs["quota_share"] = share
        return attrs

    def to_submission(self) -> job_services.JobSubmission:
        data = dict(self.validated_data)
        entries = [
            rules.PreferenceInput(entry["instance_type"], entry["instance_count"], entry["training_plan"])
            for entry in data.pop("instance_preferences")
        ]
        return job_services.JobSubmission(instance_preferences=entries, **data)


class JobPriorityUpdateSerializer(serializers.Serializer):
    """PATCH /jobs/{id}/ changes scheduling_priority and nothing else."""

    scheduling_priority = serializers.IntegerField(min_value=0, max_value=9999)

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            others = sorted(set(data) - {"scheduling_priority"})
            if others:
                raise serializers.ValidationError(
                    {name: ["only scheduling_priority can be changed on a submitted job"] for name in others}
                )
        return super().to_internal_value(data)


class JobCancelSerializer(StrictSerializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=500)


class JobReportSerializer(StrictSerializer):
    executor = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        max_length=128,
        help_text="the reporting executor's name, as it polls: a report about a task names whose task it is "
        "(a rank given up and claimed again by another executor is then never touched by the first)",
    )
    task = serializers.IntegerField(
        required=False,
        default=0,
        min_value=0,
        max_value=MAX_STORED_INT,
        help_text="the task (rank) this report is about, for a job run as tasks; 0 (the default) otherwise",
    )
    attempt = serializers.IntegerField(
        min_value=1,
        max_value=MAX_STORED_INT,
        required=False,
        allow_null=True,
        default=None,
        help_text="the attempt this report is about (from the work endpoint); a stale one is refused with 409. "
        "Omitted: the job's current attempt (executors written before attempts were numbered)",
    )
    status = serializers.ChoiceField(
        choices=[str(status) for status in executor_services.REPORTABLE_STATUSES],
        help_text="STOPPED: the job stopped as asked (it becomes RUNNABLE, CANCELLED or FAILED, as decided "
        "when it was asked to stop)",
    )
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)
    exit_code = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        min_value=MIN_STORED_INT,
        max_value=MAX_STORED_INT,
        help_text="the process's exit status (negative: the signal that ended it)",
    )
    output_tail = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=65536,
        trim_whitespace=False,
        help_text=f"the last lines of the job's output; the last {executor_services.OUTPUT_TAIL_CHARS} "
        "characters are kept",
    )


class WorkStartSerializer(serializers.Serializer):
    """A job for the executor to start: it is taken (claimed) by this answer."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    attempt = serializers.IntegerField(help_text="name it in every report about this run")
    instance_type = serializers.CharField()
    instance_count = serializers.IntegerField()
    training_plan = serializers.CharField(allow_null=True)
    payload = JsonObjectField(
        help_text="the job's payload as submitted (for the reference agent: command, env)"
    )
    stop_grace_seconds = serializers.IntegerField(help_text="how long a stop may take, SIGTERM to SIGKILL")
    lease_seconds = serializers.IntegerField(help_text="report at least this often, or the job is lost")
    gpus_per_instance = serializers.IntegerField(help_text="the instance type's gpu_count")


class WorkStopSerializer(serializers.Serializer):
    """A job to stop: SIGTERM now, SIGKILL at `deadline`, then report STOPPED."""

    id = serializers.IntegerField()
    attempt = serializers.IntegerField()
    deadline = serializers.DateTimeField()


class WorkSerializer(serializers.Serializer):
    start = WorkStartSerializer(many=True)
    stop = WorkStopSerializer(many=True)


class RosterTaskSerializer(serializers.Serializer):
    rank = serializers.IntegerField()
    address = serializers.CharField()
    instances = serializers.IntegerField()
    executor = serializers.CharField()


class RosterSerializer(serializers.Serializer):
    """Who runs the attempt: every rank's address, and rank 0's address and the job's main port."""

    main_address = serializers.CharField()
    main_port = serializers.IntegerField()
    world_size = serializers.IntegerField(help_text="how many tasks (ranks) the attempt has")
    tasks = RosterTaskSerializer(many=True)


class GangStartSerializer(WorkStartSerializer):
    """A task claimed for the executor: hold `task_instances` slots, start nothing until the roster comes."""

    task = serializers.IntegerField(help_text="the task's rank; name it in every report (`task`)")
    task_instances = serializers.IntegerField(help_text="instances of the job this task holds")
    start_deadline = serializers.DateTimeField(help_text="all tasks must run by then, or the job is put back")
    roster = RosterSerializer(allow_null=True, help_text="null while other instances are still unclaimed")


class GangGoSerializer(serializers.Serializer):
    """A claimed task whose roster is out: start it now (repeated until it reports RUNNING)."""

    id = serializers.IntegerField()
    attempt = serializers.IntegerField()
    task = serializers.IntegerField()
    roster = RosterSerializer()


class GangStopSerializer(WorkStopSerializer):
    task = serializers.IntegerField(help_text="the task (rank) to stop; 0 for a job taken whole")


class GangWorkSerializer(serializers.Serializer):
    start = GangStartSerializer(many=True)
    go = GangGoSerializer(many=True)
    stop = GangStopSerializer(many=True)


class OfferSerializer(StrictSerializer):
    executor = serializers.CharField(max_length=128, help_text="the executor's name, as it polls")
    free_slots = serializers.IntegerField(min_value=0, max_value=MAX_STORED_INT)


class WorkQuerySerializer(serializers.Serializer):
    instance_type = serializers.CharField(required=False, max_length=64, help_text="only work of this type")
    wait = serializers.IntegerField(
        required=False,
        default=0,
        min_value=0,
        max_value=30,
        help_text="seconds to hold the request until there is work (0: answer at once)",
    )
    executor = serializers.CharField(
        required=False,
        max_length=128,
        default="",
        help_text="the executor's name, for the environment's Executors list (default: the account's name)",
    )
    host = serializers.CharField(required=False, max_length=255, default="", allow_blank=True)
    free_slots = serializers.IntegerField(
        required=False,
        default=None,
        min_value=0,
        max_value=MAX_STORED_INT,
        help_text=(
            "instances the executor can start now: only jobs that fit are handed out, in order, a job too "
            "large skipped for smaller ones after it (default: no limit)"
        ),
    )

    gang = serializers.BooleanField(
        required=False,
        default=False,
        help_text="the executor takes tasks: it may claim part of a job of several instances (several hosts), and "
        "starts a task only once its roster is out (`go`); needs free_slots",
    )
    slots = serializers.IntegerField(
        required=False,
        default=None,
        min_value=0,
        max_value=MAX_STORED_INT,
        help_text="all the instances the executor has (to tell when a job is larger than the fleet can hold)",
    )
    address = serializers.CharField(
        required=False,
        max_length=255,
        default="",
        allow_blank=True,
        help_text="where the executor's tasks' peers reach it (default: the address the request came from)",
    )
    ports = serializers.CharField(
        required=False,
        max_length=32,
        default="",
        allow_blank=True,
        help_text="FIRST-LAST: the range a job's main port is chosen from when its rank 0 runs here",
    )

    def validate_ports(self, text: str) -> str:
        if not text:
            return text
        try:
            low, high = parse_ports(text)
        except ValueError as error:
            raise serializers.ValidationError(str(error)) from None
        return f"{low}-{high}"

    def validate(self, data):
        if data.get("gang") and data.get("free_slots") is None:
            raise serializers.ValidationError(
                {"free_slots": ["an executor that takes tasks says its free_slots"]}
            )
        return data

    def validate_instance_type(self, name: str) -> str:
        # A misspelt type would otherwise answer "no work" for ever.
        if not InstanceType.objects.filter(name=name).exists():
            raise serializers.ValidationError(f"unknown instance type {name}")
        return name


class JobSummarySerializer(serializers.ModelSerializer):
    """A job named inside another object: no payload, whoever reads it; no name unless the reader sees it.

    The reader is the context's `viewer` (`scheduling.selectors.visibility.Viewer`); without one, all of it.
    """

    name = serializers.CharField(read_only=True, allow_null=True, help_text="null for another team's job")
    team = NameField("team", slug_field="slug", read_only=True)

    def to_representation(self, job: Job) -> dict:
        body = super().to_representation(job)
        viewer = self.context.get("viewer")
        if viewer is not None and not viewer.sees_team(job.team_id):
            body["name"] = None
        return body

    class Meta:
        model = Job
        fields = ["id", "name", "team", "status"]


# --- events ----------------------------------------------------------------------------------------------


class EventSerializer(serializers.ModelSerializer):
    job_queue = NameField("job queue", read_only=True)
    job = JobSummarySerializer(read_only=True, allow_null=True)
    quota_share = NameField("quota share", read_only=True)
    other_job = JobSummarySerializer(
        read_only=True, allow_null=True, help_text="the other job of a preemption: the preemptor"
    )
    other_share = NameField("quota share", read_only=True)
    instance_type = NameField("instance type", read_only=True)
    actor = NameField("user", slug_field="username", read_only=True)
    data = JsonObjectField(read_only=True, help_text="for CONFIG_CHANGED: object, id, action, before, after")
    message = serializers.CharField(
        read_only=True, help_text="about another team's job: a summary naming no job, user or reason"
    )

    def to_representation(self, event: Event) -> dict:
        body = super().to_representation(event)
        # A deleted share leaves its name on its jobs.
        if body["quota_share"] is None and event.job is not None:
            body["quota_share"] = event.job.quota_share_name
        viewer = self.context.get("viewer")
        if viewer is not None:
            body["message"] = event_text(
                viewer,
                team_id=event.team_id,
                kind=event.kind,
                message=event.message,
                share_name=body["quota_share"],
                other_share_name=body["other_share"],
                instances=event.instances,
                instance_type=body["instance_type"],
            )
            if event.team_id is not None and not viewer.sees_team(event.team_id):
                body["data"] = {}  # a job's priority change names its values: its team's business
        return body

    class Meta:
        model = Event
        fields = [
            "id",
            "kind",
            "job_queue",
            "job",
            "quota_share",
            "other_job",
            "other_share",
            "instance_type",
            "instances",
            "actor",
            "message",
            "data",
            "created_at",
        ]


# --- the queue's scheduling endpoints --------------------------------------------------------------------


class ScheduleResultSerializer(serializers.Serializer):
    admitted = serializers.ListField(child=serializers.IntegerField(), help_text="ids of the jobs placed")
    preempted = serializers.ListField(child=serializers.IntegerField(), help_text="ids of the jobs preempted")
    duration_ms = serializers.FloatField()


class SnapshotJobSerializer(serializers.ModelSerializer):
    """A RUNNABLE job in the queue's order; another team's job shows neither its name nor its reason.

    The reader is the context's `viewer`, as in `JobSummarySerializer`; without one, all of it.
    """

    name = serializers.CharField(read_only=True, allow_null=True, help_text="null for another team's job")
    quota_share = NameField("quota share", read_only=True)
    team = NameField("team", slug_field="slug", read_only=True)
    status_reason = serializers.CharField(
        source="current_reason", read_only=True, allow_null=True, help_text="null for another team's job"
    )
    queue_position = serializers.IntegerField(read_only=True, allow_null=True)
    estimated_start = EstimatedStartSerializer(read_only=True, allow_null=True)

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "quota_share",
            "team",
            "scheduling_priority",
            "queue_position",
            "status_reason",
            "estimated_start",
            "created_at",
        ]

    def to_representation(self, job: Job) -> dict:
        body = super().to_representation(job)
        viewer = self.context.get("viewer")
        if viewer is not None and not viewer.sees_team(job.team_id):
            body["name"] = body["status_reason"] = None
        return body


class ShareTypeUsageSerializer(serializers.Serializer):
    instance_type = serializers.CharField()
    limit = serializers.IntegerField()
    usage = serializers.IntegerField(help_text="instances held on on-demand capacity (plans not counted)")
    borrowed = serializers.IntegerField(help_text="max(0, usage - limit)")
    lent = serializers.IntegerField(help_text="idle instances of this share that borrowers use")
    idle = serializers.IntegerField()


class LoanSerializer(serializers.Serializer):
    share = serializers.CharField(help_text="the lender (in borrows_from) or the borrower (in lends_to)")
    instance_type = serializers.CharField()
    instances = serializers.IntegerField()


class ShareUsageSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    team = serializers.CharField(help_text="team slug")
    strategy = serializers.ChoiceField(choices=QuotaShare.Strategy.choices)
    state = serializers.ChoiceField(choices=State.choices)
    borrow_limit = serializers.IntegerField()
    in_share_preemption = serializers.BooleanField()
    pending = serializers.IntegerField(help_text="RUNNABLE jobs")
    limit = serializers.IntegerField()
    usage = serializers.IntegerField()
    borrowed = serializers.IntegerField()
    lent = serializers.IntegerField()
    instance_types = ShareTypeUsageSerializer(many=True)
    borrows_from = LoanSerializer(many=True)
    lends_to = LoanSerializer(many=True)


class TypeUsageSerializer(serializers.Serializer):
    instance_type = serializers.CharField()
    capacity = serializers.IntegerField(help_text="the environment's on-demand max_capacity")
    owned = serializers.IntegerField(help_text="in use within the users' own limits")
    borrowed = serializers.IntegerField(help_text="in use above limits")
    idle = serializers.IntegerField(help_text="owned by a share but neither in use nor lent")
    free = serializers.IntegerField(help_text="neither owned nor in use")


class PlanUsageSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    instance_type = serializers.CharField()
    instance_count = serializers.IntegerField()
    start_time = serializers.DateTimeField()
    end_time = serializers.DateTimeField()
    status = serializers.ChoiceField(choices=TrainingPlan.Status.choices)
    in_use_instance_count = serializers.IntegerField()
    available_instance_count = serializers.IntegerField()


class QueueSnapshotSerializer(serializers.Serializer):
    job_queue = serializers.CharField()
    state = serializers.ChoiceField(choices=State.choices)
    taken_at = serializers.DateTimeField()
    idle_capacity_assignment = serializers.ChoiceField(
        choices=IdleCapacityAssignment.choices,
        help_text="FAIR_SHARE: among over-limit heads, the lowest dominant borrowed share per weight first",
    )
    runnable_count = serializers.IntegerField(help_text="RUNNABLE jobs of the queue's enabled shares")
    jobs = SnapshotJobSerializer(
        many=True, help_text="up to 100 RUNNABLE jobs, in scheduling order (FAIR_SHARE order included)"
    )
    shares = ShareUsageSerializer(many=True)
    instance_types = TypeUsageSerializer(many=True)
    plans = PlanUsageSerializer(many=True)


# --- errors ----------------------------------------------------------------------------------------------


class ErrorSerializer(serializers.Serializer):
    """Every error but a 400: what went wrong, in words."""

    detail = serializers.CharField()
