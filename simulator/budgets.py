"""GPU-hour budgets in a replay: each share's consumption per calendar period, as jobs hold instances.

The replay's usage changes only when a job is placed or released, so consumption is the GPUs held on demand
(all of them, and apart those above the share's limit) times the time between changes, cut at the period's
end, where it starts again from nothing (`engine.budgets`: UTC days, weeks from Monday, months). Training
plans are not counted. A budgeted share is metered over its budget's period; with `every_share`, the others
are metered per month too (what a study of budgets sets them from). `budget_of` gives the engine's `Budget`
for a pass; `periods` keeps every period each share went through: what it used, and when its budget was
reached.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal

from engine import Budget, BudgetPeriod, BudgetScope
from engine.budgets import period_end, period_start

from .config import BudgetConfig, to_datetime


@dataclass
class PeriodUse:
    """One share's consumption in one period: GPU-hours on demand, the part above its limit, and when its
    budget was reached (None: it was not, or it has none)."""

    start: float
    gpu_hours: float = 0.0
    borrowed_gpu_hours: float = 0.0
    spent_at: float | None = None


@dataclass
class _Account:
    budget: BudgetConfig | None
    limits: Mapping[str, int]
    held: dict[str, int] = field(default_factory=dict)  # type -> on-demand instances
    period_end: float = 0.0
    current: PeriodUse = field(default_factory=lambda: PeriodUse(0.0))

    @property
    def period(self) -> BudgetPeriod:
        return self.budget.period if self.budget is not None else BudgetPeriod.MONTH

    def used(self) -> float:
        """What counts against the budget so far in the period."""
        if self.budget is not None and self.budget.scope == BudgetScope.BORROWED:
            return self.current.borrowed_gpu_hours
        return self.current.gpu_hours

    def rates(self, gpus: Mapping[str, int]) -> tuple[int, int]:
        """GPUs held on demand now, and those above the share's limits."""
        total = above = 0
        for instance_type, instances in self.held.items():
            per = gpus.get(instance_type, 1)
            total += instances * per
            above += max(0, instances - self.limits.get(instance_type, 0)) * per
        return total, above


class BudgetMeter:
    """Shares' consumption over virtual time (seconds since the epoch)."""

    def __init__(
        self,
        *,
        budgets: Mapping[int, BudgetConfig],
        limits: Mapping[int, Mapping[str, int]],
        gpus: Mapping[str, int],
        start: float,
        every_share: bool = False,
    ):
        self.gpus = dict(gpus)
        self.time = start
        share_ids = list(limits) if every_share else list(budgets)
        self.accounts = {
            share_id: _Account(budgets.get(share_id), dict(limits.get(share_id, {})))
            for share_id in share_ids
        }
        self.periods: dict[int, list[PeriodUse]] = {share_id: [] for share_id in share_ids}
        for share_id, account in self.accounts.items():
            self._open_period(share_id, account, start)
            if account.budget is not None and account.budget.spent_at_start:
                account.current.gpu_hours = account.current.borrowed_gpu_hours = float(
                    account.budget.spent_at_start
                )
                self._note_spent(account, start)

    def _open_period(self, share_id: int, account: _Account, at: float) -> None:
        moment = to_datetime(at)
        account.current = PeriodUse(period_start(account.period, moment).timestamp())
        account.period_end = period_end(account.period, moment).timestamp()
        self.periods[share_id].append(account.current)

    def _note_spent(self, account: _Account, at: float) -> None:
        if account.current.spent_at is None and account.used() >= float(account.budget.gpu_hours):
            account.current.spent_at = at

    def change(self, at: float, share_id: int, instance_type: str, plan: str | None, instances: int) -> None:
        """`instances` (negative: released) of a type for a share from `at`; plans are not counted."""
        if plan is not None or share_id not in self.accounts:
            return
        self.advance(at)
        held = self.accounts[share_id].held
        held[instance_type] = held.get(instance_type, 0) + instances

    def advance(self, at: float) -> None:
        if at <= self.time:
            return
        for share_id, account in self.accounts.items():
            moment = self.time
            total, above = account.rates(self.gpus)
            while moment < at:
                until = min(at, account.period_end)
                if total:
                    used_before = account.used()
                    account.current.gpu_hours += total * (until - moment) / 3600
                    account.current.borrowed_gpu_hours += above * (until - moment) / 3600
                    if account.budget is not None and account.current.spent_at is None:
                        gpu_hours = float(account.budget.gpu_hours)
                        rate = above if account.budget.scope == BudgetScope.BORROWED else total
                        if account.used() >= gpu_hours > used_before:
                            account.current.spent_at = moment + (gpu_hours - used_before) / rate * 3600
                moment = until
                if moment >= account.period_end:
                    self._open_period(share_id, account, moment)
        self.time = at

    def budget_of(self, share_id: int, at: float) -> Budget | None:
        """The share's budget as a pass at `at` sees it (None: no budget)."""
        account = self.accounts.get(share_id)
        if account is None or account.budget is None:
            return None
        self.advance(at)
        return Budget(
            gpu_hours=account.budget.gpu_hours,
            period=BudgetPeriod(account.budget.period),
            scope=BudgetScope(account.budget.scope),
            used_gpu_hours=Decimal(str(round(account.used(), 6))),
            resets_at=datetime.fromtimestamp(account.period_end, UTC),
        )

    def resets_at(self, share_id: int) -> float:
        return self.accounts[share_id].period_end

    def spent_periods(self, share_id: int) -> list[PeriodUse]:
        """The periods in which the share's budget was reached."""
        return [use for use in self.periods.get(share_id, []) if use.spent_at is not None]
