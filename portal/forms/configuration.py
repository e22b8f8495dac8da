"""The administration's forms: queues, environments, quota shares (with a limit per instance type),
training plans. Field-level checks only: the configuration services validate with `scheduling.rules`."""

from __future__ import annotations

import re

from django import forms
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.forms.models import fields_for_model

from portal.forms.fields import DateTimeInput, IdChoiceField
from portal.params import MAX_STORED_INT, int_param
from scheduling import rules
from scheduling.models import (
    LENDING_LIMIT_HELP,
    OPTIONAL_SETTINGS,
    EnvironmentCapacity,
    InstanceType,
    JobQueue,
    QuotaShare,
    ServiceEnvironment,
    TrainingPlan,
)

_LENDING_LIMIT_KEY = re.compile(r"^capacity_limits\[(\d+)\]\.lending_limit$")


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


def _share_types(share: QuotaShare | None, current: dict[int, int]) -> list[InstanceType]:
    """The instance types a share's form offers a limit for. A share stays in its queue, so an existing share is
    offered only what its queue can run (its environment's types and its plans') and what it already has a limit
    on; a new share, whose queue is picked in the same form, is offered every type."""
    types = InstanceType.objects.order_by("name")
    if share is None:
        return list(types)
    environment_types = EnvironmentCapacity.objects.filter(
        service_environment__job_queue=share.job_queue_id
    ).values("instance_type_id")
    plan_types = TrainingPlan.objects.filter(job_queue_id=share.job_queue_id).values("instance_type_id")
    # One statement: the two lists are subqueries.
    return list(types.filter(Q(pk__in=list(current)) | Q(pk__in=environment_types) | Q(pk__in=plan_types)))


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
                    # -1 (unlimited) means nothing to a share that cannot borrow: its field stays blank.
                    "borrow_limit": share.borrow_limit
                    if share.strategy == QuotaShare.Strategy.LEND_AND_BORROW
                    else None,
                    "in_share_preemption": share.in_share_preemption,
                    "fair_share_weight": share.fair_share_weight,
                    "state": share.state,
                    "budget_gpu_hours": share.budget_gpu_hours,
                    "budget_period": share.budget_period,
                    "budget_scope": share.budget_scope,
                }
            )
            limits = list(share.capacity_limits.all())
            current = {limit.instance_type_id: limit.max_capacity for limit in limits}
            lending = {limit.instance_type_id: limit.lending_limit for limit in limits}
        else:
            lending = {}
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
                    "fair_share_weight",
                    "state",
                    "budget_gpu_hours",
                    "budget_period",
                    "budget_scope",
                ],
                field_classes={"job_queue": IdChoiceField, "team": IdChoiceField},
            )
        )
        self.fields["fair_share_weight"].required = False
        self.fields["borrow_limit"].required = False
        self.fields[
            "borrow_limit"
        ].help_text = (
            "LEND_AND_BORROW only: how much it may borrow, in percent of its limit; blank or -1: unlimited."
        )
        self.fields["budget_gpu_hours"].label = "Budget (GPU-hours)"
        for name in ("budget_period", "budget_scope"):  # blank keeps the saved value (or the default)
            self.fields[name].required = False
        self.fields["budget_period"].label = "Budget period"
        self.fields["budget_period"].help_text = "A UTC calendar day, week (from Monday) or month."
        self.fields["budget_scope"].label = "Budget counts"
        self.fields["budget_scope"].help_text = (
            "ALL: every GPU-hour on on-demand capacity; once spent, the share starts no new job. BORROWED: "
            "only what it holds above its limit; once spent, it borrows no more. Running jobs are never stopped."
        )
        if share is not None:
            self.fields["job_queue"].disabled = True
            self.fields["job_queue"].help_text = "A share stays in its queue."
        self.add_limit_fields(_share_types(share, current), current)
        for type_ in self.instance_types:
            self.fields[f"lending_{type_.pk}"] = forms.IntegerField(
                label=f"{type_.name} lending limit",
                required=False,
                min_value=0,
                max_value=MAX_STORED_INT,
                initial=lending.get(type_.pk),
                help_text=LENDING_LIMIT_HELP,
            )

    def limit_rows(self):
        """Per instance type: its limit field and its lending limit field, shown side by side."""
        return [(self[f"limit_{t.pk}"], self[f"lending_{t.pk}"]) for t in self.instance_types]

    def limit_inputs(self) -> list[rules.LimitInput]:
        return [
            rules.LimitInput(
                type_, self.cleaned_data[f"limit_{type_.pk}"], self.cleaned_data.get(f"lending_{type_.pk}")
            )
            for type_ in self.instance_types
            if self.cleaned_data.get(f"limit_{type_.pk}") is not None
        ]

    def proposed_lending_limits(self) -> dict[int, int]:
        """type id -> the lending limit typed so far, read leniently (for the live check)."""
        proposed = {}
        for type_ in self.instance_types:
            raw = (self.data.get(self.add_prefix(f"lending_{type_.pk}")) or "").strip()
            value = int_param(raw, minimum=-MAX_STORED_INT, maximum=MAX_STORED_INT)
            if value is not None:
                proposed[type_.pk] = value
        return proposed

    def field_for_error(self, key: str) -> str:
        """`capacity_limits[i].lending_limit` (the i-th limit given) is the lending field of that type."""
        match = _LENDING_LIMIT_KEY.match(key)
        if match is None or not self.is_bound or not hasattr(self, "cleaned_data"):
            return key
        given = [t for t in self.instance_types if self.cleaned_data.get(f"limit_{t.pk}") is not None]
        index = int(match.group(1))
        return f"lending_{given[index].pk}" if index < len(given) else key

    def job_queue(self) -> JobQueue | None:
        if self.share is not None:
            return self.share.job_queue
        raw = self.data.get("job_queue") or self.initial.get("job_queue")
        pk = raw if isinstance(raw, int) else int_param(raw, minimum=1)
        return JobQueue.objects.filter(pk=pk).first() if pk is not None else None

    def clean_borrow_limit(self):
        value = self.cleaned_data.get("borrow_limit")
        return -1 if value is None else value

    def share_fields(self) -> dict:
        names = [
            "name",
            "team",
            "strategy",
            "borrow_limit",
            "in_share_preemption",
            "fair_share_weight",
            "state",
            "budget_gpu_hours",
            "budget_period",
            "budget_scope",
        ]
        if self.share is None:
            names.append("job_queue")
        return without_blank_settings({name: self.cleaned_data[name] for name in names})


