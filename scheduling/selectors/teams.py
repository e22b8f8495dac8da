"""Teams and their members as a viewer may see them: staff see every team, a member the teams they belong to.
Whether the viewer may change a team's members (staff, or a manager of it) comes with each team."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Prefetch
from rest_framework.authtoken.models import Token

from scheduling.models import Membership, Team
from scheduling.selectors.visibility import Viewer


@dataclass(frozen=True)
class TeamView:
    team: Team
    members: list[Membership]
    can_manage: bool


def _teams(viewer: Viewer):
    teams = Team.objects.order_by("name").prefetch_related(
        Prefetch("memberships", queryset=Membership.objects.select_related("user").order_by("user__username"))
    )
    return teams if viewer.is_staff else teams.filter(pk__in=viewer.team_ids)


def _view(team: Team, viewer: Viewer) -> TeamView:
    members = list(team.memberships.all())
    manages = any(m.user_id == viewer.user_id and m.role == Membership.Role.MANAGER for m in members)
    return TeamView(team=team, members=members, can_manage=viewer.is_staff or manages)


def teams_for_viewer(*, viewer: Viewer) -> list[TeamView]:
    """2 queries."""
    return [_view(team, viewer) for team in _teams(viewer)]


def team_for_viewer(*, viewer: Viewer, team_id: int) -> TeamView | None:
    """None when there is no such team or the viewer is not in it. 2 queries."""
    team = _teams(viewer).filter(pk=team_id).first()
    return _view(team, viewer) if team is not None else None


def user_memberships(*, user: AbstractBaseUser) -> list[Membership]:
    """The user's teams with their role in each. 1 query."""
    return list(Membership.objects.filter(user=user).select_related("team").order_by("team__name"))


def api_token_created(*, user: AbstractBaseUser) -> datetime | None:
    """When the user's API token was made, or None without one (the key itself is never shown again). 1 query."""
    return Token.objects.filter(user=user).values_list("created", flat=True).first()
