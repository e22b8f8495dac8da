"""Events as a viewer may read them: the log, its live tail, a job's events, the latest evictions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q

from scheduling.models import PREEMPTION_KINDS, Event, EventKind, Job
from scheduling.selectors.visibility import JobRef, Viewer, job_ref

JOB_LABEL = Job._meta.label  # a job's priority change is a CONFIG_CHANGED event of its team

_KIND_SUMMARIES = {
    EventKind.PREEMPTED_RECLAIM: "{other} reclaimed capacity lent to {share}, stopping a job on {amount}",
    EventKind.PREEMPTED_IN_SHARE: "a higher-priority job of {share} took the place of one on {amount}",
    EventKind.PREEMPTED_LIMIT_REDUCED: (
        "{share} was over a lowered capacity or limit: a job on {amount} stopped"
    ),
    EventKind.SUBMITTED: "a job of {share} was submitted",
    EventKind.ADMITTED: "a job of {share} was placed on {amount}",
    EventKind.BORROWED: "a job of {share} borrows {amount}",
    EventKind.FALLBACK: "a job of {share} fell back to a later preference entry",
    EventKind.PLAN_EXPIRING: "a job of {share} was drained from an expiring training plan",
    EventKind.STARTED: "a job of {share} started",
    EventKind.SUCCEEDED: "a job of {share} succeeded",
    EventKind.FAILED: "a job of {share} failed",
    EventKind.CANCELLED: "a job of {share} was cancelled",
    EventKind.ATTEMPT_TIMEOUT: "a job of {share} ran past its attempt duration",
    EventKind.CONFIG_CHANGED: "a job of {share} was changed",
}


@dataclass(frozen=True)
class EventRow:
    id: int
    kind: str
    created_at: datetime
    job_queue_id: int | None
    share_id: int | None
    share_name: str | None
    other_share_id: int | None
    other_share_name: str | None
    job: JobRef | None
    other_job: JobRef | None
    instance_type: str | None
    instances: int | None
    actor: str | None
    text: str  # the event's message, or a summary when it is about another team's job
    changes: dict | None = None  # a CONFIG_CHANGED event's {"before": ..., "after": ...}; None otherwise


def event_text(
    viewer: Viewer,
    *,
    team_id: int | None,
    kind: str,
    message: str,
    share_name: str | None,
    other_share_name: str | None,
    instances: int | None,
    instance_type: str | None,
) -> str:
    """The event's message for its team (and for a configuration event, which has none); for anyone else a
    summary from its structured fields, which names no job, user or reason."""
    if viewer.sees_team(team_id) or (team_id is None and kind == EventKind.CONFIG_CHANGED):
        return message
    amount = f"{instances} {instance_type}" if instances else "capacity"
    return _KIND_SUMMARIES.get(kind, "a job of {share}: {kind}").format(
        share=share_name or "a deleted share",
        other=other_share_name or "another share",
        amount=amount,
        kind=kind,
    )


def _event_rows(viewer: Viewer, events) -> list[EventRow]:
    rows = []
    for e in events:
        # A deleted share leaves its name on its jobs.
        share_name = e["quota_share__name"] or e["job__quota_share_name"]
        job = job_ref(
            viewer, job_id=e["job_id"], name=e["job__name"], team_id=e["team_id"], share_name=share_name
        )
        other_job = job_ref(
            viewer,
            job_id=e["other_job_id"],
            name=e["other_job__name"],
            team_id=e["other_job__team_id"],
            share_name=e["other_share__name"],
        )
        text = event_text(
            viewer,
            team_id=e["team_id"],
            kind=e["kind"],
            message=e["message"],
            share_name=share_name,
            other_share_name=e["other_share__name"],
            instances=e["instances"],
            instance_type=e["instance_type__name"],
        )
        rows.append(
            EventRow(
                id=e["id"],
                kind=e["kind"],
                created_at=e["created_at"],
                job_queue_id=e["job_queue_id"],
                share_id=e["quota_share_id"],
                share_name=share_name,
                other_share_id=e["other_share_id"],
                other_share_name=e["other_share__name"],
                job=job,
                other_job=other_job,
                instance_type=e["instance_type__name"],
                instances=e["instances"],
                actor=e["actor__username"],
                text=text,
                changes=_changes(e) if e["kind"] == EventKind.CONFIG_CHANGED else None,
            )
        )
    return rows


def _changes(e: dict) -> dict:
    data = e["data"] if isinstance(e["data"], dict) else {}
    return {"action": data.get("action"), "before": data.get("before"), "after": data.get("after")}


_EVENT_COLUMNS = (
    "id",
    "kind",
    "created_at",
    "job_queue_id",
    "quota_share_id",
    "quota_share__name",
    "other_share_id",
    "other_share__name",
    "team_id",
    "job_id",
    "job__name",
    "job__quota_share_name",
    "other_job_id",
    "other_job__name",
    "other_job__team_id",
    "instance_type__name",
    "instances",
    "actor__username",
    "message",
    "data",
)


def events_visible_to(viewer: Viewer) -> Q:
    """Staff: every event. Members: their teams' events, those where a job of theirs preempted, and the
    configuration events that belong to no team.

    Decided by the event's own team, which it keeps for good, never by its links to a job or share, which a
    deleted share or queue sets to NULL. A job event left without a team (its job deleted before events kept
    one) is read by staff only.
    """
    if viewer.is_staff:
        return Q()
    configuration = Q(team__isnull=True, kind=EventKind.CONFIG_CHANGED) & (
        Q(data__object__isnull=True) | ~Q(data__object=JOB_LABEL)
    )
    return Q(team_id__in=viewer.team_ids) | Q(other_job__team_id__in=viewer.team_ids) | configuration


def evictions(
    *, viewer: Viewer, job_queue_ids: list[int] | None = None, share_id: int | None = None, limit: int = 20
) -> list[EventRow]:
    """The latest PREEMPTED_* events of some queues, or those a share took part in (either side). 1 query.

    Every signed-in user sees who preempted whom and why at the level of shares; job names only of their
    teams.
    """
    events = Event.objects.filter(kind__in=PREEMPTION_KINDS)
    if job_queue_ids is not None:
        events = events.filter(job_queue_id__in=job_queue_ids)
    if share_id is not None:
        events = events.filter(Q(quota_share_id=share_id) | Q(other_share_id=share_id))
    return _event_rows(viewer, events.order_by("-created_at", "-id").values(*_EVENT_COLUMNS)[:limit])


@dataclass(frozen=True)
class EventFilters:
    kind: str | None = None
    job_queue_id: int | None = None
    share_id: int | None = None
    job_id: int | None = None


def event_log(
    *,
    viewer: Viewer,
    filters: EventFilters,
    after_id: int | None = None,
    before_id: int | None = None,
    limit: int = 50,
) -> list[EventRow]:
    """Events newest first; with `after_id`, only those newer than it (the live tail); with `before_id`, only
    older ones (the next page). 1 query."""
    events = Event.objects.filter(events_visible_to(viewer))
    if filters.kind:
        events = events.filter(kind=filters.kind)
    if filters.job_queue_id:
        events = events.filter(job_queue_id=filters.job_queue_id)
    if filters.share_id:
        events = events.filter(Q(quota_share_id=filters.share_id) | Q(other_share_id=filters.share_id))
    if filters.job_id:
        events = events.filter(Q(job_id=filters.job_id) | Q(other_job_id=filters.job_id))
    if after_id is not None:
        events = events.filter(id__gt=after_id)
    if before_id is not None:
        events = events.filter(id__lt=before_id)
    return _event_rows(viewer, events.order_by("-id").values(*_EVENT_COLUMNS)[:limit])


def job_events(*, viewer: Viewer, job_id: int, limit: int = 100) -> list[EventRow]:
    """Events about a job (as the job or the other side of a preemption), newest first. 1 query."""
    events = Event.objects.filter(Q(job_id=job_id) | Q(other_job_id=job_id)).order_by("-created_at", "-id")
    return _event_rows(viewer, events.values(*_EVENT_COLUMNS)[:limit])
