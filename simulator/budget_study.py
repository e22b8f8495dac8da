"""A study of GPU-hour budgets on a trace: each team's budget set to its median month, then one month
replayed with and without the budgets, to see how much the biggest borrowers are held back and what that
does to everyone else's wait.

1. `median_months`: a replay of the whole trace under the configuration, metering every share's on-demand
   GPU-hours per calendar month (`simulate(..., consumption=True)`); each share's median over the months the
   replay covers, in all and above its limit (borrowed).
2. `with_budgets`: the configuration with each share's monthly budget set from those medians (scope ALL:
   everything it runs counts; scope BORROWED: only what it holds above its limit). A share whose median is
   nothing gets no budget.
3. `compare`: the month replayed under both, share by share and for the biggest borrowers against everyone
   else.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from decimal import Decimal
from pathlib import Path

from engine import BudgetPeriod, BudgetScope

from .config import BudgetConfig, Configuration, iso
from .metrics import percentile
from .report import duration, number, table
from .simulation import Result, SimJob, simulate


@dataclass(frozen=True)
class MedianMonth:
    share: str
    months: int
    gpu_hours: float
    borrowed_gpu_hours: float


def median_months(result: Result) -> dict[str, MedianMonth]:
    """Per share, its median month of on-demand GPU-hours (and of those above its limit) over the calendar
    months of a replay run with `consumption=True`; partial months at either end count as they are."""
    if result.budgets is None:
        raise ValueError("the replay kept no consumption: run it with consumption=True")
    names = {share_id: name for name, share_id in result.share_ids.items()}
    medians = {}
    for share_id, periods in result.budgets.periods.items():
        months = [period for period in periods if period.start < result.end]
        medians[names[share_id]] = MedianMonth(
            share=names[share_id],
            months=len(months),
            gpu_hours=statistics.median(period.gpu_hours for period in months) if months else 0.0,
            borrowed_gpu_hours=(
                statistics.median(period.borrowed_gpu_hours for period in months) if months else 0.0
            ),
        )
    return medians


def with_budgets(
    config: Configuration, medians: Mapping[str, MedianMonth], *, scope: BudgetScope, name: str
) -> Configuration:
    """The configuration with each share's monthly budget at its median month (none where that is 0)."""
    shares = []
    for share in config.shares:
        median = medians.get(share.name)
        amount = 0.0
        if median is not None:
            amount = median.borrowed_gpu_hours if scope == BudgetScope.BORROWED else median.gpu_hours
        budget = None
        if round(amount, 3) > 0:
            budget = BudgetConfig(
                gpu_hours=Decimal(str(round(amount, 3))), period=BudgetPeriod.MONTH, scope=scope
            )
        shares.append(replace(share, budget=budget))
    return replace(config, name=name, shares=tuple(shares))


@dataclass(frozen=True)
class ShareEffect:
    """One share in the month without and with budgets."""

    share: str
    budget: Decimal | None
    gpu_hours: tuple[float, float]
    borrowed_gpu_hours: tuple[float, float]
    spent_at: float | None  # when the budget was reached in the month
    jobs: int
    never_started: tuple[int, int]
    wait_p50: tuple[float | None, float | None]
    wait_p95: tuple[float | None, float | None]


@dataclass(frozen=True)
class GroupWaits:
    """Waits of a group of shares' jobs, without and with budgets (placed jobs; never started apart)."""

    shares: tuple[str, ...]
    jobs: int
    wait_p50: tuple[float | None, float | None]
    wait_p95: tuple[float | None, float | None]
    wait_mean: tuple[float | None, float | None]
    never_started: tuple[int, int]
    gpu_hours: tuple[float, float]


def compare(
    free: Result, budgeted: Result, *, biggest: int = 3
) -> tuple[list[ShareEffect], GroupWaits, GroupWaits]:
    """Both replays of the month (run with `consumption=True`, or the budgets' meter): per share, and the
    `biggest` borrowers (most GPU-hours above their limits without budgets) against everyone else."""
    configs = {share.name: share for share in budgeted.configuration.shares}
    effects = []
    for name in sorted(free.share_ids):
        budget = configs[name].budget
        spent = budgeted.budgets.spent_periods(budgeted.share_ids[name]) if budgeted.budgets else []
        effects.append(
            ShareEffect(
                share=name,
                budget=budget.gpu_hours if budget is not None else None,
                gpu_hours=(_used(free, name), _used(budgeted, name)),
                borrowed_gpu_hours=(_used(free, name, borrowed=True), _used(budgeted, name, borrowed=True)),
                spent_at=spent[0].spent_at if spent else None,
                jobs=len(_outcomes(free, {name})),
                never_started=(_never(free, {name}), _never(budgeted, {name})),
                wait_p50=(_wait(free, {name}, 50), _wait(budgeted, {name}, 50)),
                wait_p95=(_wait(free, {name}, 95), _wait(budgeted, {name}, 95)),
            )
        )
    by_borrowing = sorted(effects, key=lambda effect: -effect.borrowed_gpu_hours[0])
    borrowers = {effect.share for effect in by_borrowing[:biggest]}
    others = set(free.share_ids) - borrowers
    return effects, _group(free, budgeted, borrowers), _group(free, budgeted, others)


