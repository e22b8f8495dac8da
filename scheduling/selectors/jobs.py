"""Jobs as a viewer may see them: the filtered list, one job in full, the API's jobs."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Prefetch, Q

from scheduling.models import Job, JobAttempt, JobPreference
from scheduling.selectors.visibility import Viewer, visible_jobs


@dataclass(frozen=True)
class JobFilters:
    status: str | None = None
    job_queue_id: int | None = None
    share_id: int | None = None
    team_id: int | None = None
    search: str = ""  # a job's id (exactly, with or without its `#`) or part of its name


def _matching(jobs, search: str):
    """Jobs whose name contains `search`, or the job whose id it is."""
    search = search.strip()
    if not search:
        return jobs
    match = Q(name__icontains=search)
    number = search.removeprefix("#")
    if number.isdigit() and len(number) <= 18:  # longer is no id: it would overflow the database's integer
        match |= Q(pk=int(number))
    return jobs.filter(match)


def job_list(*, viewer: Viewer, filters: JobFilters):
    """The jobs the viewer sees in full, filtered, newest first (a queryset to paginate: count + page)."""
    jobs = Job.objects.all() if viewer.is_staff else Job.objects.filter(team_id__in=viewer.team_ids)
    if filters.status:
        jobs = jobs.filter(status=filters.status)
    if filters.job_queue_id:
        jobs = jobs.filter(job_queue_id=filters.job_queue_id)
    if filters.share_id:
        jobs = jobs.filter(quota_share_id=filters.share_id)
    if filters.team_id:
        jobs = jobs.filter(team_id=filters.team_id)
    jobs = _matching(jobs, filters.search)
    return (
        jobs.select_related(
            "job_queue",
            "quota_share",
            "team",
            "selected_instance_type",
            "selected_training_plan",
            "submitted_by",
            "pending",
        )
        .defer("payload", "job_queue__service_environment_id")
        .order_by("-created_at", "-id")
    )


def jobs_in_full():
    """Jobs with all a job's page or API body shows: queue, share, team, submitter, placement, pending state,
    preference list and attempts. 3 queries (rows, lists, attempts) however many jobs."""
    return Job.objects.select_related(
        "job_queue",
        "quota_share",
        "team",
        "submitted_by",
        "selected_instance_type",
        "selected_training_plan",
        "pending",
    ).prefetch_related(
        Prefetch(
            "instance_preferences",
            queryset=JobPreference.objects.select_related("instance_type", "training_plan"),
        ),
        Prefetch("attempts", queryset=JobAttempt.objects.select_related("instance_type", "training_plan")),
    )


def jobs_for_user(*, user, sees_all: bool):
    """The jobs the API shows a user, in full: all when `sees_all` (staff, executors), else their teams'."""
    jobs = jobs_in_full()
    if sees_all:
        return jobs
    return jobs.filter(visible_jobs(user=user))


def job_for_viewer(*, viewer: Viewer, job_id: int) -> Job | None:
    """The job with its preference list and attempts, or None when the viewer may not see it. 3 queries."""
    jobs = jobs_in_full()
    if not viewer.is_staff:
        jobs = jobs.filter(team_id__in=viewer.team_ids)
    return jobs.filter(pk=job_id).first()
