"""Reads that pages, the API and /metrics share, each with a fixed number of queries."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Count, Q, Sum
from django.utils import timezone

from engine import accounting
from scheduling.models import (
    PLACED_STATUSES,
    EnvironmentCapacity,
    InstanceType,
    Job,
    JobQueue,
    JobStatus,
    QuotaShare,
    ShareCapacityLimit,
    TrainingPlan,
)


@dataclass
class ShareSummary:
    id: int
    name: str
    team_id: int
    strategy: str
    state: str
    borrow_limit: int
    in_share_preemption: bool
    pending: int = 0
    rows: list[accounting.ShareTypeUsage] = field(default_factory=list)
    borrows_from: list[tuple[str, str, int]] = field(default_factory=list)  # (lender name, type, instances)
    lends_to: list[tuple[str, str, int]] = field(default_factory=list)  # (borrower name, type, instances)

    @property
    def usage(self) -> int:
        return sum(row.usage for row in self.rows)

    @property
    def limit(self) -> int:
        return sum(row.limit for row in self.rows)

    @property
    def borrowed(self) -> int:
        return sum(row.borrowed for row in self.rows)

    @property
    def lent(self) -> int:
        return sum(row.lent for row in self.rows)


@dataclass
class QueueUsage:
    job_queue: JobQueue
    shares: list[ShareSummary]
    types: list[accounting.TypeUsage]
    loans: list[accounting.Loan]
    plans: list[dict]

    def share(self, name: str) -> ShareSummary:
        return next(share for share in self.shares if share.name == name)


FREE_POOL_LABEL = "free pool"


def queue_usage(*, job_queue: JobQueue) -> QueueUsage:
    """Per share and type: limit, usage, borrowed, lent, idle; loans; per type totals; plans. 7 queries."""
    type_names = dict(InstanceType.objects.values_list("id", "name"))
    capacity = {
        type_names[t]: n for t, n in EnvironmentCapacity.objects.filter(
            service_environment_id=job_queue.service_environment_id).values_list("instance_type_id", "max_capacity")
    }
    shares = {
        row["id"]: ShareSummary(**row) for row in QuotaShare.objects.filter(job_queue=job_queue).values(
            "id", "name", "team_id", "strategy", "state", "borrow_limit", "in_share_preemption").order_by("name")
    }
    limits: dict[int, dict[str, int]] = {share_id: {} for share_id in shares}
    for share_id, type_id, maximum in ShareCapacityLimit.objects.filter(
        quota_share__job_queue=job_queue
    ).values_list("quota_share_id", "instance_type_id", "max_capacity"):
        limits[share_id][type_names[type_id]] = maximum
    usage: dict[tuple[int, str], int] = {}
    plan_use: dict[int, int] = {}
    for row in (
        Job.objects.filter(job_queue=job_queue, status__in=PLACED_STATUSES)
        .values("quota_share_id", "selected_instance_type_id", "selected_training_plan_id")
        .annotate(instances=Sum("selected_instance_count"))
        .order_by()
    ):
        if row["selected_training_plan_id"]:
            plan_id = row["selected_training_plan_id"]
            plan_use[plan_id] = plan_use.get(plan_id, 0) + row["instances"]
        else:
            key = (row["quota_share_id"], type_names[row["selected_instance_type_id"]])
            usage[key] = usage.get(key, 0) + row["instances"]
    for share_id, pending in (
        Job.objects.filter(job_queue=job_queue, status=JobStatus.RUNNABLE)
        .values_list("quota_share_id").annotate(n=Count("id")).order_by()
    ):
        if share_id in shares:
            shares[share_id].pending = pending
    rows, loans, types = accounting.share_usage(
        capacity=capacity, limits=limits, strategies={s.id: s.strategy for s in shares.values()}, usage=usage)
    for row in rows:
        if row.share_id in shares:
            shares[row.share_id].rows.append(row)
    for loan in loans:
        lender = shares[loan.lender_id].name if loan.lender_id in shares else FREE_POOL_LABEL
        borrower = shares.get(loan.borrower_id)
        if borrower is not None:
            borrower.borrows_from.append((lender, loan.instance_type, loan.instances))
        if loan.lender_id in shares and borrower is not None:
            shares[loan.lender_id].lends_to.append((borrower.name, loan.instance_type, loan.instances))
    now = timezone.now()
    plans = [
        {"id": plan.pk, "name": plan.name, "instance_type": type_names[plan.instance_type_id],
         "instance_count": plan.instance_count, "start_time": plan.start_time, "end_time": plan.end_time,
         "status": plan.status_at(now), "in_use_instance_count": plan_use.get(plan.pk, 0),
         "available_instance_count": max(0, plan.instance_count - plan_use.get(plan.pk, 0))
         if plan.status_at(now) == TrainingPlan.Status.ACTIVE else 0}
        for plan in TrainingPlan.objects.filter(job_queue=job_queue).order_by("start_time", "name")
    ]
    return QueueUsage(job_queue=job_queue, shares=list(shares.values()), types=types, loans=loans, plans=plans)


def plan_in_use(*, plan_ids: list[int]) -> dict[int, int]:
    """training plan id -> instances held on it by placed jobs. 1 query."""
    return dict(
        Job.objects.filter(selected_training_plan_id__in=plan_ids, status__in=PLACED_STATUSES)
        .values_list("selected_training_plan_id").annotate(n=Sum("selected_instance_count")).order_by()
    )


def visible_jobs(*, user) -> Q:
    """Jobs a user may see in full: staff all, others their teams' jobs."""
    if user.is_staff:
        return Q()
    return Q(team__memberships__user=user)


