"""The filters above the job list and the event log."""

from __future__ import annotations

from django import forms

from portal.forms.fields import IdChoiceField
from portal.params import MAX_ID
from scheduling.models import EventKind, JobQueue, JobStatus, QuotaShare, Team


def _optional_choice(queryset, label):
    return IdChoiceField(queryset=queryset, required=False, empty_label=label)


class _ShareChoiceField(IdChoiceField):
    """Two queues may each have a share called nlp: the queue's name tells them apart."""

    def label_from_instance(self, obj) -> str:
        return f"{obj.job_queue.name} / {obj.name}"


def _share_choice():
    queryset = QuotaShare.objects.select_related("job_queue").order_by("job_queue__name", "name")
    return _ShareChoiceField(queryset=queryset, required=False, empty_label="any share")


class JobFilterForm(forms.Form):
    whose = forms.ChoiceField(
        choices=[("mine", "my jobs"), ("all", "all jobs I may see")], required=False, label="Whose"
    )
    q = forms.CharField(
        required=False,
        max_length=200,
        label="Name or id",
        widget=forms.TextInput(attrs={"type": "search", "placeholder": "pretrain, 42…"}),
    )
    status = forms.ChoiceField(choices=[("", "any status"), *JobStatus.choices], required=False)
    job_queue = _optional_choice(JobQueue.objects.order_by("name"), "any queue")
    quota_share = _share_choice()
    team = _optional_choice(Team.objects.order_by("name"), "any team")

    def __init__(self, *args, viewer, **kwargs):
        super().__init__(*args, **kwargs)
        # A member's list opens on their own jobs; staff, and links that filter by something else, see all.
        self.default_whose = "all" if viewer.is_staff or self.is_bound else "mine"
        self.fields["whose"].initial = self.default_whose
        if not viewer.is_staff:
            self.fields["team"].queryset = Team.objects.filter(pk__in=viewer.team_ids).order_by("name")
            self.fields["quota_share"].queryset = self.fields["quota_share"].queryset.filter(
                team_id__in=viewer.team_ids
            )


class EventFilterForm(forms.Form):
    kind = forms.ChoiceField(choices=[("", "any kind"), *EventKind.choices], required=False)
    job_queue = _optional_choice(JobQueue.objects.order_by("name"), "any queue")
    quota_share = _share_choice()
    job = forms.IntegerField(required=False, min_value=1, max_value=MAX_ID, label="Job id")
