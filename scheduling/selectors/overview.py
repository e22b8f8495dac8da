"""The overview page: every queue's capacity, share cards (and why they wait), last pass, evictions."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Min, OuterRef, Subquery
from django.utils import timezone

from scheduling.models import (
    Job,
    JobPreference,
    JobQueue,
    JobStatus,
    QuotaShare,
    SchedulingPass,
    Team,
    pending_words,
)
from scheduling.selectors.budgets import BudgetReading, share_budgets
from scheduling.selectors.events import EventRow, evictions
from scheduling.selectors.usage import QueueUsage, ShareSummary, queue_usage
from scheduling.selectors.visibility import JobRef, Viewer, job_ref


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
    budget: BudgetReading | None = None

    condition: str = "ok"  # ok | waiting | backlog | starved: see `share_condition`

    @property
    def waiting(self) -> bool:
        return self.summary.pending > 0


def share_condition(
    *, pending: int, oldest_pending_since: datetime | None, owed: bool, long_wait_since: datetime
) -> str:
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
        for row in runnable.filter(pending__queue_position=1)
        .order_by("quota_share_id", "id")
        .values("id", "name", "team_id", "quota_share_id", "quota_share__name", "pending__clauses")
    }
    # The heads' reasons, worded from their clauses (one more query only for clauses not read before).
    rows = list(heads.values())
    for row, words in zip(rows, pending_words([row["pending__clauses"] for row in rows]), strict=True):
        row["reason"] = words
    wanted: dict[int, set[str]] = {}
    for share_id, type_name in (
        JobPreference.objects.filter(
            job__job_queue_id__in=job_queue_ids, job__status=JobStatus.RUNNABLE, training_plan__isnull=True
        )
        .values_list("job__quota_share_id", "instance_type__name")
        .distinct()
        .order_by()
    ):
        wanted.setdefault(share_id, set()).add(type_name)
    return oldest, heads, wanted


def overview(*, viewer: Viewer, long_wait_since: datetime, eviction_limit: int = 8) -> list[QueueOverview]:
    """Every queue: capacity per type, share cards, last pass, last evictions, budgets. 8 + 7 per queue
    queries, 3 more when some share has a budget, and one for the words of the heads' reasons this process
    has not read before.

    The count does not grow with jobs, events or passes: aggregates, and index-backed reads of the latest
    rows.
    """
    last_pass = SchedulingPass.objects.filter(job_queue=OuterRef("pk")).order_by("-started_at", "-id")
    queues = list(
        JobQueue.objects.select_related("service_environment")
        .annotate(last_pass_id=Subquery(last_pass.values("id")[:1]))
        .order_by("-priority", "name")
    )
    if not queues:
        return []
    queue_ids = [queue.pk for queue in queues]
    passes = SchedulingPass.objects.in_bulk([queue.last_pass_id for queue in queues if queue.last_pass_id])
    team_names = dict(Team.objects.values_list("id", "name"))
    oldest, heads, wanted = _pending_heads(queue_ids)
    recent = evictions(viewer=viewer, job_queue_ids=queue_ids, limit=eviction_limit * len(queues))
    budgeted = QuotaShare.objects.filter(job_queue_id__in=queue_ids, budget_gpu_hours__isnull=False)
    budgets = share_budgets(
        shares=list(budgeted.only("id", "budget_gpu_hours", "budget_period", "budget_scope")),
        now=timezone.now(),
    )
    result = []
    for queue in queues:
        usage = queue_usage(job_queue=queue)
        cards = []
        for share in usage.shares:
            card = ShareCard(
                summary=share,
                team_name=team_names.get(share.team_id, "?"),
                mine=share.team_id in viewer.team_ids,
                oldest_pending_since=oldest.get(share.id),
                budget=budgets.get(share.id),
            )
            card.condition = share_condition(
                pending=share.pending,
                oldest_pending_since=card.oldest_pending_since,
                owed=_owed(share, wanted.get(share.id, set())),
                long_wait_since=long_wait_since,
            )
            head = heads.get(share.id)
            if head is not None and viewer.sees_team(head["team_id"]):
                card.head_job = job_ref(
                    viewer,
                    job_id=head["id"],
                    name=head["name"],
                    team_id=head["team_id"],
                    share_name=head["quota_share__name"],
                )
                card.head_reason = head["reason"]
            card.evictions = [e for e in recent if e.share_id == share.id][:3]
            cards.append(card)
        result.append(
            QueueOverview(
                job_queue=queue,
                usage=usage,
                cards=cards,
                last_pass=passes.get(queue.last_pass_id),
                evictions=[e for e in recent if e.job_queue_id == queue.pk][:eviction_limit],
            )
        )
    return result