# --- pages ---
#
# What the server-rendered pages read. Visibility is decided here, not in templates: a member sees their
# teams' jobs in full and every other team's only in aggregate, so a `JobRef` of another team carries no name,
# and an event about another team's job carries a summary built from its structured fields, not its message.

from datetime import datetime, timedelta  # noqa: E402

from django.db.models import F, Min, OuterRef, Prefetch, Subquery  # noqa: E402

from scheduling import rules  # noqa: E402
from scheduling.models import (  # noqa: E402
    PREEMPTION_KINDS,
    Event,
    EventKind,
    JobAttempt,
    JobPreference,
    Membership,
    SchedulingPass,
    ServiceEnvironment,
    ShareUsageSample,
    Team,
)


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


def _job_ref(viewer: Viewer, *, job_id, name, team_id, share_name) -> JobRef | None:
    if job_id is None:
        return None
    return JobRef(id=job_id, name=name if viewer.sees_team(team_id) else None, share_name=share_name or "?")


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

    @property
    def is_preemption(self) -> bool:
        return self.kind in PREEMPTION_KINDS


def _event_rows(viewer: Viewer, events) -> list[EventRow]:
    rows = []
    for e in events:
        share_name = e["quota_share__name"]
        job = _job_ref(viewer, job_id=e["job_id"], name=e["job__name"], team_id=e["job__team_id"],
                       share_name=share_name)
        other_job = _job_ref(viewer, job_id=e["other_job_id"], name=e["other_job__name"],
                             team_id=e["other_job__team_id"], share_name=e["other_share__name"])
        if job is None or job.visible:
            text = e["message"]
        else:
            amount = f"{e['instances']} {e['instance_type__name']}" if e["instances"] else "capacity"
            text = _KIND_SUMMARIES.get(e["kind"], "a job of {share}: {kind}").format(
                share=share_name, other=e["other_share__name"] or "another share", amount=amount,
                kind=e["kind"])
        rows.append(EventRow(
            id=e["id"], kind=e["kind"], created_at=e["created_at"], job_queue_id=e["job_queue_id"],
            share_id=e["quota_share_id"], share_name=share_name, other_share_id=e["other_share_id"],
            other_share_name=e["other_share__name"], job=job, other_job=other_job,
            instance_type=e["instance_type__name"], instances=e["instances"], actor=e["actor__username"],
            text=text,
        ))
    return rows


_EVENT_COLUMNS = (
    "id", "kind", "created_at", "job_queue_id", "quota_share_id", "quota_share__name", "other_share_id",
    "other_share__name", "job_id", "job__name", "job__team_id", "other_job_id", "other_job__name",
    "other_job__team_id", "instance_type__name", "instances", "actor__username", "message",
)


