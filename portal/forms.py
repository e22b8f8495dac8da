"""The pages' forms: field-level checks only. Cross-row rules come from `scheduling.rules` (through the
services), whose errors, keyed like `instance_preferences[1].instance_count`, are put back on the field at
fault here."""

from __future__ import annotations

import re
import uuid

from django import forms
from django.core.exceptions import ValidationError
from django.forms.models import fields_for_model

from scheduling import rules
from scheduling.models import (
    MAX_PREFERENCES,
    EventKind,
    InstanceType,
    JobQueue,
    JobStatus,
    QuotaShare,
    ServiceEnvironment,
    State,
    Team,
    TrainingPlan,
    name_validator,
)
from scheduling.services import jobs as job_services

# --- errors from rules and services, back on their fields -------------------------------------------------

_PREFERENCE_KEY = re.compile(r"^instance_preferences(?:\[(\d+)\](?:\.(\w+))?)?$")


def error_dict(exc: ValidationError) -> dict[str, list[str]]:
    if hasattr(exc, "error_dict"):
        return exc.message_dict
    return {"__all__": list(exc.messages)}


def add_errors(form: forms.Form, exc: ValidationError) -> None:
    """Put a rules/services ValidationError on the form's fields. A key naming a group of fields the form
    shows together (`capacity_limits`) goes to `form.group_errors`; any other unknown key is a form error."""
    groups = getattr(form, "error_groups", ())
    for key, messages in error_dict(exc).items():
        if key in groups:
            form.group_errors.setdefault(key, []).extend(messages)
            continue
        for message in messages:
            form.add_error(key if key in form.fields else None, message)


def add_submission_errors(
    form: JobForm, formset: PreferenceFormSet, exc: ValidationError, entry_rows: list[int]
) -> None:
    """Map a submission's errors: `instance_preferences[i].field` -> row `entry_rows[i]` of the formset."""
    for key, messages in error_dict(exc).items():
        match = _PREFERENCE_KEY.match(key)
        if match is None:
            target = key if key in form.fields else None
            for message in messages:
                form.add_error(target, message)
            continue
        index, field_name = match.groups()
        for message in messages:
            if index is None:
                formset.add_non_form_error(message)
                continue
            position = int(index)
            row = formset.forms[entry_rows[position]] if position < len(entry_rows) else None
            if row is None:
                formset.add_non_form_error(message)
            else:
                row.add_error(field_name if field_name in row.fields else None, message)


# --- job submission ---------------------------------------------------------------------------------------


class ShareChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: QuotaShare) -> str:
        return f"{obj.job_queue.name} / {obj.name} ({obj.team.name})"


class PlanChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: TrainingPlan) -> str:
        return f"{obj.name} ({obj.instance_type.name} x{obj.instance_count}, {obj.job_queue.name})"


# The largest value the job's positive integer columns hold on every database (PostgreSQL's integer).
MAX_STORED_INT = 2_147_483_647


class JobForm(forms.Form):
    """A submission's own fields; its preference list is the `PreferenceFormSet` beside it."""

    name = forms.CharField(
        max_length=128, validators=[name_validator], help_text="Letters, digits, hyphens or underscores."
    )
    quota_share = ShareChoiceField(
        queryset=QuotaShare.objects.none(),
        empty_label="choose a quota share",
        help_text="The share (and so the queue) the job draws on.",
    )
    scheduling_priority = forms.IntegerField(
        min_value=0, max_value=9999, initial=0, help_text="0-9999, higher first within the share."
    )
    retry_attempts = forms.IntegerField(
        min_value=1, max_value=10, initial=1, help_text="Attempts in all, the first included."
    )
    preemption_retries_before_termination = forms.IntegerField(
        min_value=0,
        max_value=MAX_STORED_INT,
        required=False,
        help_text="Blank: requeue after every preemption.",
    )
    max_pending_seconds = forms.IntegerField(
        min_value=1,
        max_value=MAX_STORED_INT,
        required=False,
        help_text="Blank: wait as long as it takes.",
    )
    duration_seconds = forms.IntegerField(
        min_value=0,
        max_value=MAX_STORED_INT,
        required=False,
        help_text="What the simulated executor runs; blank: until cancelled.",
    )
    payload = forms.JSONField(
        initial=dict,
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="A JSON object, at most 64 KiB.",
    )
    client_token = forms.CharField(widget=forms.HiddenInput, required=False, max_length=64)

    def __init__(self, *args, user, **kwargs):
        kwargs.setdefault("initial", {}).setdefault("client_token", uuid.uuid4().hex)
        super().__init__(*args, **kwargs)
        shares = QuotaShare.objects.filter(state=State.ENABLED, job_queue__state=State.ENABLED)
        if not user.is_staff:
            shares = shares.filter(team__memberships__user=user)
        self.fields["quota_share"].queryset = shares.select_related("job_queue", "team").order_by(
            "job_queue__name", "name"
        )

    def clean_payload(self):
        payload = self.cleaned_data.get("payload")
        return {} if payload in (None, "") else payload


