"""Who sees what. Visibility is decided here, not in templates: a member sees their teams' jobs in full and
every other team's only in aggregate, so a `JobRef` of another team carries no name (and an event about
another team's job carries a summary built from its structured fields, not its message: see `events`)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q

from scheduling.models import Membership


def visible_jobs(*, user) -> Q:
    """Jobs a user may see in full: staff all, others their teams' jobs."""
    if user.is_staff:
        return Q()
    return Q(team__memberships__user=user)


@dataclass(frozen=True)
class Viewer:
    """Who is looking: staff see every job; a member sees the jobs of `team_ids` in full."""

    user_id: int
    is_staff: bool
    team_ids: frozenset[int]

    def sees_team(self, team_id: int | None) -> bool:
        return self.is_staff or team_id in self.team_ids


def viewer_for(*, user) -> Viewer:
    """1 query."""
    team_ids = frozenset(Membership.objects.filter(user=user).values_list("team_id", flat=True))
    return Viewer(user_id=user.pk, is_staff=user.is_staff, team_ids=team_ids)


@dataclass(frozen=True)
class JobRef:
    """A job as the viewer may see it: `name` is None when it belongs to another team."""

    id: int
    name: str | None
    share_name: str

    @property
    def visible(self) -> bool:
        return self.name is not None


def job_ref(viewer: Viewer, *, job_id, name, team_id, share_name) -> JobRef | None:
    if job_id is None:
        return None
    return JobRef(id=job_id, name=name if viewer.sees_team(team_id) else None, share_name=share_name or "?")