def _events_visible_to(viewer: Viewer) -> Q:
    """Staff: every event. Members: configuration and queue events, and those naming a job of their teams."""
    if viewer.is_staff:
        return Q()
    return (Q(job__isnull=True) | Q(job__team_id__in=viewer.team_ids)
            | Q(other_job__team_id__in=viewer.team_ids))


def evictions(*, viewer: Viewer, job_queue_ids: list[int] | None = None, share_id: int | None = None,
              limit: int = 20) -> list[EventRow]:
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


def event_log(*, viewer: Viewer, filters: EventFilters, after_id: int | None = None,
              before_id: int | None = None, limit: int = 50) -> list[EventRow]:
    """Events newest first; with `after_id`, only those newer than it (the live tail); with `before_id`, only
    older ones (the next page). 1 query."""
    events = Event.objects.filter(_events_visible_to(viewer))
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


@dataclass
class ShareCard:
    """One share on the overview: its usage rows and loans (from `queue_usage`), and why it waits."""

    summary: ShareSummary
    team_name: str
    mine: bool
    oldest_pending_since: datetime | None = None
    head_job: JobRef | None = None
    head_reason: str | None = None  # the first pending job's reason, for those who see the team's jobs
    evictions: list[EventRow] = field(default_factory=list)

    condition: str = "ok"  # ok | waiting | backlog | starved: see `share_condition`

    @property
    def waiting(self) -> bool:
        return self.summary.pending > 0


def share_condition(*, pending: int, oldest_pending_since: datetime | None, owed: bool,
                    long_wait_since: datetime) -> str:
    """At a glance: `starved` = jobs waiting long while the share holds less than its limit of a type they
    want (owed capacity it does not get); `backlog` = waiting long, but full on what they want; `waiting`;
    `ok`."""
    if not pending:
        return "ok"
    if oldest_pending_since is None or oldest_pending_since >= long_wait_since:
        return "waiting"
    return "starved" if owed else "backlog"


def _owed(share: ShareSummary, wanted: set[str]) -> bool:
    """Some instance type the share's pending jobs list is below the share's limit for it."""
    return any(row.usage < row.limit for row in share.rows if row.instance_type in wanted)


@dataclass
class QueueOverview:
    job_queue: JobQueue
    usage: QueueUsage
    cards: list[ShareCard]
    last_pass: SchedulingPass | None
    evictions: list[EventRow]


def _pending_heads(
    job_queue_ids: list[int],
) -> tuple[dict[int, datetime], dict[int, dict], dict[int, set[str]]]:
    """Per share: when its oldest pending job became RUNNABLE, its first pending job, and the instance types
    its pending jobs list on-demand. 3 queries, each bounded by shares x types, not by jobs returned."""
    runnable = Job.objects.filter(job_queue_id__in=job_queue_ids, status=JobStatus.RUNNABLE)
    oldest = dict(runnable.values_list("quota_share_id").annotate(since=Min("runnable_since")).order_by())
    heads = {
        row["quota_share_id"]: row
        for row in runnable.filter(pending__queue_position=1).order_by("quota_share_id", "id").values(
            "id", "name", "team_id", "quota_share_id", "quota_share__name", "pending__status_reason")
    }
    wanted: dict[int, set[str]] = {}
    for share_id, type_name in (
        JobPreference.objects.filter(job__job_queue_id__in=job_queue_ids, job__status=JobStatus.RUNNABLE,
                                     training_plan__isnull=True)
        .values_list("job__quota_share_id", "instance_type__name").distinct().order_by()
    ):
        wanted.setdefault(share_id, set()).add(type_name)
    return oldest, heads, wanted


