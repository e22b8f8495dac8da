"""GPU-hour budgets in the pass (behaviour.md#gpu-hour-budgets): meter each share's consumption, give the engine each
budget's state.

Consumption is kept as jobs hold instances, never worked out from the job history: every share has a
`ShareMeter` with the instances it held on on-demand capacity (per type, and the part above its limit) once
the last pass's decisions were applied, and the moment it was metered until. Each pass first adds that
holding times the time since to the share's `ShareConsumption` rows (one per type and UTC day), then, once
its decisions are made, sets the holding anew. Placements happen only in passes, and a pass runs right after
every job stops, so the holding between two passes is what the meter says (a job that stops between two beat
passes counts until the next). Training plans are not metered: they are paid for up front.

Reading a budget's state is three queries per queue whatever the history (`budgets_read`); writing it back
is at most three statements: the consumption rows, the meters (none when the queue holds nothing and held
nothing), the events (`budgets_write`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from engine import types as et
from engine.budgets import (
    WARNING_FRACTION,
    gpu_hours_held,
    gpu_hours_text,
    period_end,
    period_label,
    period_start,
    split_by_period,
)
from scheduling.models import Event, EventKind, InstanceType, QuotaShare, ShareConsumption, ShareMeter
from scheduling.passes.bulk import rows_insert

# How long a meter whose holding has not changed may go unwritten (see `budgets_write`).
METER_INTERVAL_SECONDS = 60

SHARE_COLUMNS = (
    "id",
    "name",
    "team_id",
    "budget_gpu_hours",
    "budget_period",
    "budget_scope",
    "meter__metered_until",
    "meter__held",
    "meter__warned_period",
    "meter__exhausted_period",
)


@dataclass
class BudgetBook:
    """One queue's meters and consumption as read at `now`, with what the time since the last pass added."""

    now: datetime
    type_ids: dict[str, int]
    shares: dict[int, dict]
    gpus: dict[str, int] = field(default_factory=dict)  # type name -> GPUs per instance
    # (share id, type id, day) -> [GPU-hours, GPU-hours above the limit]: as stored, and as added now
    stored: dict[tuple[int, int, date], list[Decimal]] = field(default_factory=dict)
    added: dict[tuple[int, int, date], list[Decimal]] = field(default_factory=dict)
    budgets: dict[int, et.Budget] = field(default_factory=dict)


def budgets_read(*, job_queue_id: int, now: datetime) -> BudgetBook:
    """Three queries: the queue's shares with their budgets and meters, the instance types, and the
    consumption rows from the earliest day any budget period or meter of the queue still needs."""
    shares = {
        row["id"]: row for row in QuotaShare.objects.filter(job_queue_id=job_queue_id).values(*SHARE_COLUMNS)
    }
    types = list(InstanceType.objects.values_list("id", "name", "gpu_count"))
    gpus = {name: gpu_count for _, name, gpu_count in types}
    book = BudgetBook(
        now=now, type_ids={name: type_id for type_id, name, _ in types}, shares=shares, gpus=gpus
    )
    # A week can start in the month before: whichever period a share has, its rows are from here on.
    earliest = min(period_start(et.BudgetPeriod.MONTH, now), period_start(et.BudgetPeriod.WEEK, now))
    for row in shares.values():
        if row["meter__held"]:  # a meter of nothing held adds nothing, however long ago it was written
            earliest = min(earliest, period_start(et.BudgetPeriod.DAY, row["meter__metered_until"]))
    for share_id, type_id, day, used, borrowed in ShareConsumption.objects.filter(
        quota_share__job_queue_id=job_queue_id, day__gte=earliest.date()
    ).values_list("quota_share_id", "instance_type_id", "day", "gpu_hours", "borrowed_gpu_hours"):
        book.stored[share_id, type_id, day] = [used, borrowed]
    for share_id, row in shares.items():
        since = row["meter__metered_until"]
        if not row["meter__held"]:
            continue
        for type_name, (instances, above) in (row["meter__held"] or {}).items():
            if type_name not in book.type_ids or not gpus[type_name]:
                continue
            for start, end in split_by_period(et.BudgetPeriod.DAY, since, now):
                added = book.added.setdefault(
                    (share_id, book.type_ids[type_name], start.date()), [Decimal(0)] * 2
                )
                added[0] += gpu_hours_held(instances, gpus[type_name], start, end)
                added[1] += gpu_hours_held(above, gpus[type_name], start, end)
    for share_id, row in shares.items():
        if row["budget_gpu_hours"] is not None:
            book.budgets[share_id] = budget_state(book, share_id, row)
    return book


def budget_state(book: BudgetBook, share_id: int, row: dict) -> et.Budget:
    period, scope = et.BudgetPeriod(row["budget_period"]), et.BudgetScope(row["budget_scope"])
    first_day = period_start(period, book.now).date()
    column = 1 if scope == et.BudgetScope.BORROWED else 0
    used = Decimal(0)
    for rows in (book.stored, book.added):
        for (owner, _, day), values in rows.items():
            if owner == share_id and day >= first_day:
                used += values[column]
    return et.Budget(
        gpu_hours=row["budget_gpu_hours"],
        period=period,
        scope=scope,
        used_gpu_hours=used,
        resets_at=period_end(period, book.now),
    )


def budgets_apply(snap: et.Snapshot, book: BudgetBook) -> et.Snapshot:
    """The snapshot with each share's budget state (shares without a budget keep None)."""
    if not book.budgets:
        return snap
    shares = tuple(replace(share, budget=book.budgets.get(share.id)) for share in snap.shares)
    return replace(snap, shares=shares)


