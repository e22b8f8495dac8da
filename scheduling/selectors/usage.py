"""What each share of a queue holds, lends and borrows, per instance type; what plans hold."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Count, Sum
from django.utils import timezone

from engine import accounting
from scheduling.models import (
    HOLDING_STATUSES,
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
        type_names[t]: n
        for t, n in EnvironmentCapacity.objects.filter(
            service_environment_id=job_queue.service_environment_id,
        ).values_list("instance_type_id", "max_capacity")
    }
    shares = {
        row["id"]: ShareSummary(**row)
        for row in QuotaShare.objects.filter(job_queue=job_queue)
        .values(
            "id",
            "name",
            "team_id",
            "strategy",
            "state",
            "borrow_limit",
            "in_share_preemption",
        )
        .order_by("name")
    }
    limits: dict[int, dict[str, int]] = {share_id: {} for share_id in shares}
    for share_id, type_id, maximum in ShareCapacityLimit.objects.filter(
        quota_share__job_queue=job_queue
    ).values_list("quota_share_id", "instance_type_id", "max_capacity"):
        limits[share_id][type_names[type_id]] = maximum
    usage: dict[tuple[int, str], int] = {}
    plan_use: dict[int, int] = {}
    for row in (
        Job.objects.filter(job_queue=job_queue, status__in=HOLDING_STATUSES)
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
        .values_list("quota_share_id")
        .annotate(n=Count("id"))
        .order_by()
    ):
        if share_id in shares:
            shares[share_id].pending = pending
    rows, loans, types = accounting.share_usage(
        capacity=capacity, limits=limits, strategies={s.id: s.strategy for s in shares.values()}, usage=usage
    )
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
        {
            "id": plan.pk,
            "name": plan.name,
            "instance_type": type_names[plan.instance_type_id],
            "instance_count": plan.instance_count,
            "start_time": plan.start_time,
            "end_time": plan.end_time,
            "status": plan.status_at(now),
            "in_use_instance_count": plan_use.get(plan.pk, 0),
            "available_instance_count": max(0, plan.instance_count - plan_use.get(plan.pk, 0))
            if plan.status_at(now) == TrainingPlan.Status.ACTIVE
            else 0,
        }
        for plan in TrainingPlan.objects.filter(job_queue=job_queue).order_by("start_time", "name")
    ]
    return QueueUsage(
        job_queue=job_queue, shares=list(shares.values()), types=types, loans=loans, plans=plans
    )


def plan_in_use(*, plan_ids: list[int]) -> dict[int, int]:
    """training plan id -> instances held on it by placed jobs. 1 query."""
    return dict(
        Job.objects.filter(selected_training_plan_id__in=plan_ids, status__in=HOLDING_STATUSES)
        .values_list("selected_training_plan_id")
        .annotate(n=Sum("selected_instance_count"))
        .order_by()
    )
