"""GPU-hour budgets in a replay: each budgeted share's consumption in its current period, as jobs hold instances.

The replay's usage changes only when a job is placed or released, so consumption is the held GPUs (all of
them, or with scope BORROWED those above the share's limit) times the time between changes, cut at the
period's end, where it starts again from nothing (`engine.budgets`: UTC days, weeks from Monday, months).
Training plans are not counted. `budget_of` gives the engine's `Budget` for a pass; `spent_periods` keeps,
per share, the periods in which the budget was reached and when, for the report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from engine import Budget, BudgetPeriod, BudgetScope
from engine.budgets import period_end, period_start

from .config import BudgetConfig, to_datetime


@dataclass
class _Account:
    config: BudgetConfig
    limits: Mapping[str, int]
    held: dict[str, int] = field(default_factory=dict)  # type -> on-demand instances
    period_start: float = 0.0
    period_end: float = 0.0
    used: float = 0.0  # GPU-hours in the current period
    spent_at: float | None = None  # when the budget was reached in the current period

    def rate(self, gpus: Mapping[str, int]) -> float:
        """GPUs counted per hour now."""
        total = 0
        for instance_type, instances in self.held.items():
            counted = instances
            if self.config.scope == BudgetScope.BORROWED:
                counted = max(0, instances - self.limits.get(instance_type, 0))
            total += counted * gpus.get(instance_type, 1)
        return total


class BudgetMeter:
    """The budgeted shares' consumption over virtual time (seconds since the epoch)."""

    def __init__(
        self,
        *,
        budgets: Mapping[int, BudgetConfig],
        limits: Mapping[int, Mapping[str, int]],
        gpus: Mapping[str, int],
        start: float,
    ):
        self.gpus = dict(gpus)
        self.time = start
        self.accounts = {
            share_id: _Account(config, dict(limits.get(share_id, {}))) for share_id, config in budgets.items()
        }
        # share id -> [(period start, when the budget was reached)] of the periods whose budget was spent
        self.spent_periods: dict[int, list[tuple[float, float]]] = {share_id: [] for share_id in budgets}
        for share_id, account in self.accounts.items():
            self._open_period(account, start)
            account.used = float(account.config.spent_at_start)
            if account.used >= float(account.config.gpu_hours):
                account.spent_at = start
                self.spent_periods[share_id].append((account.period_start, start))

    def _open_period(self, account: _Account, at: float) -> None:
        moment = to_datetime(at)
        account.period_start = period_start(account.config.period, moment).timestamp()
        account.period_end = period_end(account.config.period, moment).timestamp()
        account.used = 0.0
        account.spent_at = None

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
            rate = account.rate(self.gpus)
            while moment < at:
                until = min(at, account.period_end)
                before = account.used
                account.used += rate * (until - moment) / 3600
                gpu_hours = float(account.config.gpu_hours)
                if account.spent_at is None and account.used >= gpu_hours > before:
                    account.spent_at = moment + (gpu_hours - before) / rate * 3600
                    self.spent_periods[share_id].append((account.period_start, account.spent_at))
                moment = until
                if moment >= account.period_end:
                    self._open_period(account, moment)
        self.time = at

    def budget_of(self, share_id: int, at: float) -> Budget | None:
        """The share's budget as a pass at `at` sees it (None: no budget)."""
        account = self.accounts.get(share_id)
        if account is None:
            return None
        self.advance(at)
        return Budget(
            gpu_hours=account.config.gpu_hours,
            period=BudgetPeriod(account.config.period),
            scope=BudgetScope(account.config.scope),
            used_gpu_hours=Decimal(str(round(account.used, 6))),
            resets_at=datetime.fromtimestamp(account.period_end, to_datetime(0).tzinfo),
        )

    def resets_at(self, share_id: int) -> float:
        return self.accounts[share_id].period_end
