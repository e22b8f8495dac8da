"""What the notification scan and pages read: new events worth a notification, starved shares, silent
executors, whom each may reach, and subscriptions with their delivery log. Each says its query budget."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, Min, Q

from notifications.models import Delivery, Subscription, Trigger
from scheduling.models import (
    PREEMPTION_KINDS,
    Event,
    EventKind,
    Executor,
    Job,
    JobStatus,
    Membership,
    QuotaShare,
    ServiceEnvironment,
    State,
    Team,
)
from scheduling.selectors.visibility import Viewer

# Kinds another part of the product records by name (budgets, attempt timeouts, lost tasks of a job on several
# hosts): matched as text, so they notify from the day they are written.
BUDGET_WARNING, BUDGET_EXHAUSTED = "BUDGET_WARNING", "BUDGET_EXHAUSTED"
ATTEMPT_TIMEOUT, TASK_LOST = "ATTEMPT_TIMEOUT", "TASK_LOST"
TIMEOUT_CODES = ("PENDING_TIMEOUT", ATTEMPT_TIMEOUT)

EVENT_KINDS = (
    EventKind.FAILED,
    *PREEMPTION_KINDS,
    EventKind.EXECUTOR_LOST,
    TASK_LOST,
    ATTEMPT_TIMEOUT,
    BUDGET_WARNING,
    BUDGET_EXHAUSTED,
)
# An event commits at most this long after its `created_at`: the writer's transaction cannot outlive the
# hard time limit of the task that runs it (a pass: 180 s). The scan reads this far back again, so an event
# whose id was taken before a later one's but committed after it is not skipped.
LATE_COMMIT_SECONDS = 240


def event_triggers(kind: str, message: str) -> frozenset[str]:
    """The triggers an event fires: a failure by timeout is both a failure and a timeout."""
    if kind == EventKind.FAILED:
        if any(code in message for code in TIMEOUT_CODES):
            return frozenset({Trigger.JOB_FAILED, Trigger.JOB_TIMED_OUT})
        return frozenset({Trigger.JOB_FAILED})
    if kind in PREEMPTION_KINDS:
        return frozenset({Trigger.JOB_PREEMPTED})
    if kind in (EventKind.EXECUTOR_LOST, TASK_LOST):
        return frozenset({Trigger.JOB_EXECUTOR_LOST})
    if kind == ATTEMPT_TIMEOUT:
        return frozenset({Trigger.JOB_TIMED_OUT})
    if kind == BUDGET_WARNING:
        return frozenset({Trigger.BUDGET_WARNING})
    if kind == BUDGET_EXHAUSTED:
        return frozenset({Trigger.BUDGET_EXHAUSTED})
    return frozenset()


@dataclass(frozen=True)
class Listener:
    """A subscription as the scan matches it, with who its owner may see now."""

    subscription: Subscription
    viewer: Viewer
    triggers: frozenset[str]

    def hears(self, trigger: str) -> bool:
        return trigger in self.triggers

    def may_know_team(self, team_id: int | None) -> bool:
        """Visibility: a team subscription hears only its team, and only while its owner belongs to it (or
        is staff); a personal one hears the teams its owner sees. Nothing without a team reaches a member."""
        sub = self.subscription
        if sub.team_id is not None:
            return team_id == sub.team_id and self.viewer.sees_team(team_id)
        if team_id is None:
            return self.viewer.is_staff
        return self.viewer.sees_team(team_id)

    def wants_job(self, *, team_id: int | None, submitted_by_id: int | None) -> bool:
        if not self.may_know_team(team_id):
            return False
        return not self.subscription.only_my_jobs or submitted_by_id == self.subscription.owner_id


def listeners() -> list[Listener]:
    """Every subscription with its owner's current teams. 2 queries."""
    subscriptions = list(Subscription.objects.select_related("owner").order_by("pk"))
    teams: dict[int, set[int]] = {}
    for user_id, team_id in Membership.objects.filter(
        user_id__in={s.owner_id for s in subscriptions}
    ).values_list("user_id", "team_id"):
        teams.setdefault(user_id, set()).add(team_id)
    result = []
    for sub in subscriptions:
        if not sub.owner.is_active:
            continue
        viewer = Viewer(
            user_id=sub.owner_id, is_staff=sub.owner.is_staff, team_ids=frozenset(teams.get(sub.owner_id, ()))
        )
        result.append(Listener(subscription=sub, viewer=viewer, triggers=frozenset(sub.triggers)))
    return result


EVENT_FIELDS = (
    "id",
    "kind",
    "message",
    "created_at",
    "team_id",
    "team__slug",
    "job_id",
    "job__name",
    "job__status",
    "job__submitted_by_id",
    "job__job_queue_name",
    "job__quota_share_name",
    "job__attempt",
    "quota_share_id",
    "quota_share__name",
    "quota_share__team_id",
    "quota_share__job_queue__name",
    "instance_type__name",
    "instances",
)


def events_after(*, after_id: int, limit: int) -> list[dict]:
    """Events that may notify with ids above `after_id`, oldest first, at most `limit`. 1 query (the
    (kind, id) index)."""
    return list(
        Event.objects.filter(kind__in=EVENT_KINDS, id__gt=after_id)
        .order_by("id")
        .values(*EVENT_FIELDS)[:limit]
    )


