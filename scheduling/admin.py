"""The Django admin for every model. Configuration is saved through the same services as the pages and
the API (`scheduling.services.configuration`): the same queue lock, `scheduling.rules` and CONFIG_CHANGED
record with its before and after, and the pass the change asks for. A refused rule is shown on the form."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from scheduling import rules
from scheduling.errors import DomainError
from scheduling.models import (
    OPTIONAL_SETTINGS,
    EnvironmentCapacity,
    Event,
    InstanceType,
    Job,
    JobAttempt,
    JobPreference,
    JobQueue,
    Membership,
    QuotaShare,
    SchedulingPass,
    ServiceEnvironment,
    ShareCapacityLimit,
    ShareUsageSample,
    State,
    Team,
    TrainingPlan,
)
from scheduling.selectors.budgets import share_budgets
from scheduling.services import configuration as config_services
from scheduling.services import jobs as job_services


def error_messages(exc: ValidationError) -> list[str]:
    """Every message of a ValidationError, dict-shaped or not, for places that show one list."""
    if hasattr(exc, "error_dict"):
        return [message for messages_ in exc.message_dict.values() for message in messages_]
    return list(exc.messages)


class _Refused(Exception):
    """A service refused the change the admin's form let through (its ValidationError rides along)."""

    def __init__(self, error: ValidationError):
        super().__init__(error)
        self.error = error


def _errors_onto(form, error: ValidationError) -> None:
    """Put a service's ValidationError on the admin form: by field where the form has one, else on top."""
    if not hasattr(error, "error_dict"):
        form.add_error(None, error.messages)
        return
    for key, errors in error.error_dict.items():
        form.add_error(key if key in form.fields else None, errors)


def _rows(formsets) -> list[dict[str, Any]]:
    """The cleaned rows of the inline formsets that stay (not deleted, not left blank)."""
    return [
        form.cleaned_data
        for formset in formsets
        for form in formset.forms
        if form.cleaned_data and not form.cleaned_data.get("DELETE")
    ]


def _limits(formsets) -> list[rules.LimitInput]:
    return [
        rules.LimitInput(row["instance_type"], row["max_capacity"], row.get("lending_limit"))
        for row in _rows(formsets)
        if row.get("instance_type")
    ]


def _fields(form, *, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        name: value
        for name, value in form.cleaned_data.items()
        if name not in leave_out and not (name in OPTIONAL_SETTINGS and value in (None, ""))
    }


class ServiceForm(forms.ModelForm):
    """Checks the fields only, as the services' own field check does: the model's check constraints are
    left to the service, whose rules say which field is at fault and what to do (a constraint names only
    itself)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in OPTIONAL_SETTINGS:
            if name in self.fields:
                self.fields[name].required = False

    def _post_clean(self):
        full_clean = self.instance.full_clean
        self.instance.full_clean = lambda **options: full_clean(**options, validate_constraints=False)
        try:
            super()._post_clean()
        finally:
            del self.instance.full_clean


class ServiceAdmin(admin.ModelAdmin):
    """Adds, changes and deletes through the configuration services, as the pages and the API do.

    The admin's forms check fields only; the service checks the rules under the queue lock as it saves. When
    it refuses, the admin's transaction rolls back and the form is shown again as posted, with the service's
    messages on it. Subclasses say which service creates and which changes (with the inline rows, if any).
    """

    form = ServiceForm

    def service_create(self, request, form, formsets) -> models.Model:
        return config_services.config_object_create(
            model=self.model, fields=_fields(form), actor=request.user
        )

    def service_update(self, request, obj, form, formsets) -> models.Model:
        return config_services.config_object_update(obj=obj, changes=_fields(form), actor=request.user)

    def service_delete(self, request, obj) -> None:
        config_services.config_object_delete(obj=obj, actor=request.user)

    def save_model(self, request, obj, form, change):
        """Nothing yet: the service saves the object with its inline rows, in `save_related`."""

    def save_related(self, request, form, formsets, change):
        """Save the object and its inline rows through the service, in the admin's transaction."""
        try:
            if change:
                self.service_update(request, form.instance, form, formsets)
            else:
                # The admin's log entry and redirect name its own (unsaved) instance: give it the row's id.
                form.instance.pk = self.service_create(request, form, formsets).pk
        except ValidationError as exc:
            raise _Refused(exc) from None
        for formset in formsets:
            # What `construct_change_message` reads, which the formsets' own save() would have set.
            kept = [f for f in formset.forms if f.has_changed() and not f.cleaned_data.get("DELETE")]
            formset.new_objects = [f.instance for f in kept if f in formset.extra_forms]
            formset.changed_objects = [
                (f.instance, f.changed_data) for f in kept if f in formset.initial_forms
            ]
            formset.deleted_objects = [
                f.instance for f in formset.initial_forms if f.cleaned_data.get("DELETE")
            ]

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except _Refused as refused:
            # Its transaction has rolled back; the same POST again, with the refusal on the form, shows it.
            request._quotaportal_refusal = refused.error
            return super().changeform_view(request, object_id, form_url, extra_context)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form_class = super().get_form(request, obj, change=change, **kwargs)
        refusal = getattr(request, "_quotaportal_refusal", None)
        if refusal is None:
            return form_class

        class RefusedForm(form_class):
            def clean(self):
                cleaned = super().clean()
                _errors_onto(self, refusal)
                return cleaned

        return RefusedForm

    def delete_model(self, request, obj):
        try:
            self.service_delete(request, obj)
        except (ValidationError, DomainError) as exc:
            self.message_user(
                request,
                "; ".join(error_messages(exc)) if isinstance(exc, ValidationError) else exc.message,
                level=messages.ERROR,
            )

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)


