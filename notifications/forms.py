"""The Notifications page's form: it reads the fields; the rules (which URL, which triggers, which team) are
the service's, and its errors come back on the fields they name."""

from __future__ import annotations

from django import forms

from notifications.models import MAX_AFTER_MINUTES, MIN_AFTER_MINUTES, Channel, Subscription, Trigger
from notifications.services import SubscriptionInput, subscription_errors


class SubscriptionForm(forms.Form):
    name = forms.CharField(max_length=128, help_text="For you: shown in the log and in each notification.")
    channel = forms.ChoiceField(choices=Channel.choices, initial=Channel.WEBHOOK)
    target = forms.CharField(
        label="URL or email address",
        max_length=2000,
        help_text="A webhook URL (https://...), a Slack incoming-webhook URL, or an email address.",
    )
    triggers = forms.MultipleChoiceField(
        label="Tell me when",
        choices=Trigger.choices,
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": "Choose at least one thing to be told about."},
        initial=[Trigger.JOB_FAILED, Trigger.JOB_EXECUTOR_LOST],
    )
    team = forms.ChoiceField(
        label="About",
        required=False,
        help_text="Your teams' jobs and shares, or one team's (for its managers: every member's jobs).",
    )
    only_my_jobs = forms.BooleanField(
        label="Only jobs I submitted", required=False, help_text="Leaves out your teammates' jobs."
    )
    after_minutes = forms.IntegerField(
        label="N minutes",
        min_value=MIN_AFTER_MINUTES,
        max_value=MAX_AFTER_MINUTES,
        initial=30,
        help_text="How long a share starves, or an executor is silent, before you are told.",
    )

    def __init__(self, *args, owner, teams=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.owner = owner
        self.teams = {str(team.pk): team for team in teams}
        self.fields["team"].choices = [("", "my teams (personal)")] + [
            (key, f"team {team.name}") for key, team in self.teams.items()
        ]

    def clean_team(self):
        return self.teams.get(self.cleaned_data.get("team") or "")

    def clean(self):
        """The service's rules too, on the fields that were read, so every error shows in one round."""
        data = super().clean()
        problems = subscription_errors(owner=self.owner, data=self.to_input())
        for name, errors in problems.items():
            if name in data and name not in self.errors:
                for error in errors:
                    self.add_error(name, error)
        return data

    @staticmethod
    def initial_of(subscription: Subscription) -> dict:
        """The fields as a subscription holds them: the form that changes it starts from these."""
        return {
            "name": subscription.name,
            "channel": subscription.channel,
            "target": subscription.target,
            "triggers": list(subscription.triggers),
            "team": str(subscription.team_id) if subscription.team_id else "",
            "only_my_jobs": subscription.only_my_jobs,
            "after_minutes": subscription.after_minutes,
        }

    def to_input(self) -> SubscriptionInput:
        data = self.cleaned_data
        return SubscriptionInput(
            name=data.get("name", "-"),
            channel=data.get("channel", ""),
            target=data.get("target", ""),
            triggers=list(data.get("triggers") or ["-"]),
            team=data.get("team"),
            only_my_jobs=data.get("only_my_jobs", False),
            after_minutes=data.get("after_minutes", MIN_AFTER_MINUTES),
        )