class PreferenceForm(forms.Form):
    instance_type = forms.ModelChoiceField(
        queryset=InstanceType.objects.order_by("name"), empty_label="instance type"
    )
    instance_count = forms.IntegerField(min_value=1, max_value=MAX_STORED_INT, initial=1)
    training_plan = PlanChoiceField(
        queryset=TrainingPlan.objects.select_related("instance_type", "job_queue").order_by(
            "start_time", "name"
        ),
        required=False,
        empty_label="on-demand",
    )


class BasePreferenceFormSet(forms.BaseFormSet):
    """Every row past the first is optional: a row left blank is ignored, never an error."""

    default_error_messages = {
        "too_few_forms": "Give at least one instance preference.",
        "too_many_forms": f"Give at most {MAX_PREFERENCES} instance preferences.",
    }

    def initial_form_count(self) -> int:
        return 0

    def _construct_form(self, i, **kwargs):
        # Every row offers the same instance types and plans: read them once, not once per row.
        form = super()._construct_form(i, **kwargs)
        if not hasattr(self, "_shared_choices"):
            self._shared_choices = {
                name: list(iter(form.fields[name].choices))  # iter(): no COUNT query
                for name in ("instance_type", "training_plan")
            }
        for name, choices in self._shared_choices.items():
            form.fields[name].choices = choices
        return form

    def total_form_count(self) -> int:
        if self.is_bound:
            return super().total_form_count()
        return max(1, min(len(self.initial or ()), MAX_PREFERENCES))

    def filled_rows(self) -> list[int]:
        """Indexes of the rows that form the preference list, in order (blank rows dropped)."""
        return [i for i, form in enumerate(self.forms) if form.is_valid() and form.cleaned_data]


PreferenceFormSet = forms.formset_factory(
    PreferenceForm,
    formset=BasePreferenceFormSet,
    extra=0,
    min_num=1,
    max_num=MAX_PREFERENCES,
    absolute_max=MAX_PREFERENCES,
    validate_min=True,
    validate_max=True,
)
PREFERENCE_PREFIX = "pref"
_ROW_FIELDS = ("instance_type", "instance_count", "training_plan")


def preference_rows(data) -> list[dict[str, str]]:
    """The preference rows as posted, in order: the raw values of each row's fields."""
    try:
        total = min(int(data.get(f"{PREFERENCE_PREFIX}-TOTAL_FORMS", 1)), MAX_PREFERENCES)
    except ValueError:
        total = 1
    return [
        {name: data.get(f"{PREFERENCE_PREFIX}-{i}-{name}", "") for name in _ROW_FIELDS}
        for i in range(max(total, 0))
    ]


def with_preference_rows(data, rows: list[dict[str, str]]):
    """A copy of the posted data with the preference rows replaced (renumbered) by `rows`."""
    changed = data.copy()
    for key in [k for k in changed if k.startswith(f"{PREFERENCE_PREFIX}-")]:
        del changed[key]
    rows = rows[:MAX_PREFERENCES] or [{"instance_type": "", "instance_count": "1", "training_plan": ""}]
    changed[f"{PREFERENCE_PREFIX}-TOTAL_FORMS"] = str(len(rows))
    changed[f"{PREFERENCE_PREFIX}-INITIAL_FORMS"] = "0"
    changed[f"{PREFERENCE_PREFIX}-MIN_NUM_FORMS"] = "1"
    changed[f"{PREFERENCE_PREFIX}-MAX_NUM_FORMS"] = str(MAX_PREFERENCES)
    for i, row in enumerate(rows):
        for name in _ROW_FIELDS:
            changed[f"{PREFERENCE_PREFIX}-{i}-{name}"] = row.get(name, "")
    return changed


def job_submission(
    form: JobForm, formset: PreferenceFormSet
) -> tuple[job_services.JobSubmission, list[int]] | None:
    """The submission the valid form and formset describe, and the row of each entry; None if invalid."""
    form_ok, formset_ok = form.is_valid(), formset.is_valid()
    if not (form_ok and formset_ok):
        return None
    rows = formset.filled_rows()
    data = form.cleaned_data
    share = data["quota_share"]
    entries = [
        rules.PreferenceInput(
            instance_type=formset.forms[i].cleaned_data["instance_type"],
            instance_count=formset.forms[i].cleaned_data["instance_count"],
            training_plan=formset.forms[i].cleaned_data.get("training_plan"),
        )
        for i in rows
    ]
    submission = job_services.JobSubmission(
        name=data["name"],
        job_queue=share.job_queue,
        quota_share=share,
        instance_preferences=entries,
        scheduling_priority=data["scheduling_priority"],
        retry_attempts=data["retry_attempts"],
        preemption_retries_before_termination=data["preemption_retries_before_termination"],
        max_pending_seconds=data["max_pending_seconds"],
        duration_seconds=data["duration_seconds"],
        payload=data["payload"],
        client_token=data["client_token"] or None,
    )
    return submission, rows