@admin.register(InstanceType)
class InstanceTypeAdmin(ServiceAdmin):
    list_display = ("name", "gpu_count", "accelerated", "hourly_price")
    search_fields = ("name",)

    @admin.display(boolean=True)
    def accelerated(self, obj):
        return obj.accelerated


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ("user",)


@admin.register(Team)
class TeamAdmin(ServiceAdmin):
    """A team's own fields through `config_object_*`, its members through `team_member_set`/`_remove`."""

    list_display = ("name", "slug")
    prepopulated_fields = {"slug": ("name",)}
    search_fields = ("name", "slug")
    inlines = [MembershipInline]

    def service_create(self, request, form, formsets) -> models.Model:
        team = super().service_create(request, form, formsets)
        self._members_save(request, team, formsets)
        return team

    def service_update(self, request, obj, form, formsets) -> models.Model:
        team = super().service_update(request, obj, form, formsets)
        self._members_save(request, team, formsets)
        return team

    def service_delete(self, request, obj) -> None:
        config_services.team_delete(team=obj, actor=request.user)

    def _members_save(self, request, team: Team, formsets) -> None:
        for formset in formsets:
            for row in formset.forms:
                data = row.cleaned_data
                if not data or not (row.has_changed() or data.get("DELETE")):
                    continue
                was = row.initial.get("user")  # the member an existing row named before this change
                if was is not None and (data.get("DELETE") or data["user"].pk != was):
                    config_services.team_member_remove(team=team, user_id=was, actor=request.user)
                if not data.get("DELETE"):
                    config_services.team_member_set(
                        team=team, user=data["user"], role=data["role"], actor=request.user
                    )


class EnvironmentCapacityInline(admin.TabularInline):
    model = EnvironmentCapacity
    extra = 1


@admin.register(ServiceEnvironment)
class ServiceEnvironmentAdmin(ServiceAdmin):
    list_display = ("name", "state", "executor")
    list_filter = ("state", "executor")
    inlines = [EnvironmentCapacityInline]
    filter_horizontal = ("executor_accounts",)

    def service_create(self, request, form, formsets) -> models.Model:
        return config_services.service_environment_create(
            fields=_fields(form, leave_out=("executor_accounts",)),
            limits=_limits(formsets),
            actor=request.user,
            executor_accounts=list(form.cleaned_data.get("executor_accounts") or []),
        )

    def service_update(self, request, obj, form, formsets) -> models.Model:
        limits = _limits(formsets) if any(formset.has_changed() for formset in formsets) else None
        accounts = form.cleaned_data.get("executor_accounts")
        return config_services.service_environment_update(
            environment=obj,
            changes=_fields(form, leave_out=("executor_accounts",)),
            limits=limits,
            actor=request.user,
            executor_accounts=list(accounts) if "executor_accounts" in form.changed_data else None,
        )


@admin.register(JobQueue)
class JobQueueAdmin(ServiceAdmin):
    list_display = (
        "name",
        "priority",
        "state",
        "service_environment",
        "ordering",
        "idle_capacity_assignment",
        "preemption_min_runtime_seconds",
        "relocation_min_runtime_seconds",
    )
    list_filter = ("state", "ordering", "idle_capacity_assignment")

    def service_update(self, request, obj, form, formsets) -> models.Model:
        return config_services.job_queue_update(job_queue=obj, changes=_fields(form), actor=request.user)

    def service_delete(self, request, obj) -> None:
        config_services.job_queue_delete(job_queue=obj, actor=request.user)

    def has_delete_permission(self, request, obj=None):
        # As for a share: a queue is deleted only once DISABLED, and its jobs go with it.
        if obj is not None and obj.state != State.DISABLED:
            return False
        return super().has_delete_permission(request, obj)


class ShareCapacityLimitInline(admin.TabularInline):
    model = ShareCapacityLimit
    extra = 1
    max_num = 5


