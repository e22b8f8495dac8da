"""Submitting a job (its fields and its preference list, row by row) and acting on one. Field-level checks
only: the cross-row rules run in `job_services.job_submit`; `errors.add_submission_errors` puts theirs back."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django import forms

from portal.forms.fields import IdChoiceField, ShallowJSONField
from portal.params import MAX_STORED_INT, int_param
from scheduling import rules
from scheduling.models import (
    MAX_ATTEMPT_DURATION_SECONDS,
    MAX_PREFERENCES,
    RELOCATE_HELP,
    EnvironmentCapacity,
    InstanceType,
    JobQueue,
    QuotaShare,
    State,
    TrainingPlan,
    name_validator,
)
from scheduling.services import jobs as job_services


class ShareChoiceField(IdChoiceField):
    def label_from_instance(self, obj: QuotaShare) -> str:
        return f"{obj.job_queue.name} / {obj.name} ({obj.team.name})"


class PlanChoiceField(IdChoiceField):
    def label_from_instance(self, obj: TrainingPlan) -> str:
        return f"{obj.name} ({obj.instance_type.name} x{obj.instance_count}, {obj.job_queue.name})"


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
    attempt_duration_seconds = forms.IntegerField(
        min_value=1,
        max_value=MAX_ATTEMPT_DURATION_SECONDS,
        required=False,
        label="Attempt duration seconds",
        help_text="An attempt placed longer is stopped and counts as failed; blank: no limit.",
    )
    relocate = forms.BooleanField(
        required=False,
        label="Move to an earlier preference when it frees",
        help_text=RELOCATE_HELP,
    )
    payload = ShallowJSONField(
        initial=dict,
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="A JSON object, at most 64 KiB, handed to the executor.",
    )
    client_token = forms.CharField(widget=forms.HiddenInput, required=False, max_length=64)

    def __init__(self, *args, user, **kwargs):
        kwargs.setdefault("initial", {}).setdefault("client_token", uuid.uuid4().hex)
        super().__init__(*args, **kwargs)
        shares = QuotaShare.objects.filter(state=State.ENABLED, job_queue__state=State.ENABLED)
        if not user.is_staff:
            shares = shares.filter(team__memberships__user=user)
        self.fields["quota_share"].queryset = shares.select_related(
            "job_queue__service_environment", "team"
        ).order_by("job_queue__name", "name")

    def selected_share(self) -> QuotaShare | None:
        """The share the bound (or prefilled) form names, if the user may submit to it; one query."""
        raw = (
            self.data.get(self.add_prefix("quota_share"))
            if self.is_bound
            else self.initial.get("quota_share")
        )
        share_id = int_param(None if raw is None else str(getattr(raw, "pk", raw)))
        if share_id is None:
            return None
        return self.fields["quota_share"].queryset.filter(pk=share_id).first()

    def queues(self):
        """The enabled queues the user may submit to (through one of the offered shares)."""
        return JobQueue.objects.filter(
            pk__in=self.fields["quota_share"].queryset.values("job_queue_id")
        ).select_related("service_environment")

    def clean_payload(self):
        payload = self.cleaned_data.get("payload")
        return {} if payload in (None, "") else payload


def queue_instance_types(queues):
    """The instance types the queues' environments have capacity of: all a preference row may name."""
    return InstanceType.objects.filter(
        pk__in=EnvironmentCapacity.objects.filter(service_environment__job_queue__in=queues).values(
            "instance_type_id"
        )
    ).order_by("name")


class PreferenceForm(forms.Form):
    instance_type = IdChoiceField(queryset=InstanceType.objects.order_by("name"), empty_label="instance type")
    instance_count = forms.IntegerField(min_value=1, max_value=MAX_STORED_INT, initial=1)
    training_plan = PlanChoiceField(
        queryset=TrainingPlan.objects.select_related("instance_type", "job_queue").order_by(
            "start_time", "name"
        ),
        required=False,
        empty_label="on-demand",
    )

    def __init__(self, *args, queues=None, **kwargs):
        """`queues`: offer only their instance types and training plans (the chosen share's queue, or every
        queue the user may submit to)."""
        super().__init__(*args, **kwargs)
        if queues is not None:
            self.fields["instance_type"].queryset = queue_instance_types(queues)
            self.fields["training_plan"].queryset = self.fields["training_plan"].queryset.filter(
                job_queue__in=queues
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
    total = int_param(data.get(f"{PREFERENCE_PREFIX}-TOTAL_FORMS"))
    return [
        {name: data.get(f"{PREFERENCE_PREFIX}-{i}-{name}", "") for name in _ROW_FIELDS}
        for i in range(1 if total is None else min(total, MAX_PREFERENCES))
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


@dataclass(frozen=True)
class CheckedSubmission:
    """What the form describes, with field defaults standing in for the fields at fault, so that the
    service's rules run in the same round as the field checks: `complete` when nothing stood in."""

    submission: job_services.JobSubmission
    rows: list[int]
    complete: bool


_STAND_INS = {
    "name": "job",
    "scheduling_priority": 0,
    "retry_attempts": 1,
    "preemption_retries_before_termination": None,
    "max_pending_seconds": None,
    "duration_seconds": None,
    "attempt_duration_seconds": None,
    "payload": None,
    "client_token": None,
}


def job_submission(form: JobForm, formset: PreferenceFormSet) -> CheckedSubmission | None:
    """The submission the form and formset describe, and the row of each entry; None when even the share
    is missing (no rule can be checked without it)."""
    form_ok, formset_ok = form.is_valid(), formset.is_valid()
    data = {**_STAND_INS, **form.cleaned_data}
    share = data.get("quota_share")
    if share is None:
        return None
    rows = formset.filled_rows()
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
        attempt_duration_seconds=data["attempt_duration_seconds"],
        relocate=data["relocate"],
        payload=data["payload"] if data["payload"] is not None else {},
        client_token=data["client_token"] or None,
    )
    return CheckedSubmission(submission, rows, complete=form_ok and formset_ok)


class PriorityForm(forms.Form):
    # hx-preserve: the job page's poll replaces the actions, but not a number someone is typing.
    scheduling_priority = forms.IntegerField(
        min_value=0, max_value=9999, label="Priority", widget=forms.NumberInput(attrs={"hx-preserve": "true"})
    )


class CancelForm(forms.Form):
    reason = forms.CharField(max_length=500, required=False, label="Reason (optional)")