def overview(*, viewer: Viewer, long_wait_since: datetime, eviction_limit: int = 8) -> list[QueueOverview]:
    """Every queue: capacity per type, share cards, last pass, last evictions. 7 + 7 per queue queries.

    The count does not grow with jobs, events or passes: aggregates, and index-backed reads of the latest
    rows.
    """
    last_pass = SchedulingPass.objects.filter(job_queue=OuterRef("pk")).order_by("-started_at", "-id")
    queues = list(JobQueue.objects.select_related("service_environment")
                  .annotate(last_pass_id=Subquery(last_pass.values("id")[:1])).order_by("-priority", "name"))
    if not queues:
        return []
    queue_ids = [queue.pk for queue in queues]
    passes = SchedulingPass.objects.in_bulk([queue.last_pass_id for queue in queues if queue.last_pass_id])
    team_names = dict(Team.objects.values_list("id", "name"))
    oldest, heads, wanted = _pending_heads(queue_ids)
    recent = evictions(viewer=viewer, job_queue_ids=queue_ids, limit=eviction_limit * len(queues))
    result = []
    for queue in queues:
        usage = queue_usage(job_queue=queue)
        cards = []
        for share in usage.shares:
            card = ShareCard(summary=share, team_name=team_names.get(share.team_id, "?"),
                             mine=share.team_id in viewer.team_ids, oldest_pending_since=oldest.get(share.id))
            card.condition = share_condition(
                pending=share.pending, oldest_pending_since=card.oldest_pending_since,
                owed=_owed(share, wanted.get(share.id, set())), long_wait_since=long_wait_since)
            head = heads.get(share.id)
            if head is not None and viewer.sees_team(head["team_id"]):
                card.head_job = _job_ref(viewer, job_id=head["id"], name=head["name"],
                                         team_id=head["team_id"], share_name=head["quota_share__name"])
                card.head_reason = head["pending__status_reason"]
            card.evictions = [e for e in recent if e.share_id == share.id][:3]
            cards.append(card)
        result.append(QueueOverview(
            job_queue=queue, usage=usage, cards=cards, last_pass=passes.get(queue.last_pass_id),
            evictions=[e for e in recent if e.job_queue_id == queue.pk][:eviction_limit],
        ))
    return result


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
    rows = (ShareUsageSample.objects.filter(quota_share_id=share_id, taken_at__gte=since)
            .order_by("taken_at", "id")
            .values_list("instance_type__name", "taken_at", "limit", "usage", "borrowed", "lent", "pending"))
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
    """A share's usage, loans, evictions, and (for its team and staff) its pending and running jobs.

    6 (queue_usage) + 3 queries, plus 2 when the viewer sees the share's jobs.
    """
    usage = queue_usage(job_queue=share.job_queue)
    summary = usage.share(share.name)
    sees_jobs = viewer.sees_team(share.team_id)
    running: list[Job] = []
    pending: list[Job] = []
    placed = Job.objects.filter(quota_share=share, status__in=PLACED_STATUSES)
    if sees_jobs:
        running = list(
            placed.select_related("selected_instance_type", "selected_training_plan", "submitted_by")
            .defer("payload").order_by("-scheduled_at", "-id")[:job_limit])
        pending = list(Job.objects.filter(quota_share=share, status=JobStatus.RUNNABLE)
                       .select_related("submitted_by", "pending").defer("payload")
                       .order_by(F("pending__queue_position").asc(nulls_last=True), "-scheduling_priority",
                                 "created_at", "id")
                       [:job_limit])
    running_count = placed.count()
    last_pass = (SchedulingPass.objects.filter(job_queue_id=share.job_queue_id)
                 .order_by("-started_at", "-id").first())
    return ShareDetail(share=share, summary=summary, usage=usage, sees_jobs=sees_jobs, running=running,
                       pending=pending, running_count=running_count,
                       evictions=evictions(viewer=viewer, share_id=share.pk, limit=20), last_pass=last_pass)


@dataclass(frozen=True)
class JobFilters:
    status: str | None = None
    job_queue_id: int | None = None
    share_id: int | None = None
    team_id: int | None = None


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
    return (jobs.select_related("job_queue", "quota_share", "team", "selected_instance_type", "submitted_by",
                                "pending")
            .defer("payload", "job_queue__service_environment_id").order_by("-created_at", "-id"))


def job_for_viewer(*, viewer: Viewer, job_id: int) -> Job | None:
    """The job with its preference list and attempts, or None when the viewer may not see it. 3 queries."""
    jobs = Job.objects.select_related(
        "job_queue", "quota_share", "team", "submitted_by", "selected_instance_type",
        "selected_training_plan", "pending",
    ).prefetch_related(
        Prefetch("instance_preferences",
                 queryset=JobPreference.objects.select_related("instance_type", "training_plan")),
        Prefetch("attempts", queryset=JobAttempt.objects.select_related("instance_type", "training_plan")),
    )
    if not viewer.is_staff:
        jobs = jobs.filter(team_id__in=viewer.team_ids)
    return jobs.filter(pk=job_id).first()


