"""The administration's forms: queues, environments, quota shares (with a limit per instance type),
training plans. Field-level checks only: the configuration services validate with `scheduling.rules`."""

from __future__ import annotations

from django import forms
from django.forms.models import fields_for_model

from portal.forms.fields import DateTimeInput, IdChoiceField
from portal.params import MAX_STORED_INT, int_param
from scheduling import rules
from scheduling.models import InstanceType, JobQueue, QuotaShare, ServiceEnvironment, TrainingPlan


class LimitFieldsMixin:
    """One optional number field per instance type (`limit_<id>`): blank means no limit/capacity for it."""

    limit_prefix = "limit_"
    limit_minimum = 1
    error_groups = ("capacity_limits",)

    @property
    def group_errors(self) -> dict[str, list[str]]:
        if not hasattr(self, "_group_errors"):
            self._group_errors = {}
        return self._group_errors

    def add_limit_fields(self, types: list[InstanceType], current: dict[int, int]) -> None:
        self.instance_types = types
        for type_ in types:
            self.fields[f"{self.limit_prefix}{type_.pk}"] = forms.IntegerField(
                label=type_.name,
                required=False,
                min_value=self.limit_minimum,
                max_value=MAX_STORED_INT,
                initial=current.get(type_.pk),
            )

    def limit_bound_fields(self):
        return [self[f"{self.limit_prefix}{type_.pk}"] for type_ in self.instance_types]

    def limit_inputs(self) -> list[rules.LimitInput]:
        return [
            rules.LimitInput(type_, self.cleaned_data[f"{self.limit_prefix}{type_.pk}"])
            for type_ in self.instance_types
            if self.cleaned_data.get(f"{self.limit_prefix}{type_.pk}") is not None
        ]

    def proposed_limits(self) -> dict[int, int]:
        """type id -> the number typed so far, read leniently from the raw data (for the live sums)."""
        proposed = {}
        for type_ in self.instance_types:
            raw = (self.data.get(self.add_prefix(f"{self.limit_prefix}{type_.pk}")) or "").strip()
            value = int_param(raw, maximum=MAX_STORED_INT)
            if value is not None:
                proposed[type_.pk] = value
        return proposed


class QuotaShareForm(LimitFieldsMixin, forms.Form):
    """A share's fields and its capacity limits, one per instance type."""

    def __init__(self, *args, share: QuotaShare | None = None, **kwargs):
        current = {}
        if share is not None:
            kwargs.setdefault("initial", {}).update(
                {
                    "name": share.name,
                    "job_queue": share.job_queue_id,
                    "team": share.team_id,
                    "strategy": share.strategy,
                    "borrow_limit": share.borrow_limit,
                    "in_share_preemption": share.in_share_preemption,
                    "state": share.state,
                }
            )
            current = {limit.instance_type_id: limit.max_capacity for limit in share.capacity_limits.all()}
        super().__init__(*args, **kwargs)
        self.share = share
        self.fields.update(
            fields_for_model(
                QuotaShare,
                fields=[
                    "name",
                    "job_queue",
                    "team",
                    "strategy",
                    "borrow_limit",
                    "in_share_preemption",
                    "state",
                ],
                field_classes={"job_queue": IdChoiceField, "team": IdChoiceField},
            )
        )
        if share is not None:
            self.fields["job_queue"].disabled = True
            self.fields["job_queue"].help_text = "A share stays in its queue."
        self.add_limit_fields(list(InstanceType.objects.order_by("name")), current)

    def job_queue(self) -> JobQueue | None:
        if self.share is not None:
            return self.share.job_queue
        raw = self.data.get("job_queue") or self.initial.get("job_queue")
        pk = raw if isinstance(raw, int) else int_param(raw, minimum=1)
        return JobQueue.objects.filter(pk=pk).first() if pk is not None else None

    def share_fields(self) -> dict:
        names = ["name", "team", "strategy", "borrow_limit", "in_share_preemption", "state"]
        if self.share is None:
            names.append("job_queue")
        return {name: self.cleaned_data[name] for name in names}


class ServiceEnvironmentForm(LimitFieldsMixin, forms.Form):
    """An environment's fields and its on-demand capacity per instance type (blank: none of that type)."""

    limit_prefix = "capacity_"
    limit_minimum = 0

    environment_field_names = ("name", "state", "executor", "stop_grace_seconds", "lease_seconds")

    def __init__(self, *args, environment: ServiceEnvironment | None = None, **kwargs):
        current = {}
        if environment is not None:
            kwargs.setdefault("initial", {}).update(
                {name: getattr(environment, name) for name in self.environment_field_names}
            )
            current = {
                limit.instance_type_id: limit.max_capacity for limit in environment.capacity_limits.all()
            }
        super().__init__(*args, **kwargs)
        self.fields.update(fields_for_model(ServiceEnvironment, fields=list(self.environment_field_names)))
        for name in ("stop_grace_seconds", "lease_seconds"):  # blank: keep the current value or the default
            self.fields[name].required = False
        self.add_limit_fields(list(InstanceType.objects.order_by("name")), current)

    def environment_fields(self) -> dict:
        fields = {name: self.cleaned_data[name] for name in self.environment_field_names}
        return {name: value for name, value in fields.items() if value is not None}


class JobQueueForm(forms.Form):
    def __init__(self, *args, job_queue: JobQueue | None = None, **kwargs):
        if job_queue is not None:
            kwargs.setdefault("initial", {}).update(
                {
                    "name": job_queue.name,
                    "priority": job_queue.priority,
                    "state": job_queue.state,
                    "service_environment": job_queue.service_environment_id,
                    "ordering": job_queue.ordering,
                }
            )
        super().__init__(*args, **kwargs)
        self.fields.update(
            fields_for_model(
                JobQueue,
                fields=["name", "priority", "state", "service_environment", "ordering"],
                field_classes={"service_environment": IdChoiceField},
            )
        )
        # An environment serves one queue: offer the free ones, and this queue's own.
        free = ServiceEnvironment.objects.filter(job_queue__isnull=True)
        if job_queue is not None:
            free = free | ServiceEnvironment.objects.filter(pk=job_queue.service_environment_id)
        self.fields["service_environment"].queryset = free.order_by("name")


class TrainingPlanForm(forms.Form):
    def __init__(self, *args, plan: TrainingPlan | None = None, **kwargs):
        if plan is not None:
            kwargs.setdefault("initial", {}).update(
                {
                    "name": plan.name,
                    "job_queue": plan.job_queue_id,
                    "instance_type": plan.instance_type_id,
                    "instance_count": plan.instance_count,
                    "start_time": plan.start_time,
                    "end_time": plan.end_time,
                    "quota_shares": list(plan.quota_shares.values_list("pk", flat=True)),
                }
            )
        super().__init__(*args, **kwargs)
        self.fields.update(
            fields_for_model(
                TrainingPlan,
                fields=[
                    "name",
                    "job_queue",
                    "instance_type",
                    "instance_count",
                    "start_time",
                    "end_time",
                    "quota_shares",
                ],
                field_classes={"job_queue": IdChoiceField, "instance_type": IdChoiceField},
            )
        )
        for name in ("start_time", "end_time"):
            self.fields[name] = forms.DateTimeField(widget=DateTimeInput(), help_text="UTC")
        self.fields["quota_shares"].queryset = QuotaShare.objects.select_related("job_queue").order_by(
            "job_queue__name", "name"
        )
        self.fields["quota_shares"].required = False

    def plan_fields(self) -> dict:
        return {
            name: self.cleaned_data[name]
            for name in ("name", "job_queue", "instance_type", "instance_count", "start_time", "end_time")
        }