@admin.register(QuotaShare)
class QuotaShareAdmin(ServiceAdmin):
    list_display = (
        "name",
        "job_queue",
        "team",
        "strategy",
        "borrowing",
        "in_share_preemption",
        "fair_share_weight",
        "state",
        "budget_gpu_hours",
        "budget_period",
        "budget_scope",
    )
    list_filter = ("job_queue", "strategy", "state")

    @admin.display(description="borrow limit", ordering="borrow_limit")
    def borrowing(self, share: QuotaShare) -> str:
        """A borrow limit only where the share can borrow: -1 says nothing of a RESERVE or LEND share."""
        if share.strategy != QuotaShare.Strategy.LEND_AND_BORROW:
            return "— (does not borrow)"
        return "unlimited" if share.borrow_limit == -1 else f"{share.borrow_limit}%"

    search_fields = ("name", "team__name")
    inlines = [ShareCapacityLimitInline]

    def get_readonly_fields(self, request, obj=None):
        # A share stays in its queue (`quota_share_update` refuses a move).
        return ("job_queue", "budget_spent") if obj is not None else ()

    @admin.display(description="Budget this period")
    def budget_spent(self, obj) -> str:
        found = share_budgets(shares=[obj], now=timezone.now()).get(obj.pk)
        if found is None:
            return "no budget"
        return f"{found.spent_words()}; {found.projection_words()}"

    def service_create(self, request, form, formsets) -> models.Model:
        return config_services.quota_share_create(
            fields=_fields(form), limits=_limits(formsets), actor=request.user
        )

    def service_update(self, request, obj, form, formsets) -> models.Model:
        limits = _limits(formsets) if any(formset.has_changed() for formset in formsets) else None
        return config_services.quota_share_update(
            share=obj, changes=_fields(form), limits=limits, actor=request.user
        )

    def service_delete(self, request, obj) -> None:
        config_services.quota_share_delete(share=obj, actor=request.user)

    def has_delete_permission(self, request, obj=None):
        # behaviour.md#what-there-is: a share is deleted only once DISABLED; deletion cancels its unfinished jobs.
        if obj is not None and obj.state != State.DISABLED:
            return False
        return super().has_delete_permission(request, obj)


@admin.register(TrainingPlan)
class TrainingPlanAdmin(ServiceAdmin):
    list_display = (
        "name",
        "job_queue",
        "instance_type",
        "instance_count",
        "start_time",
        "end_time",
        "status",
    )
    list_filter = ("job_queue", "instance_type")
    filter_horizontal = ("quota_shares",)

    def service_create(self, request, form, formsets) -> models.Model:
        return config_services.training_plan_create(
            fields=_fields(form, leave_out=("quota_shares",)),
            quota_shares=list(form.cleaned_data["quota_shares"]),
            actor=request.user,
        )

    def service_update(self, request, obj, form, formsets) -> models.Model:
        return config_services.training_plan_update(
            plan=obj,
            changes=_fields(form, leave_out=("quota_shares",)),
            quota_shares=list(form.cleaned_data["quota_shares"]),
            actor=request.user,
        )


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class JobPreferenceInline(ReadOnlyInline):
    model = JobPreference


class JobAttemptInline(ReadOnlyInline):
    model = JobAttempt


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """Jobs are submitted through the pages or the API (where every submission rule is checked)."""

    list_display = (
        "id",
        "name",
        "job_queue_name",
        "quota_share_name",
        "team",
        "status",
        "scheduling_priority",
        "selected_instance_type",
        "selected_instance_count",
        "created_at",
    )
    list_filter = ("status", "job_queue", "quota_share")
    search_fields = ("name", "id")
    readonly_fields = [f.name for f in Job._meta.fields]
    inlines = [JobPreferenceInline, JobAttemptInline]
    actions = ["cancel_jobs"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Cancel the selected unfinished jobs")
    def cancel_jobs(self, request, queryset):
        cancelled = 0
        for job_id in queryset.values_list("pk", flat=True):
            try:
                job_services.job_cancel(job_id=job_id, actor=request.user, reason="cancelled from the admin")
                cancelled += 1
            except DomainError as exc:
                self.message_user(request, exc.message, level=messages.WARNING)
        self.message_user(request, f"cancelled {cancelled} job(s)")


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "kind",
        "job",
        "quota_share",
        "other_job",
        "other_share",
        "actor",
        "message",
    )
    list_filter = ("kind",)
    search_fields = ("message",)
    list_select_related = ("job", "quota_share", "other_job", "other_share", "actor")


@admin.register(SchedulingPass)
class SchedulingPassAdmin(ReadOnlyAdmin):
    list_display = (
        "started_at",
        "job_queue",
        "trigger",
        "duration_ms",
        "jobs_considered",
        "placed_within_quota",
        "placed_borrowing",
        "preempted_reclaim",
        "preempted_in_share",
        "fallbacks",
    )
    list_filter = ("job_queue", "trigger")


@admin.register(ShareUsageSample)
class ShareUsageSampleAdmin(ReadOnlyAdmin):
    list_display = (
        "taken_at",
        "quota_share",
        "instance_type",
        "limit",
        "usage",
        "borrowed",
        "lent",
        "pending",
    )
    list_filter = ("quota_share",)