def events_late(*, up_to_id: int, since: datetime, limit: int) -> list[dict]:
    """Events that may notify with ids up to `up_to_id` written since `since`: those that committed after
    the cursor passed their id. The newest `limit` of them (a late commit's id lies just below ids read
    already), oldest first. 1 query."""
    rows = list(
        Event.objects.filter(kind__in=EVENT_KINDS, id__lte=up_to_id, created_at__gte=since)
        .order_by("-id")
        .values(*EVENT_FIELDS)[:limit]
    )
    return rows[::-1]


@dataclass(frozen=True)
class Starvation:
    """A share whose jobs have waited, none placed, since `since`."""

    share_id: int
    share_name: str
    queue_name: str
    team_id: int
    team_slug: str
    waiting: int
    oldest_waiting_since: datetime
    last_placed_at: datetime | None

    @property
    def since(self) -> datetime:
        return max(self.oldest_waiting_since, self.last_placed_at or self.oldest_waiting_since)


def starved_shares(*, now: datetime, longer_than: timedelta) -> list[Starvation]:
    """Enabled shares of enabled queues that have had RUNNABLE jobs, and placed none, for longer than
    `longer_than`. 2 queries, and 1 per share whose oldest job has waited that long (its last placement,
    read backwards on the events' (share, created_at) index)."""
    shares = {
        share.pk: share
        for share in QuotaShare.objects.filter(
            state=State.ENABLED, job_queue__state=State.ENABLED
        ).select_related("job_queue", "team")
    }
    if not shares:
        return []
    threshold = now - longer_than
    waiting = (
        Job.objects.filter(quota_share_id__in=list(shares), status=JobStatus.RUNNABLE)
        .values("quota_share_id")
        .annotate(oldest=Min("runnable_since"), count=Count("id"))
        .filter(oldest__lt=threshold)
        .order_by("quota_share_id")
    )
    result = []
    for row in waiting:
        share = shares[row["quota_share_id"]]
        last = (
            Event.objects.filter(
                quota_share_id=share.pk, created_at__gte=row["oldest"], kind=EventKind.ADMITTED
            )
            .order_by("-created_at")
            .values_list("created_at", flat=True)
            .first()
        )
        starvation = Starvation(
            share_id=share.pk,
            share_name=share.name,
            queue_name=share.job_queue.name,
            team_id=share.team_id,
            team_slug=share.team.slug,
            waiting=row["count"],
            oldest_waiting_since=row["oldest"],
            last_placed_at=last,
        )
        if starvation.since < threshold:
            result.append(starvation)
    return result


@dataclass(frozen=True)
class Silence:
    executor_id: int
    name: str
    host: str
    environment_name: str
    last_seen_at: datetime


def silent_executors(*, now: datetime, longer_than: timedelta) -> list[Silence]:
    """Executors of enabled external environments not seen for longer than `longer_than`, but seen within
    NOTIFY_EXECUTOR_RETIRED_HOURS (older ones are taken as retired). 1 query."""
    retired_before = now - timedelta(hours=settings.NOTIFY_EXECUTOR_RETIRED_HOURS)
    rows = Executor.objects.filter(
        service_environment__state=State.ENABLED,
        service_environment__executor=ServiceEnvironment.Executor.EXTERNAL,
        last_seen_at__lt=now - longer_than,
        last_seen_at__gte=retired_before,
    ).values_list("id", "name", "host", "service_environment__name", "last_seen_at")
    return [Silence(*row) for row in rows.order_by("id")]


def shortest_wait(listening: list[Listener], trigger: str) -> timedelta | None:
    """The smallest `after_minutes` among subscriptions to a condition trigger (None: nobody listens)."""
    minutes = [lst.subscription.after_minutes for lst in listening if lst.hears(trigger)]
    return timedelta(minutes=min(minutes)) if minutes else None


# --- pages -------------------------------------------------------------------------------------------------


def subscriptions_of(*, user) -> list[Subscription]:
    """A user's subscriptions, personal and team ones they made, with each one's last deliveries counted.
    1 query."""
    return list(
        Subscription.objects.filter(owner=user)
        .select_related("team")
        .annotate(
            sent=Count("deliveries", filter=Q(deliveries__status="SENT")),
            failed=Count("deliveries", filter=Q(deliveries__status="FAILED")),
        )
        .order_by("name", "id")
    )


def subscription_of(*, user, subscription_id: int) -> Subscription | None:
    """One of the user's own subscriptions (another's is None: not found). 1 query."""
    return Subscription.objects.select_related("team").filter(owner=user, pk=subscription_id).first()


def delivery_log(*, subscription: Subscription, limit: int = 50) -> list[Delivery]:
    """The subscription's latest deliveries, newest first. 1 query."""
    return list(subscription.deliveries.order_by("-created_at", "-id")[:limit])


def managed_teams(*, user) -> list[Team]:
    """Teams the user may make team subscriptions for: those they manage (staff: every team). 1 query."""
    if user.is_staff:
        return list(Team.objects.order_by("name"))
    return list(Team.objects.filter(memberships__user=user, memberships__role="manager").order_by("name"))