def job_events(*, viewer: Viewer, job_id: int, limit: int = 100) -> list[EventRow]:
    """Events about a job (as the job or the other side of a preemption), newest first. 1 query."""
    events = Event.objects.filter(Q(job_id=job_id) | Q(other_job_id=job_id)).order_by("-created_at", "-id")
    return _event_rows(viewer, events.values(*_EVENT_COLUMNS)[:limit])


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


def share_limit_sums(*, job_queue: JobQueue, share_id: int | None,
                     proposed: dict[int, int]) -> list[LimitSum]:
    """Per instance type of the environment (and any proposed): others' limits + proposed against capacity.

    3 queries.
    """
    capacity = rules.environment_capacity(job_queue)
    others = rules.share_limit_sums(job_queue, exclude_share_id=share_id)
    type_ids = sorted(set(capacity) | {t for t, n in proposed.items() if n} | set(others))
    names = dict(InstanceType.objects.filter(pk__in=type_ids).values_list("id", "name"))
    return sorted(
        (LimitSum(instance_type=names[t], capacity=capacity.get(t), others=others.get(t, 0),
                  proposed=proposed.get(t, 0)) for t in type_ids if t in names),
        key=lambda row: row.instance_type,
    )


def queues_for_admin():
    """Queues with their environment and share count. 1 query."""
    return (JobQueue.objects.select_related("service_environment")
            .annotate(share_count=Count("quota_shares", distinct=True)).order_by("-priority", "name"))


def environments_for_admin():
    """Environments with their capacities and queue. 2 queries."""
    return (ServiceEnvironment.objects.select_related("job_queue")
            .prefetch_related(Prefetch("capacity_limits",
                                       queryset=EnvironmentCapacity.objects.select_related("instance_type")))
            .order_by("name"))


def shares_for_admin():
    """Shares with queue, team and limits. 2 queries."""
    return (QuotaShare.objects.select_related("job_queue", "team")
            .prefetch_related(Prefetch("capacity_limits",
                                       queryset=ShareCapacityLimit.objects.select_related("instance_type")))
            .order_by("job_queue__name", "name"))


@dataclass(frozen=True)
class PlanBar:
    plan: TrainingPlan
    status: str
    in_use: int
    x: float  # start, percent of the timeline
    width: float  # percent of the timeline


@dataclass(frozen=True)
class PlanTimeline:
    start: datetime
    end: datetime
    now_x: float
    bars: list[PlanBar]
    ticks: list[tuple[float, datetime]]


def plan_timeline(*, now: datetime, past: timedelta = timedelta(days=7),
                  future: timedelta = timedelta(days=60)) -> PlanTimeline:
    """Training plans as bars on a time axis around now (current ones, and those ended within `past`).

    3 queries.
    """
    plans = list(TrainingPlan.objects.filter(end_time__gte=now - past)
                 .select_related("job_queue", "instance_type").prefetch_related("quota_shares")
                 .order_by("job_queue__name", "start_time", "name"))
    in_use = plan_in_use(plan_ids=[plan.pk for plan in plans])
    start = min([now - timedelta(days=1)] + [plan.start_time for plan in plans])
    start = max(start, now - past)
    end = max([now + timedelta(days=7)] + [min(plan.end_time, now + future) for plan in plans])
    span = (end - start).total_seconds()

    def x_of(moment: datetime) -> float:
        return round(100 * min(max((moment - start).total_seconds(), 0), span) / span, 3)

    bars = [PlanBar(plan=plan, status=plan.status_at(now), in_use=in_use.get(plan.pk, 0),
                    x=x_of(plan.start_time), width=max(0.3, x_of(plan.end_time) - x_of(plan.start_time)))
            for plan in plans]
    days = max(1, round(span / 86400 / 6))
    first = start.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    ticks = []
    moment = first
    while moment < end:
        if abs(x_of(moment) - x_of(now)) > 4:  # leave room for the "now" label
            ticks.append((x_of(moment), moment))
        moment += timedelta(days=days)
    return PlanTimeline(start=start, end=end, now_x=x_of(now), bars=bars, ticks=ticks)
