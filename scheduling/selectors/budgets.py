"""Shares' GPU-hour budgets as people read them: spent so far, the budget, the reset, and where the period
ends at the rate it has run so far, in GPU-hours and, where the instance types have an hourly price, money.

Read from the consumption rows of the current period and each share's meter (the time since the last pass
counted at the meter's rate, so a page between two passes reads what the next pass will count): three
queries for any number of shares, whatever the history.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db.models import F

from engine import types as et
from engine.budgets import (
    gpu_hours_held,
    gpu_hours_text,
    period_end,
    period_label,
    period_start,
    split_by_period,
)
from scheduling.models import InstanceType, QuotaShare, ShareConsumption, ShareMeter


@dataclass(frozen=True)
class BudgetReading:
    """One share's budget in the period that contains `now`."""

    share_id: int
    gpu_hours: Decimal
    period: str
    scope: str
    used_gpu_hours: Decimal
    period_start: datetime
    resets_at: datetime
    projected_gpu_hours: Decimal
    # None when some type the share ran on has no hourly price (or none ran yet on a priced type).
    used_money: Decimal | None
    projected_money: Decimal | None
    budget_money: Decimal | None

    @property
    def spent(self) -> bool:
        return self.used_gpu_hours >= self.gpu_hours

    @property
    def used_percent(self) -> int:
        return int(self.used_gpu_hours * 100 / self.gpu_hours)

    @property
    def last_day(self) -> datetime:
        return self.resets_at - timedelta(days=1)

    @property
    def label(self) -> str:
        return period_label(self.period, self.period_start)

    def projection_words(self) -> str:
        """`at this rate: 6,400 of 5,000 GPU-hours by Dec 31` (and the money, where prices are known)."""
        by = f"{self.last_day:%b} {self.last_day.day}"
        words = (
            f"at this rate: {gpu_hours_text(self.projected_gpu_hours)} of {gpu_hours_text(self.gpu_hours)} "
            f"GPU-hours by {by}"
        )
        if self.projected_money is not None and self.budget_money is not None:
            words += f" ({money_text(self.projected_money)} of {money_text(self.budget_money)})"
        return words

    def spent_words(self) -> str:
        """`1,234 of 5,000 GPU-hours spent for December (24%); resets 2027-01-01 00:00 UTC`."""
        on = " on borrowing" if self.scope == et.BudgetScope.BORROWED else ""
        words = (
            f"{gpu_hours_text(self.used_gpu_hours)} of {gpu_hours_text(self.gpu_hours)} GPU-hours{on} spent "
            f"for {self.label} ({self.used_percent}%)"
        )
        if self.used_money is not None:
            words += f", {money_text(self.used_money)}"
        return words + f"; resets {self.resets_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def money_text(amount: Decimal) -> str:
    return f"${amount.quantize(Decimal(1)):,}"


def share_budgets(*, shares: list[QuotaShare], now: datetime) -> dict[int, BudgetReading]:
    """share id -> its budget reading, for the `shares` that have a budget: 3 queries, none when no share
    has a budget."""
    budgeted = [share for share in shares if share.budget_gpu_hours is not None]
    if not budgeted:
        return {}
    meters = {
        share_id: (until, held)
        for share_id, until, held in ShareMeter.objects.filter(
            quota_share_id__in=[share.pk for share in budgeted]
        ).values_list("quota_share_id", "metered_until", "held")
    }
    rows = [
        {
            "id": share.pk,
            "budget_gpu_hours": share.budget_gpu_hours,
            "budget_period": share.budget_period,
            "budget_scope": share.budget_scope,
            "meter__metered_until": meters.get(share.pk, (None, None))[0],
            "meter__held": meters.get(share.pk, (None, None))[1],
        }
        for share in budgeted
    ]
    types = {
        name: (gpus, price)
        for name, gpus, price in InstanceType.objects.values_list("name", "gpu_count", "hourly_price")
    }
    starts = {row["id"]: period_start(row["budget_period"], now) for row in rows}
    # (share, type name) -> [GPU-hours, borrowed GPU-hours] in the share's period
    used: dict[tuple[int, str], list[Decimal]] = {}
    for share_id, type_name, day, gpu_hours, borrowed in (
        ShareConsumption.objects.filter(quota_share_id__in=list(starts), day__gte=min(starts.values()).date())
        .annotate(type_name=F("instance_type__name"))
        .values_list("quota_share_id", "type_name", "day", "gpu_hours", "borrowed_gpu_hours")
    ):
        if day >= starts[share_id].date():
            values = used.setdefault((share_id, type_name), [Decimal(0), Decimal(0)])
            values[0] += gpu_hours
            values[1] += borrowed
    for row in rows:
        since, held = row["meter__metered_until"], row["meter__held"] or {}
        for type_name, (instances, above) in held.items():
            gpus = types.get(type_name, (0, None))[0]
            for start, end in split_by_period(et.BudgetPeriod.DAY, max(since, starts[row["id"]]), now):
                values = used.setdefault((row["id"], type_name), [Decimal(0), Decimal(0)])
                values[0] += gpu_hours_held(instances, gpus, start, end)
                values[1] += gpu_hours_held(above, gpus, start, end)
    return {row["id"]: reading(row, used, types, now) for row in rows}


def reading(
    row: dict, used: dict[tuple[int, str], list[Decimal]], types: dict, now: datetime
) -> BudgetReading:
    share_id, period = row["id"], row["budget_period"]
    column = 1 if row["budget_scope"] == et.BudgetScope.BORROWED else 0
    start, end = period_start(period, now), period_end(period, now)
    spent, money, priced = Decimal(0), Decimal(0), True
    # The money a budget stands for, at the prices of the types the share ran on in the period.
    gpu_price = []
    for (owner, type_name), values in used.items():
        if owner != share_id or not values[column]:
            continue
        spent += values[column]
        gpus, price = types.get(type_name, (0, None))
        if not gpus or price is None:
            priced = False
            continue
        money += values[column] / gpus * price
        gpu_price.append((values[column], price / gpus))
    elapsed = Decimal((now - start).total_seconds())
    length = Decimal((end - start).total_seconds())
    projected = spent * length / elapsed if elapsed > 0 else spent
    used_money = money if priced and gpu_price else None
    budget_money = projected_money = None
    if used_money is not None:
        # Priced at the share's average price per GPU-hour in the period.
        per_gpu_hour = sum(hours * price for hours, price in gpu_price) / sum(hours for hours, _ in gpu_price)
        budget_money = row["budget_gpu_hours"] * per_gpu_hour
        projected_money = projected * per_gpu_hour
    return BudgetReading(
        share_id=share_id,
        gpu_hours=row["budget_gpu_hours"],
        period=period,
        scope=row["budget_scope"],
        used_gpu_hours=spent,
        period_start=start,
        resets_at=end,
        projected_gpu_hours=projected,
        used_money=used_money,
        projected_money=projected_money,
        budget_money=budget_money,
    )
