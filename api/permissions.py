"""Who may do what (api.md). Job visibility is a queryset filter, so outsiders get 404, not 403."""

from __future__ import annotations

import dataclasses

from rest_framework.permissions import SAFE_METHODS, BasePermission

from scheduling.models import Membership
from scheduling.selectors.visibility import Viewer, viewer_for
from scheduling.services import jobs as job_services

REPORT_PERMISSION = "scheduling.report_job_status"


def sees_all_jobs(user) -> bool:
    """Staff, and executor accounts (they must read the jobs they run, payload included), see every job."""
    return user.is_staff or user.has_perm(REPORT_PERMISSION)


def api_viewer(user) -> Viewer:
    """Who reads (1 query, and the permission check's): executor accounts read all, as they read every job."""
    return dataclasses.replace(viewer_for(user=user), is_staff=sees_all_jobs(user))


class IsStaffOrReadOnly(BasePermission):
    """Configuration: any signed-in user reads, staff write."""

    message = "only staff may change the configuration"

    def has_permission(self, request, view) -> bool:
        return request.method in SAFE_METHODS or request.user.is_staff


class IsStaff(BasePermission):
    message = "only staff may do this"

    def has_permission(self, request, view) -> bool:
        return request.user.is_staff


class IsStaffOrTeamManager(BasePermission):
    """A team's membership: staff, or a manager of that team."""

    message = "only staff or a manager of this team may change its members"

    def has_object_permission(self, request, view, team) -> bool:
        user = request.user
        return user.is_staff or job_services.user_team_role(user, team.pk) == Membership.Role.MANAGER


class CanReportJobStatus(BasePermission):
    """Executor reports: staff, or holders of `scheduling.report_job_status`."""

    message = "only staff or an executor account (permission report_job_status) may report job status"

    def has_permission(self, request, view) -> bool:
        return sees_all_jobs(request.user)
