"""One share: its page (usage, loans, jobs, evictions), its usage history, its limits while edited."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F
from django.utils import timezone

from engine.preemption import protection_end
from scheduling import rules
from scheduling.models import (
    HOLDING_STATUSES,
    InstanceType,
    Job,
    JobQueue,
    JobStatus,
    QuotaShare,
    SchedulingPass,
    ShareUsageSample,
    pending_words_load,
)
from scheduling.selectors.events import EventRow, evictions
from scheduling.selectors.usage import QueueUsage, ShareSummary, queue_usage
from scheduling.selectors.visibility import Viewer

# The share page's chart windows: name -> (label, length).
CHART_WINDOWS = {
    "hour": ("last hour", timedelta(hours=1)),
    "day": ("last day", timedelta(days=1)),
    "week": ("last week", timedelta(days=7)),
}


@dataclass(frozen=True)
class UsagePoint:
    taken_at: datetime
    limit: int
    usage: int
    borrowed: int
    lent: int
    pending: int


def share_usage_history(*, share_id: int, since: datetime) -> dict[str, list[UsagePoint]]:
    """instance type name -> the share's samples since `since`, oldest first. 1 query."""
    history: dict[str, list[UsagePoint]] = {}
    rows = (
        ShareUsageSample.objects.filter(quota_share_id=share_id, taken_at__gte=since)
        .order_by("taken_at", "id")
        .values_list("instance_type__name", "taken_at", "limit", "usage", "borrowed", "lent", "pending")
    )
    for type_name, *values in rows:
        history.setdefault(type_name, []).append(UsagePoint(*values))
    return history


@dataclass
class ShareDetail:
    share: QuotaShare
    summary: ShareSummary
    usage: QueueUsage
    sees_jobs: bool
    running: list[Job]  # empty unless sees_jobs
    pending: list[Job]  # empty unless sees_jobs
    running_count: int
    evictions: list[EventRow]
    last_pass: SchedulingPass | None


def share_detail(*, viewer: Viewer, share: QuotaShare, job_limit: int = 100) -> ShareDetail:
    """A share's usage, loans, evictions, and (for its team and staff) its pending and running jobs, each
    running one with `protected_until` (when its protection from early preemption ends, or None).

    6 (queue_usage) + 3 queries, plus 2 when the viewer sees the share's jobs.
    """
    usage = queue_usage(job_queue=share.job_queue)
    summary = usage.share(share.name)
    sees_jobs = viewer.sees_team(share.team_id)
    running: list[Job] = []
    pending: list[Job] = []
    placed = Job.objects.filter(quota_share=share, status__in=HOLDING_STATUSES)
    if sees_jobs:
        # Filtered by the job's own team, not the share's: a job stays the team's that submitted it, even in
        # a share moved before moving was refused while it had unfinished jobs.
        own = Job.objects.filter(quota_share=share)
        if not viewer.is_staff:
            own = own.filter(team_id__in=viewer.team_ids)
        running = list(
            own.filter(status__in=HOLDING_STATUSES)
            .select_related("selected_instance_type", "selected_training_plan", "submitted_by")
            .defer("payload")
            .order_by("-scheduled_at", "-id")[:job_limit]
        )
        now = timezone.now()
        minimum = share.job_queue.preemption_min_runtime_seconds
        for job in running:
            # A stopping job is on its way out; protection only keeps a running one from being chosen.
            job.protected_until = (
                None
                if job.status == JobStatus.STOPPING
                else protection_end(scheduled_at=job.scheduled_at, min_runtime_seconds=minimum, now=now)
            )
        pending = list(
            own.filter(status=JobStatus.RUNNABLE)
            .select_related("submitted_by", "pending")
            .defer("payload")
            .order_by(
                F("pending__queue_position").asc(nulls_last=True), "-scheduling_priority", "created_at", "id"
            )[:job_limit]
        )
        pending_words_load(pending)  # their reasons, worded in one query
    running_count = placed.count()
    last_pass = (
        SchedulingPass.objects.filter(job_queue_id=share.job_queue_id).order_by("-started_at", "-id").first()
    )
    return ShareDetail(
        share=share,
        summary=summary,
        usage=usage,
        sees_jobs=sees_jobs,
        running=running,
        pending=pending,
        running_count=running_count,
        evictions=evictions(viewer=viewer, share_id=share.pk, limit=20),
        last_pass=last_pass,
    )


@dataclass(frozen=True)
class LimitSum:
    """One instance type while a share's limits are edited: what the others hold, this share, the capacity."""

    instance_type: str
    capacity: int | None  # None: the environment offers none
    others: int
    proposed: int

    @property
    def total(self) -> int:
        return self.others + self.proposed

    @property
    def left(self) -> int:
        return max(0, (self.capacity or 0) - self.others)

    @property
    def over(self) -> bool:
        return self.proposed > 0 and (self.capacity is None or self.total > self.capacity)

    @property
    def over_by(self) -> int:
        return self.proposed if self.capacity is None else max(0, self.total - self.capacity)


def share_limit_sums(
    *, job_queue: JobQueue, share_id: int | None, proposed: dict[int, int]
) -> list[LimitSum]:
    """Per instance type of the environment (and any proposed): others' limits + proposed against capacity.

    3 queries.
    """
    capacity = rules.environment_capacity(job_queue)
    others = rules.share_limit_sums(job_queue, exclude_share_id=share_id)
    type_ids = sorted(set(capacity) | {t for t, n in proposed.items() if n} | set(others))
    names = dict(InstanceType.objects.filter(pk__in=type_ids).values_list("id", "name"))
    return sorted(
        (
            LimitSum(
                instance_type=names[t],
                capacity=capacity.get(t),
                others=others.get(t, 0),
                proposed=proposed.get(t, 0),
            )
            for t in type_ids
            if t in names
        ),
        key=lambda row: row.instance_type,
    )
