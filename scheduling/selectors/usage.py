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
    # What its jobs hold on training plans, beside (not within) its on-demand limits: (plan name, type, instances)
    on_plans: list[tuple[str, str, int]] = field(default_factory=list)

    @property
    def on_plan(self) -> int:
        return sum(n for _, _, n in self.on_plans)

    @property
    def now_rows(self) -> list[dict]:
        """The share page's "Now" table: per instance type its on-demand row (None for a type it holds only on
        a plan) and what it holds on plans of that type."""
        types = [row.instance_type for row in self.rows]
        types += sorted({t for _, t, _ in self.on_plans} - set(types))
        by_type = {row.instance_type: row for row in self.rows}
        return [
            {
                "instance_type": t,
                "row": by_type.get(t),
                "on_plans": [(plan, n) for plan, plan_type, n in self.on_plans if plan_type == t],
            }
            for t in types
        ]

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

    @property
    def plan_types(self) -> dict[str, list[dict]]:
        """instance type -> the queue's plans of that type that are active or in use, for the capacity rows."""
        by_type: dict[str, list[dict]] = {}
        for plan in self.plans:
            if plan["status"] == TrainingPlan.Status.ACTIVE or plan["in_use_instance_count"]:
                by_type.setdefault(plan["instance_type"], []).append(plan)
        return by_type


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
    lending_limits: dict[int, dict[str, int]] = {}
    for share_id, type_id, maximum, lending_limit in ShareCapacityLimit.objects.filter(
        quota_share__job_queue=job_queue
    ).values_list("quota_share_id", "instance_type_id", "max_capacity", "lending_limit"):
        limits[share_id][type_names[type_id]] = maximum
        if lending_limit is not None:
            lending_limits.setdefault(share_id, {})[type_names[type_id]] = lending_limit
    usage: dict[tuple[int, str], int] = {}
    plan_use: dict[int, int] = {}
    share_plan_use: dict[tuple[int, int], int] = {}  # (share id, plan id) -> instances
    for row in (
        Job.objects.filter(job_queue=job_queue, status__in=HOLDING_STATUSES)
        .values("quota_share_id", "selected_instance_type_id", "selected_training_plan_id")
        .annotate(instances=Sum("selected_instance_count"))
        .order_by()
    ):
        if row["selected_training_plan_id"]:
            plan_id = row["selected_training_plan_id"]
            plan_use[plan_id] = plan_use.get(plan_id, 0) + row["instances"]
            key = (row["quota_share_id"], plan_id)
            share_plan_use[key] = share_plan_use.get(key, 0) + row["instances"]
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
        capacity=capacity,
        limits=limits,
        strategies={s.id: s.strategy for s in shares.values()},
        usage=usage,
        lending_limits=lending_limits,
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
    plan_names = {plan["id"]: (plan["name"], plan["instance_type"]) for plan in plans}
    for (share_id, plan_id), instances in sorted(share_plan_use.items()):
        if share_id in shares and plan_id in plan_names:
            name, type_name = plan_names[plan_id]
            shares[share_id].on_plans.append((name, type_name, instances))
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
