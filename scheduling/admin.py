"""The Django admin for every model. Validation comes from `scheduling.rules`, shown next to the field at
fault; every configuration change is recorded as a CONFIG_CHANGED event with its before and after."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.forms.models import BaseInlineFormSet

from scheduling import rules, services
from scheduling.errors import DomainError
from scheduling.models import (
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


def error_messages(exc: ValidationError) -> list[str]:
    """Every message of a ValidationError, dict-shaped or not, for places that show one list."""
    if hasattr(exc, "error_dict"):
        return [message for messages_ in exc.message_dict.values() for message in messages_]
    return list(exc.messages)


class AuditedAdmin(admin.ModelAdmin):
    """Records a CONFIG_CHANGED event (who, what, before, after) for every add, change and delete."""

    def save_model(self, request, obj, form, change):
        # The before-state is read before anything is written: inlines are saved later, in save_related.
        request._quotaportal_before = (
            services.config_state(type(obj).objects.get(pk=obj.pk)) if change and obj.pk else None
        )
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        obj = form.instance
        services.config_change_record(
            actor=request.user, obj=obj, action="changed" if change else "created",
            before=getattr(request, "_quotaportal_before", None), after=services.config_state(obj),
        )

    def delete_model(self, request, obj):
        services.config_change_record(actor=request.user, obj=obj, action="deleted",
                                      before=services.config_state(obj), after=None)
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)


@admin.register(InstanceType)
class InstanceTypeAdmin(AuditedAdmin):
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
class TeamAdmin(AuditedAdmin):
    list_display = ("name", "slug")
    prepopulated_fields = {"slug": ("name",)}
    search_fields = ("name", "slug")
    inlines = [MembershipInline]


class EnvironmentCapacityFormSet(BaseInlineFormSet):
    def clean(self):
        super().clean()
        environment = self.instance
        capacities = {
            form.cleaned_data["instance_type"]: form.cleaned_data["max_capacity"]
            for form in self.forms
            if form.cleaned_data and not form.cleaned_data.get("DELETE") and form.cleaned_data.get("instance_type")
        }
        queue = JobQueue.objects.filter(service_environment=environment).first() if environment.pk else None
        try:
            rules.validate_environment_capacity(job_queue=queue, capacities=capacities)
        except ValidationError as exc:
            raise ValidationError(error_messages(exc)) from None


class EnvironmentCapacityInline(admin.TabularInline):
    model = EnvironmentCapacity
    formset = EnvironmentCapacityFormSet
    extra = 1


@admin.register(ServiceEnvironment)
class ServiceEnvironmentAdmin(AuditedAdmin):
    list_display = ("name", "state", "executor")
    list_filter = ("state", "executor")
    inlines = [EnvironmentCapacityInline]


@admin.register(JobQueue)
class JobQueueAdmin(AuditedAdmin):
    list_display = ("name", "priority", "state", "service_environment", "ordering")
    list_filter = ("state", "ordering")


class ShareCapacityLimitFormSet(BaseInlineFormSet):
    def clean(self):
        super().clean()
        share = self.instance
        if not share.job_queue_id or any(form.errors for form in self.forms):
            return  # the share's own form or a row is already in error: say that first
        limits = [
            rules.LimitInput(form.cleaned_data["instance_type"], form.cleaned_data["max_capacity"])
            for form in self.forms
            if form.cleaned_data and not form.cleaned_data.get("DELETE") and form.cleaned_data.get("instance_type")
        ]
        try:
            rules.validate_quota_share(
                share=share if share.pk else None, job_queue=share.job_queue, name=share.name,
                strategy=share.strategy, borrow_limit=share.borrow_limit, limits=limits,
            )
        except ValidationError as exc:
            raise ValidationError(error_messages(exc)) from None


class ShareCapacityLimitInline(admin.TabularInline):
    model = ShareCapacityLimit
    formset = ShareCapacityLimitFormSet
    extra = 1
    max_num = 5


@admin.register(QuotaShare)
class QuotaShareAdmin(AuditedAdmin):
    list_display = ("name", "job_queue", "team", "strategy", "borrow_limit", "in_share_preemption", "state")
    list_filter = ("job_queue", "strategy", "state")
    search_fields = ("name", "team__name")
    inlines = [ShareCapacityLimitInline]

    def has_delete_permission(self, request, obj=None):
        # SPEC 1: a share is deleted only once DISABLED; deletion cancels its unfinished jobs.
        if obj is not None and obj.state != State.DISABLED:
            return False
        return super().has_delete_permission(request, obj)

    def delete_model(self, request, obj):
        try:
            services.quota_share_delete(share=obj, actor=request.user)
        except (ValidationError, DomainError) as exc:
            self.message_user(request, "; ".join(error_messages(exc)) if isinstance(exc, ValidationError)
                              else exc.message, level=messages.ERROR)

    def delete_queryset(self, request, queryset):
        for share in queryset:
            self.delete_model(request, share)


class TrainingPlanForm(forms.ModelForm):
    class Meta:
        model = TrainingPlan
        fields = "__all__"

    def clean(self):
        cleaned = super().clean()
        queue = cleaned.get("job_queue")
        if queue is not None:
            rules.validate_training_plan(
                plan=self.instance if self.instance.pk else None, job_queue=queue,
                instance_count=cleaned.get("instance_count"), start_time=cleaned.get("start_time"),
                end_time=cleaned.get("end_time"), quota_shares=cleaned.get("quota_shares") or [],
            )
        return cleaned


@admin.register(TrainingPlan)
class TrainingPlanAdmin(AuditedAdmin):
    form = TrainingPlanForm
    list_display = ("name", "job_queue", "instance_type", "instance_count", "start_time", "end_time", "status")
    list_filter = ("job_queue", "instance_type")
    filter_horizontal = ("quota_shares",)


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

    list_display = ("id", "name", "job_queue", "quota_share", "status", "scheduling_priority",
                    "selected_instance_type", "selected_instance_count", "created_at")
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
                services.job_cancel(job_id=job_id, actor=request.user, reason="cancelled from the admin")
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
    list_display = ("created_at", "kind", "job", "quota_share", "other_job", "other_share", "actor", "message")
    list_filter = ("kind",)
    search_fields = ("message",)
    list_select_related = ("job", "quota_share", "other_job", "other_share", "actor")


@admin.register(SchedulingPass)
class SchedulingPassAdmin(ReadOnlyAdmin):
    list_display = ("started_at", "job_queue", "trigger", "duration_ms", "jobs_considered", "placed_within_quota",
                    "placed_borrowing", "preempted_reclaim", "preempted_in_share", "fallbacks")
    list_filter = ("job_queue", "trigger")


@admin.register(ShareUsageSample)
class ShareUsageSampleAdmin(ReadOnlyAdmin):
    list_display = ("taken_at", "quota_share", "instance_type", "limit", "usage", "borrowed", "lent", "pending")
    list_filter = ("quota_share",)