def _group(free: Result, budgeted: Result, shares: set[str]) -> GroupWaits:
    return GroupWaits(
        shares=tuple(sorted(shares)),
        jobs=len(_outcomes(free, shares)),
        wait_p50=(_wait(free, shares, 50), _wait(budgeted, shares, 50)),
        wait_p95=(_wait(free, shares, 95), _wait(budgeted, shares, 95)),
        wait_mean=(_mean_wait(free, shares), _mean_wait(budgeted, shares)),
        never_started=(_never(free, shares), _never(budgeted, shares)),
        gpu_hours=(
            sum(_used(free, name) for name in shares),
            sum(_used(budgeted, name) for name in shares),
        ),
    )


def _outcomes(result: Result, shares: set[str]):
    return [outcome for outcome in result.outcomes.values() if outcome.job.share in shares]


def _waits(result: Result, shares: set[str]) -> list[float]:
    return sorted(w for outcome in _outcomes(result, shares) if (w := outcome.wait_seconds) is not None)


def _wait(result: Result, shares: set[str], q: float) -> float | None:
    return percentile(_waits(result, shares), q)


def _mean_wait(result: Result, shares: set[str]) -> float | None:
    waits = _waits(result, shares)
    return sum(waits) / len(waits) if waits else None


def _never(result: Result, shares: set[str]) -> int:
    return sum(
        1
        for outcome in _outcomes(result, shares)
        if outcome.first_placed_at is None and outcome.status not in ("REJECTED", "NOT_ARRIVED")
    )


def _used(result: Result, share: str, *, borrowed: bool = False) -> float:
    """On-demand GPU-hours of the share over the replay (every period its meter went through)."""
    periods = result.budgets.periods.get(result.share_ids[share], []) if result.budgets else []
    return sum(period.borrowed_gpu_hours if borrowed else period.gpu_hours for period in periods)


def budget_study(
    config: Configuration,
    *,
    trace_jobs: Sequence[SimJob],
    trace_start: float,
    trace_end: float,
    month_jobs: Sequence[SimJob],
    month_start: float,
    month_end: float,
    scope: BudgetScope,
    pass_interval: float = 30.0,
    check: bool = False,
    verify_shortcuts: bool = False,
) -> tuple[dict[str, MedianMonth], Result, Result]:
    """Medians from the whole trace, then the month without and with the budgets: (medians, free, budgeted)."""
    whole = simulate(
        config, trace_jobs, start=trace_start, end=trace_end, pass_interval=pass_interval, consumption=True
    )
    medians = median_months(whole)
    budgeted_config = with_budgets(config, medians, scope=scope, name=f"{config.name}-budgets-{scope}")
    runs = [
        simulate(
            candidate,
            month_jobs,
            start=month_start,
            end=month_end,
            pass_interval=pass_interval,
            consumption=True,
            check=check,
            verify_shortcuts=verify_shortcuts,
        )
        for candidate in (config, budgeted_config)
    ]
    return medians, runs[0], runs[1]


# --- report ------------------------------------------------------------------------------------------------

EFFECT_HEADER = (
    "share",
    "median month GPU-h (borrowed)",
    "budget GPU-h",
    "budget reached",
    "GPU-h used: without -> with",
    "GPU-h borrowed: without -> with",
    "jobs",
    "never started: without -> with",
    "wait p50: without -> with",
    "wait p95: without -> with",
)
GROUP_HEADER = (
    "jobs of",
    "jobs",
    "GPU-h used: without -> with",
    "never started: without -> with",
    "wait p50: without -> with",
    "wait p95: without -> with",
    "mean wait: without -> with",
)


def _pair(values: tuple, show) -> str:
    return f"{show(values[0])} -> {show(values[1])}"


def budget_study_tables(
    medians: Mapping[str, MedianMonth],
    effects: Sequence[ShareEffect],
    borrowers: GroupWaits,
    others: GroupWaits,
    *,
    markdown: bool = False,
) -> str:
    rows = []
    for effect in effects:
        median = medians[effect.share]
        rows.append(
            [
                effect.share,
                f"{number(median.gpu_hours)} ({number(median.borrowed_gpu_hours)})",
                "-" if effect.budget is None else number(float(effect.budget)),
                "-" if effect.spent_at is None else iso(effect.spent_at)[:16],
                _pair(effect.gpu_hours, number),
                _pair(effect.borrowed_gpu_hours, number),
                number(effect.jobs),
                _pair(effect.never_started, number),
                _pair(effect.wait_p50, duration),
                _pair(effect.wait_p95, duration),
            ]
        )
    groups = [
        [
            f"the {len(group.shares)} biggest borrowers ({', '.join(group.shares)})"
            if group is borrowers
            else f"the other {len(group.shares)} shares",
            number(group.jobs),
            _pair(group.gpu_hours, number),
            _pair(group.never_started, number),
            _pair(group.wait_p50, duration),
            _pair(group.wait_p95, duration),
            _pair(group.wait_mean, duration),
        ]
        for group in (borrowers, others)
    ]
    return (
        table(EFFECT_HEADER, rows, markdown=markdown)
        + "\n\n"
        + table(GROUP_HEADER, groups, markdown=markdown)
    )


def write_budget_study(
    path: str | Path,
    medians: Mapping[str, MedianMonth],
    effects: Sequence[ShareEffect],
    borrowers: GroupWaits,
    others: GroupWaits,
    *,
    command: str | None,
) -> None:
    data = {
        "command": command,
        "medians": {name: asdict(median) for name, median in sorted(medians.items())},
        "shares": [
            {**asdict(effect), "budget": None if effect.budget is None else str(effect.budget)}
            for effect in effects
        ],
        "biggest_borrowers": asdict(borrowers),
        "everyone_else": asdict(others),
    }
    Path(path).write_text(json.dumps(data, indent=1) + "\n")
