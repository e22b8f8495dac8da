"""GPU-hour budgets (behaviour.md#gpu-hour-budgets): calendar periods, what a placement spends, and what a spent budget
holds back.

A share's consumption in a period is the GPU-hours its jobs held on on-demand capacity during the period,
from placement to the end of STOPPING (training plans excluded); with scope BORROWED only the part above the
share's limit counts. Once it reaches the budget the share starts no new job (ALL) or borrows no more
(BORROWED) until the period ends. Nothing running is stopped, and a spent budget never makes the share's
capacity lendable: what it reserves it keeps.

Periods are UTC calendar periods: a day, a week starting on Monday, a month. Pure arithmetic, no Django.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from .types import Budget, BudgetPeriod, BudgetScope

WARNING_FRACTION = Decimal("0.8")
SECONDS_PER_HOUR = Decimal(3600)


def period_start(period: BudgetPeriod | str, moment: datetime) -> datetime:
    """The first instant (UTC) of the calendar period containing `moment`."""
    moment = moment.astimezone(UTC)
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == BudgetPeriod.DAY:
        return day
    if period == BudgetPeriod.WEEK:
        return day - timedelta(days=day.weekday())
    if period == BudgetPeriod.MONTH:
        return day.replace(day=1)
    raise ValueError(f"unknown budget period {period!r}")


def period_end(period: BudgetPeriod | str, moment: datetime) -> datetime:
    """The first instant (UTC) after the calendar period containing `moment`: when the budget resets."""
    start = period_start(period, moment)
    if period == BudgetPeriod.DAY:
        return start + timedelta(days=1)
    if period == BudgetPeriod.WEEK:
        return start + timedelta(days=7)
    if start.month == 12:
        return start.replace(year=start.year + 1, month=1)
    return start.replace(month=start.month + 1)


def period_label(period: BudgetPeriod | str, start: datetime) -> str:
    """How a person names the period: `December`, `the week of 30 November`, `5 December`."""
    start = start.astimezone(UTC)
    if period == BudgetPeriod.MONTH:
        return start.strftime("%B")
    if period == BudgetPeriod.WEEK:
        return f"the week of {start.day} {start.strftime('%B')}"
    return f"{start.day} {start.strftime('%B')}"


def gpu_hours_text(value: Decimal | float | int) -> str:
    """5,000 / 5,012 / 12.5: whole GPU-hours with thousands separators from 100 up, one decimal below."""
    value = Decimal(value)
    if abs(value) >= 100 or value == value.to_integral_value():
        return f"{value.quantize(Decimal(1)):,}"
    return f"{value.quantize(Decimal('0.1')):,}"


def reset_text(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def budget_spent_words(budget: Budget) -> str:
    """`budget of 5,000 GPU-hours for December spent (5,012); resets 2027-01-01 00:00 UTC` (BORROWED says
    `on borrowing` after the amount)."""
    on = " on borrowing" if budget.scope == BudgetScope.BORROWED else ""
    label = period_label(budget.period, period_start(budget.period, budget.resets_at - timedelta(seconds=1)))
    return (
        f"budget of {gpu_hours_text(budget.gpu_hours)} GPU-hours{on} for {label} spent "
        f"({gpu_hours_text(budget.used_gpu_hours)}); resets {reset_text(budget.resets_at)}"
    )


def stops_all_starts(budget: Budget | None) -> bool:
    """A spent budget of scope ALL: the share starts no new job until the period ends."""
    return budget is not None and budget.scope == BudgetScope.ALL and budget.spent


def stops_borrowing(budget: Budget | None) -> bool:
    """A spent budget of scope BORROWED: no placement of the share may go above its limit."""
    return budget is not None and budget.scope == BudgetScope.BORROWED and budget.spent


def gpu_hours_held(instances: int, gpu_count: int, start: datetime, end: datetime) -> Decimal:
    """instances x gpu_count x hours for [start, end) (0 when end is not after start)."""
    seconds = Decimal(max(0.0, (end - start).total_seconds()))
    return Decimal(instances * gpu_count) * seconds / SECONDS_PER_HOUR


def split_by_period(
    period: BudgetPeriod | str, start: datetime, end: datetime
) -> list[tuple[datetime, datetime]]:
    """[start, end) cut at period boundaries: one piece per period it touches, each with its period's start
    first (the piece's own start may be later)."""
    pieces = []
    while start < end:
        boundary = period_end(period, start)
        pieces.append((start, min(end, boundary)))
        start = boundary
    return pieces