# --- job actions and filters --------------------------------------------------------------------------------


class PriorityForm(forms.Form):
    scheduling_priority = forms.IntegerField(min_value=0, max_value=9999, label="Priority")


class CancelForm(forms.Form):
    reason = forms.CharField(max_length=500, required=False, label="Reason (optional)")


def _optional_choice(queryset, label):
    return forms.ModelChoiceField(queryset=queryset, required=False, empty_label=label)


class JobFilterForm(forms.Form):
    status = forms.ChoiceField(choices=[("", "any status"), *JobStatus.choices], required=False)
    job_queue = _optional_choice(JobQueue.objects.order_by("name"), "any queue")
    quota_share = _optional_choice(
        QuotaShare.objects.select_related("job_queue").order_by("job_queue__name", "name"), "any share"
    )
    team = _optional_choice(Team.objects.order_by("name"), "any team")

    def __init__(self, *args, viewer, **kwargs):
        super().__init__(*args, **kwargs)
        if not viewer.is_staff:
            self.fields["team"].queryset = Team.objects.filter(pk__in=viewer.team_ids).order_by("name")
            self.fields["quota_share"].queryset = self.fields["quota_share"].queryset.filter(
                team_id__in=viewer.team_ids
            )


class EventFilterForm(forms.Form):
    kind = forms.ChoiceField(choices=[("", "any kind"), *EventKind.choices], required=False)
    job_queue = _optional_choice(JobQueue.objects.order_by("name"), "any queue")
    quota_share = _optional_choice(
        QuotaShare.objects.select_related("job_queue").order_by("job_queue__name", "name"), "any share"
    )
    job = forms.IntegerField(required=False, min_value=1, label="Job id")


# --- administration -----------------------------------------------------------------------------------------


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
                label=type_.name, required=False, min_value=self.limit_minimum, initial=current.get(type_.pk)
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
            if raw.isdigit():
                proposed[type_.pk] = int(raw)
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
            )
        )
        if share is not None:
            self.fields["job_queue"].disabled = True
            self.fields["job_queue"].help_text = "A share stays in its queue."
        self.add_limit_fields(list(InstanceType.objects.order_by("name")), current)

    def job_queue(self) -> JobQueue | None:
        if self.share is not None:
            return self.share.job_queue
        try:
            return JobQueue.objects.get(
                pk=int(self.data.get("job_queue") or self.initial.get("job_queue") or 0)
            )
        except (JobQueue.DoesNotExist, ValueError, TypeError):
            return None

    def share_fields(self) -> dict:
        names = ["name", "team", "strategy", "borrow_limit", "in_share_preemption", "state"]
        if self.share is None:
            names.append("job_queue")
        return {name: self.cleaned_data[name] for name in names}


class ServiceEnvironmentForm(LimitFieldsMixin, forms.Form):
    """An environment's fields and its on-demand capacity per instance type (blank: none of that type)."""

    limit_prefix = "capacity_"
    limit_minimum = 0

    def __init__(self, *args, environment: ServiceEnvironment | None = None, **kwargs):
        current = {}
        if environment is not None:
            kwargs.setdefault("initial", {}).update(
                {"name": environment.name, "state": environment.state, "executor": environment.executor}
            )
            current = {
                limit.instance_type_id: limit.max_capacity for limit in environment.capacity_limits.all()
            }
        super().__init__(*args, **kwargs)
        self.fields.update(fields_for_model(ServiceEnvironment, fields=["name", "state", "executor"]))
        self.add_limit_fields(list(InstanceType.objects.order_by("name")), current)

    def environment_fields(self) -> dict:
        return {name: self.cleaned_data[name] for name in ("name", "state", "executor")}


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
                JobQueue, fields=["name", "priority", "state", "service_environment", "ordering"]
            )
        )
        # An environment serves one queue: offer the free ones, and this queue's own.
        free = ServiceEnvironment.objects.filter(job_queue__isnull=True)
        if job_queue is not None:
            free = free | ServiceEnvironment.objects.filter(pk=job_queue.service_environment_id)
        self.fields["service_environment"].queryset = free.order_by("name")


class DateTimeInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self, **kwargs):
        super().__init__(format="%Y-%m-%dT%H:%M", **kwargs)


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
