"""The administration pages' reads: queues, environments, shares, the training plan timeline."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Prefetch

from scheduling.models import (
    EnvironmentCapacity,
    Executor,
    JobQueue,
    QuotaShare,
    ServiceEnvironment,
    ShareCapacityLimit,
    TrainingPlan,
)
from scheduling.selectors.jobs import OFFER_FRESH_SECONDS
from scheduling.selectors.usage import plan_in_use


def queues_for_admin():
    """Queues with their environment and share count. 1 query."""
    return (
        JobQueue.objects.select_related("service_environment")
        .annotate(share_count=Count("quota_shares", distinct=True))
        .order_by("-priority", "name")
    )


def environments_for_admin():
    """Environments with their capacities and queue. 2 queries."""
    return (
        ServiceEnvironment.objects.select_related("job_queue")
        .prefetch_related(
            Prefetch("capacity_limits", queryset=EnvironmentCapacity.objects.select_related("instance_type"))
        )
        .order_by("name")
    )


def executors_of(environment: ServiceEnvironment) -> list[Executor]:
    """The executors that took work from the environment, most recently seen first. 1 query."""
    return list(environment.executors.order_by("-last_seen_at", "name"))


@dataclass(frozen=True)
class TypeOffer:
    """For one instance type of an environment: its capacity, and what its executors polling now offer."""

    instance_type: str
    capacity: int
    executors: int
    slots: int | None  # all the executors' slots; None when one of them did not say
    free: int

    @property
    def differs(self) -> bool:
        return self.slots is not None and self.slots != self.capacity


def environment_offers(*, capacity: dict[str, int], executors: list[Executor], now) -> list[TypeOffer]:
    """Per type of an environment's capacity (type name -> instances) and any type its executors offer:
    capacity against the slots of the executors seen in the last OFFER_FRESH_SECONDS. `executors`:
    `executors_of(environment)`. No query."""
    fresh = [e for e in executors if e.last_seen_at >= now - timedelta(seconds=OFFER_FRESH_SECONDS)]
    types = sorted(set(capacity) | {e.offered_instance_type for e in fresh if e.offered_instance_type})
    offers = []
    for name in types:
        polling = [e for e in fresh if e.offered_instance_type == name]
        totals = [e.total_slots for e in polling]
        offers.append(
            TypeOffer(
                instance_type=name,
                capacity=capacity.get(name, 0),
                executors=len(polling),
                slots=None if any(total is None for total in totals) else sum(totals),
                free=sum(e.offered_slots or 0 for e in polling),
            )
        )
    return offers


def shares_for_admin():
    """Shares with queue, team and limits. 2 queries."""
    return (
        QuotaShare.objects.select_related("job_queue", "team")
        .prefetch_related(
            Prefetch("capacity_limits", queryset=ShareCapacityLimit.objects.select_related("instance_type"))
        )
        .order_by("job_queue__name", "name")
    )


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


def plan_timeline(
    *, now: datetime, past: timedelta = timedelta(days=7), future: timedelta = timedelta(days=60)
) -> PlanTimeline:
    """Training plans as bars on a time axis around now (current ones, and those ended within `past`).

    3 queries.
    """
    plans = list(
        TrainingPlan.objects.filter(end_time__gte=now - past)
        .select_related("job_queue", "instance_type")
        .prefetch_related("quota_shares")
        .order_by("job_queue__name", "start_time", "name")
    )
    in_use = plan_in_use(plan_ids=[plan.pk for plan in plans])
    start = min([now - timedelta(days=1)] + [plan.start_time for plan in plans])
    start = max(start, now - past)
    end = max([now + timedelta(days=7)] + [min(plan.end_time, now + future) for plan in plans])
    span = (end - start).total_seconds()

    def x_of(moment: datetime) -> float:
        return round(100 * min(max((moment - start).total_seconds(), 0), span) / span, 3)

    bars = [
        PlanBar(
            plan=plan,
            status=plan.status_at(now),
            in_use=in_use.get(plan.pk, 0),
            x=x_of(plan.start_time),
            width=max(0.3, x_of(plan.end_time) - x_of(plan.start_time)),
        )
        for plan in plans
    ]
    days = max(1, round(span / 86400 / 6))
    first = start.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    ticks = []
    moment = first
    while moment < end:
        if abs(x_of(moment) - x_of(now)) > 4:  # leave room for the "now" label
            ticks.append((x_of(moment), moment))
        moment += timedelta(days=days)
    return PlanTimeline(start=start, end=end, now_x=x_of(now), bars=bars, ticks=ticks)
