"""A team's members, added or given a role on the team's page (staff and the team's managers)."""

from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model

from scheduling.models import Membership


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150, label="Username")
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.MEMBER, label="Role")

    def clean_username(self):
        name = self.cleaned_data["username"].strip()
        user = get_user_model().objects.filter(username=name, is_active=True).first()
        if user is None:
            raise forms.ValidationError(f"no active user is named {name!r}")
        return user