class ServiceEnvironmentForm(LimitFieldsMixin, forms.Form):
    """An environment's fields and its on-demand capacity per instance type (blank: none of that type)."""

    limit_prefix = "capacity_"
    limit_minimum = 0

    environment_field_names = (
        "name",
        "state",
        "executor",
        "stop_grace_seconds",
        "lease_seconds",
        "start_deadline_seconds",
    )

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
        # blank: keep the current value or the default
        for name in ("stop_grace_seconds", "lease_seconds", "start_deadline_seconds"):
            self.fields[name].required = False
        # Executor accounts: holders of report_job_status, and whoever serves it now (so a link can be removed).
        User = get_user_model()
        holders = Q(user_permissions__codename="report_job_status") | Q(
            groups__permissions__codename="report_job_status"
        )
        serving = Q(served_environments=environment) if environment is not None else Q(pk__in=[])
        self.fields["executor_accounts"] = forms.ModelMultipleChoiceField(
            queryset=User.objects.filter(holders | serving).distinct().order_by("username"),
            required=False,
            label="Executor accounts",
            help_text="Accounts that may take this environment's work and report on its jobs (staff always may).",
            initial=list(environment.executor_accounts.all()) if environment is not None else [],
        )
        self.add_limit_fields(list(InstanceType.objects.order_by("name")), current)
        self.saved_capacity = current

    def capacity_by_type(self) -> dict[str, int]:
        """The saved environment's capacity, type name -> instances (what its executors are compared with)."""
        return {t.name: self.saved_capacity[t.pk] for t in self.instance_types if t.pk in self.saved_capacity}

    def executor_accounts(self) -> list:
        return list(self.cleaned_data["executor_accounts"])

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
                    "idle_capacity_assignment": job_queue.idle_capacity_assignment,
                    "preemption_min_runtime_seconds": job_queue.preemption_min_runtime_seconds,
                    "relocation_min_runtime_seconds": job_queue.relocation_min_runtime_seconds,
                }
            )
        super().__init__(*args, **kwargs)
        self.fields.update(
            fields_for_model(
                JobQueue,
                fields=[
                    "name",
                    "priority",
                    "state",
                    "service_environment",
                    "ordering",
                    "idle_capacity_assignment",
                    "preemption_min_runtime_seconds",
                    "relocation_min_runtime_seconds",
                ],
                field_classes={"service_environment": IdChoiceField},
            )
        )
        for name in OPTIONAL_SETTINGS:
            if name in self.fields:
                self.fields[name].required = False
        # An environment serves one queue: offer the free ones, and this queue's own.
        free = ServiceEnvironment.objects.filter(job_queue__isnull=True)
        if job_queue is not None:
            free = free | ServiceEnvironment.objects.filter(pk=job_queue.service_environment_id)
        self.fields["service_environment"].queryset = free.order_by("name")

    def queue_fields(self) -> dict:
        return without_blank_settings(dict(self.cleaned_data))


def without_blank_settings(fields: dict) -> dict:
    """A setting left blank keeps its default (or its saved value): it is not a change."""
    return {
        name: value
        for name, value in fields.items()
        if not (name in OPTIONAL_SETTINGS and value in (None, ""))
    }


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
        # Two queues may each have a share called nlp: the queue's name tells them apart.
        self.fields["quota_shares"].label_from_instance = lambda share: (
            f"{share.job_queue.name} / {share.name}"
        )

    def plan_fields(self) -> dict:
        return {
            name: self.cleaned_data[name]
            for name in ("name", "job_queue", "instance_type", "instance_count", "start_time", "end_time")
        }
