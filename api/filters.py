"""List filters; references are names, as in request bodies."""

from __future__ import annotations

from datetime import UTC, datetime

from django import forms
from django_filters import rest_framework as filters

from scheduling.models import MAX_ID, Event, EventKind, Job, JobStatus, QuotaShare, State, TrainingPlan


class QuotaShareFilter(filters.FilterSet):
    job_queue = filters.CharFilter(field_name="job_queue__name", help_text="name of the job queue")
    team = filters.CharFilter(field_name="team__slug", help_text="slug of the team")
    state = filters.ChoiceFilter(choices=State.choices)

    class Meta:
        model = QuotaShare
        fields = ["job_queue", "team", "state"]


class TrainingPlanFilter(filters.FilterSet):
    job_queue = filters.CharFilter(field_name="job_queue__name", help_text="name of the job queue")

    class Meta:
        model = TrainingPlan
        fields = ["job_queue"]


class JobFilter(filters.FilterSet):
    status = filters.ChoiceFilter(choices=JobStatus.choices)
    # The names a job keeps: a deleted share's or queue's jobs are still found by them.
    quota_share = filters.CharFilter(field_name="quota_share_name", help_text="name of the quota share")
    job_queue = filters.CharFilter(field_name="job_queue_name", help_text="name of the job queue")
    team = filters.CharFilter(field_name="team__slug", help_text="slug of the team")

    class Meta:
        model = Job
        fields = ["status", "quota_share", "job_queue", "team"]


class UtcDateTimeFilter(filters.IsoDateTimeFilter):
    """An ISO 8601 datetime compared in UTC: ISO allows offsets PostgreSQL refuses (beyond +-15:59)."""

    def filter(self, qs, value):
        if value is not None:
            try:
                value = value.astimezone(UTC)
            except OverflowError:  # past year 1 or 9999 once in UTC: before or after every event
                value = (datetime.min if value.year == 1 else datetime.max).replace(tzinfo=UTC)
        return super().filter(qs, value)


class IdFilter(filters.NumberFilter):
    """A row id: a whole number the id column can hold (a larger one would overflow the database's comparison,
    a 500); anything else is a 400 naming the parameter."""

    field_class = forms.IntegerField

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", MAX_ID)
        super().__init__(*args, **kwargs)


class EventFilter(filters.FilterSet):
    job = IdFilter(field_name="job", min_value=1, help_text="id of the job")
    quota_share = filters.CharFilter(field_name="quota_share__name", help_text="name of the quota share")
    kind = filters.ChoiceFilter(choices=EventKind.choices)
    since = UtcDateTimeFilter(
        field_name="created_at",
        lookup_expr="gt",
        help_text="ISO 8601 datetime: events created strictly after it, oldest first (for tailing)",
    )
    since_id = IdFilter(
        field_name="id",
        lookup_expr="gt",
        help_text="an event id: events after it, oldest first (a cursor for tailing)",
    )

    class Meta:
        model = Event
        fields = ["job", "quota_share", "kind", "since", "since_id"]