def held_after(snap: et.Snapshot, usage: dict[tuple[int, str], int]) -> dict[int, dict[str, list[int]]]:
    """share id -> type -> [on-demand instances held, instances above the share's limit]."""
    limits = {share.id: share.limits for share in snap.shares}
    held: dict[int, dict[str, list[int]]] = {share.id: {} for share in snap.shares}
    for (share_id, instance_type), instances in sorted(usage.items()):
        if instances > 0 and share_id in held:
            above = max(0, instances - limits[share_id].get(instance_type, 0))
            held[share_id][instance_type] = [instances, above]
    return held


def budgets_write(
    *, job_queue_id: int, book: BudgetBook, snap: et.Snapshot, usage: dict[tuple[int, str], int]
) -> None:
    """Add the metered time to the consumption rows, set each meter to the holding after this pass
    (`usage`: (share, type) -> on-demand instances held), and record BUDGET_WARNING (80%) and
    BUDGET_EXHAUSTED (100%) once a period each. The caller holds the queue's lock.

    A meter whose holding is unchanged and was written less than METER_INTERVAL_SECONDS ago is left as it
    is (with its share's consumption rows): the next pass adds the same time at the same rate, so a settled
    queue's passes write nothing and the budgets read the same.
    """
    now = book.now
    held = held_after(snap, usage)
    meters, events = [], []
    for share_id, row in sorted(book.shares.items()):
        warned, exhausted = row["meter__warned_period"], row["meter__exhausted_period"]
        budget = book.budgets.get(share_id)
        if budget is not None:
            start = period_start(budget.period, now)
            if budget.used_gpu_hours >= budget.gpu_hours * WARNING_FRACTION and warned != start:
                warned = start
                events.append(budget_event(EventKind.BUDGET_WARNING, job_queue_id, row, budget, now))
            if budget.spent and exhausted != start:
                exhausted = start
                events.append(budget_event(EventKind.BUDGET_EXHAUSTED, job_queue_id, row, budget, now))
        holding = held.get(share_id, {})
        since = row["meter__metered_until"]
        unchanged = since is not None and (holding, warned, exhausted) == (
            row["meter__held"] or {},
            row["meter__warned_period"],
            row["meter__exhausted_period"],
        )
        if unchanged and (not holding or (now - since).total_seconds() < METER_INTERVAL_SECONDS):
            continue
        meters.append(
            ShareMeter(
                quota_share_id=share_id,
                metered_until=now,
                held=holding,
                warned_period=warned,
                exhausted_period=exhausted,
            )
        )
    metered = {meter.quota_share_id for meter in meters}
    consumption = []
    for key, (used, borrowed) in sorted(book.added.items()):
        share_id, type_id, day = key
        if share_id not in metered:
            continue
        before = book.stored.get(key, [Decimal(0), Decimal(0)])
        consumption.append(
            ShareConsumption(
                quota_share_id=share_id,
                instance_type_id=type_id,
                day=day,
                gpu_hours=before[0] + used,
                borrowed_gpu_hours=before[1] + borrowed,
            )
        )
    if consumption:
        ShareConsumption.objects.bulk_create(
            consumption,
            update_conflicts=True,
            unique_fields=["quota_share", "day", "instance_type"],
            update_fields=["gpu_hours", "borrowed_gpu_hours"],
        )
    if meters:
        ShareMeter.objects.bulk_create(
            meters,
            update_conflicts=True,
            unique_fields=["quota_share"],
            update_fields=["metered_until", "held", "warned_period", "exhausted_period"],
        )
    rows_insert(Event, events)


def budgets_due(*, book: BudgetBook, snap: et.Snapshot, usage: dict[tuple[int, str], int]) -> datetime | None:
    """When a budget next reaches 80% or 100% at the rate its share holds GPUs after this pass (`usage`): the
    beat runs a pass then, to record the event (a spent budget's reset is the engine's `next_pass_due`)."""
    held = held_after(snap, usage)
    moments = []
    for share_id, budget in book.budgets.items():
        if budget.spent:
            continue
        column = 1 if budget.scope == et.BudgetScope.BORROWED else 0
        rate = sum(values[column] * book.gpus.get(name, 0) for name, values in held.get(share_id, {}).items())
        if not rate:
            continue
        for threshold in (budget.gpu_hours * WARNING_FRACTION, budget.gpu_hours):
            if budget.used_gpu_hours < threshold:
                hours = (threshold - budget.used_gpu_hours) / rate
                moment = book.now + timedelta(seconds=float(hours) * 3600 + 1)
                if moment < budget.resets_at:
                    moments.append(moment)
                break
    return min(moments, default=None)


def budget_event(kind: str, job_queue_id: int, row: dict, budget: et.Budget, now: datetime) -> dict:
    label = period_label(budget.period, period_start(budget.period, now))
    share, amount = row["name"], gpu_hours_text(budget.gpu_hours)
    used = gpu_hours_text(budget.used_gpu_hours)
    on = " on borrowing" if budget.scope == et.BudgetScope.BORROWED else ""
    if kind == EventKind.BUDGET_WARNING:
        message = f"share {share} has spent {used} of its {amount} GPU-hours{on} for {label} (80% reached)"
    else:
        holds = "borrows no more" if budget.scope == et.BudgetScope.BORROWED else "starts no new job"
        resets = budget.resets_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
        message = (
            f"share {share} has spent its budget of {amount} GPU-hours{on} for {label} ({used}): "
            f"it {holds} until {resets}"
        )
    return dict(
        kind=str(kind),
        team_id=row["team_id"],
        job_queue_id=job_queue_id,
        quota_share_id=row["id"],
        message=message,
        data={"budget_gpu_hours": str(budget.gpu_hours), "used_gpu_hours": str(budget.used_gpu_hours)},
        created_at=now,
    )
