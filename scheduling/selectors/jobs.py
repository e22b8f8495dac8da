"""Jobs as a viewer may see them: the filtered list, one job in full, the API's jobs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Prefetch, Q

from scheduling.models import (
    Executor,
    Job,
    JobAttempt,
    JobPreference,
    JobStatus,
    JobTask,
    ServiceEnvironment,
    TaskState,
)
from scheduling.selectors.visibility import Viewer, visible_jobs


@dataclass(frozen=True)
class JobFilters:
    status: str | None = None
    job_queue_id: int | None = None
    share_id: int | None = None
    team_id: int | None = None
    submitted_by_id: int | None = None
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
    if filters.submitted_by_id:
        jobs = jobs.filter(submitted_by_id=filters.submitted_by_id)
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
    preference list, attempts and their tasks. 4 queries (rows, lists, attempts, tasks) however many jobs."""
    return Job.objects.select_related(
        "job_queue__service_environment",
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
        Prefetch("tasks", queryset=JobTask.objects.order_by("attempt", "rank", "id")),
    )


def jobs_for_user(*, user, sees_all: bool):
    """The jobs the API shows a user, in full: all when `sees_all` (staff, executors), else their teams'."""
    jobs = jobs_in_full()
    if sees_all:
        return jobs
    return jobs.filter(visible_jobs(user=user))


def job_for_viewer(*, viewer: Viewer, job_id: int) -> Job | None:
    """The job with its preference list, attempts and tasks, or None when the viewer may not see it. 4 queries."""
    jobs = jobs_in_full()
    if not viewer.is_staff:
        jobs = jobs.filter(team_id__in=viewer.team_ids)
    return jobs.filter(pk=job_id).first()


# An executor's poll older than this says nothing of whether it is still there.
OFFER_FRESH_SECONDS = 120


def job_untaken_reason(job: Job, *, now: datetime) -> str:
    """For a job placed on an external environment that no executor has taken (or started) yet: why, as far as
    its claimed tasks and the executors' last polls tell, and when its start deadline puts it back; "" for any
    other job. One query (the job's tasks come prefetched, `jobs_in_full`)."""
    if job.status != JobStatus.SCHEDULED or job.taken_at is not None or job.selected_instance_type is None:
        return ""
    environment = job.job_queue.service_environment
    if environment.executor != ServiceEnvironment.Executor.EXTERNAL:
        return ""
    type_name, count = job.selected_instance_type.name, job.selected_instance_count
    deadline = ""
    if job.scheduled_at is not None:
        until = job.scheduled_at + timedelta(seconds=environment.start_deadline_seconds)
        deadline = f"; if not started by {until:%H:%M:%S} UTC it goes back to the queue (START_TIMEOUT)"
    claims = [t for t in job.tasks.all() if t.attempt == job.attempt and t.state == TaskState.WAITING]
    gathering = ""
    if claims:
        held = sum(t.instances for t in claims)
        who = ", ".join(f"rank {t.rank} by {t.executor_name}" for t in claims)
        gathering = f"{held} of {count} instances claimed ({who}); nothing starts until all are: "
    offers = [
        offer
        for offer in executor_offers(environment=environment, now=now)
        if offer.instance_type in ("", type_name)
    ]
    if not offers:
        return (
            gathering
            + (
                f"no executor has asked environment {environment.name} for {type_name} work in the last "
                f"{OFFER_FRESH_SECONDS // 60} minutes: is its agent running?"
            )
            + deadline
        )
    if any(offer.gang_capable and offer.free for offer in offers):
        return gathering + "an executor taking tasks claims part of it at its next poll" + deadline
    slots = [offer.free for offer in offers]
    if all(free is not None for free in slots) and max(slots) < count - sum(t.instances for t in claims):
        most = max(slots)
        reason = (
            f"the executors asking for {type_name} work have at most {most} free slot{'s' if most != 1 else ''}"
            f" and it needs {count}: it waits for one with room"
        )
        whole = offers_text(offers, type_name=type_name, count=count)
        if "cannot start until" in whole:
            reason += f" ({whole})"
        return gathering + reason + deadline
    return gathering + "an executor asking for this work takes it at its next poll" + deadline


@dataclass(frozen=True)
class Offer:
    """What one executor's last poll said: the type it asks for ("" any), its free and total slots."""

    name: str
    instance_type: str
    free: int | None
    total: int | None
    gang_capable: bool


def executor_offers(*, environment: ServiceEnvironment, now: datetime) -> list[Offer]:
    """The environment's executors seen in the last OFFER_FRESH_SECONDS, with what they offer. One query."""
    return [
        Offer(*row)
        for row in Executor.objects.filter(
            service_environment=environment, last_seen_at__gte=now - timedelta(seconds=OFFER_FRESH_SECONDS)
        )
        .order_by("name")
        .values_list("name", "offered_instance_type", "offered_slots", "total_slots", "gang_capable")
    ]


def offers_text(offers: list[Offer], *, type_name: str, count: int) -> str:
    """What the executors polling for the type offer now, and whether they could ever hold `count` instances
    (executors that take tasks together, any other alone)."""
    offers = [offer for offer in offers if offer.instance_type in ("", type_name)]
    if not offers:
        return f"no executor has asked for {type_name} work in the last {OFFER_FRESH_SECONDS // 60} minutes"
    free = sum(offer.free or 0 for offer in offers)
    text = f"{len(offers)} executor(s) asking for {type_name} work offer {free} free slot(s)"
    if all(offer.total is not None for offer in offers):
        together = sum(offer.total for offer in offers if offer.gang_capable)
        alone = max((offer.total for offer in offers if not offer.gang_capable), default=0)
        most = max(together, alone)
        if count > most:
            text += (
                f"; it needs {count} instances but they can hold at most {most}: it cannot start until "
                "executors with more room come"
            )
    return text
