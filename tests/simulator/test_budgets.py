"""GPU-hour budgets in the replay and the estimator: consumption counted as jobs hold GPUs, the share held
back once it is spent, released at the period's reset, and the shortcuts still deciding as the whole queue."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from engine import Budget, BudgetPeriod, BudgetScope, Ordering, Strategy, synthetic
from simulator import Kind, philly, simulate
from simulator.config import BudgetConfig, ConfigurationError, configuration_from_mapping
from simulator.estimate import Expectations, Runtime, estimate
from tests.engine.builders import NOW, P5, RESERVE, entry, placed, runnable, share, snapshot
from tests.simulator.builders import LEND, LEND_AND_BORROW, SMALL, T0, config, job
from tests.simulator.builders import share as share_config

MIDNIGHT = datetime(2017, 7, 15, tzinfo=UTC).timestamp()  # the first reset of a DAY budget after T0
HOUR = 3600.0


def test_a_spent_budget_holds_new_jobs_until_the_period_resets():
    budget = BudgetConfig(gpu_hours=Decimal(2), period=BudgetPeriod.DAY)
    only = config(share_config("a", small=4, budget=budget))
    jobs = [job(1, "a", 0, 3 * HOUR), job(2, "a", 3 * HOUR, HOUR)]  # 1 GPU each: spent 2 h into job 1

    result = simulate(only, jobs, start=T0, verify_shortcuts=True, check=True)

    assert result.outcomes[1].first_placed_at == T0
    assert result.outcomes[2].first_placed_at == MIDNIGHT
    [spent] = result.budgets.spent_periods(1)
    assert spent.spent_at == pytest.approx(T0 + 2 * HOUR)
    assert spent.gpu_hours == pytest.approx(3)  # a period can end over budget: job 1 ran on


def test_a_spent_borrowed_budget_stops_borrowing_but_not_the_share_within_its_limit():
    budget = BudgetConfig(gpu_hours=Decimal(1), period=BudgetPeriod.DAY, scope=BudgetScope.BORROWED)
    shares = config(
        share_config("a", LEND_AND_BORROW, small=1, budget=budget), share_config("b", LEND, small=3)
    )
    jobs = [
        job(1, "a", 0, 2 * HOUR, (SMALL, 2)),  # borrows 1: spent after an hour
        job(2, "a", 1.5 * HOUR, 30 * HOUR),  # would borrow one more: waits
        job(3, "a", 2.5 * HOUR, HOUR),  # after job 1 ended, within the limit
    ]

    result = simulate(shares, jobs, start=T0, verify_shortcuts=True, check=True)

    assert result.outcomes[2].first_placed_at == T0 + 2 * HOUR  # job 1 ended: within the limit again
    assert result.outcomes[3].first_placed_at == MIDNIGHT  # job 2 holds the limit: 3 borrows after the reset


def test_plans_are_not_counted():
    from tests.simulator.builders import plan

    budget = BudgetConfig(gpu_hours=Decimal(2), period=BudgetPeriod.DAY)  # job 1's 3 would spend it
    only = config(share_config("a", small=1, budget=budget), plans=(plan("p", SMALL, 2, -HOUR, 48 * HOUR),))
    jobs = [job(1, "a", 0, 3 * HOUR, (SMALL, 1, "p")), job(2, "a", HOUR, HOUR)]

    result = simulate(only, jobs, start=T0, check=True)

    assert result.outcomes[2].first_placed_at == T0 + HOUR
    assert result.budgets.spent_periods(1) == []


def test_a_budget_is_read_from_a_configuration_file_mapping_and_refused_by_name_when_wrong():
    data = {
        "capacity": {SMALL: 4},
        "shares": [{"name": "a", "limits": {SMALL: 4}, "budget": {"gpu_hours": 500, "period": "WEEK"}}],
    }
    loaded = configuration_from_mapping(data, default_name="x", bases={}, where="file")
    assert loaded.shares[0].budget == BudgetConfig(Decimal(500), BudgetPeriod.WEEK, BudgetScope.ALL)
    data["shares"][0]["budget"] = {"gpu_hours": 0}
    with pytest.raises(ConfigurationError, match="share a: budget.gpu_hours must be above 0"):
        configuration_from_mapping(data, default_name="x", bases={}, where="file")
    data["shares"][0]["budget"] = {"gpu_hours": 5, "period": "YEAR"}
    with pytest.raises(ConfigurationError, match=r"shares\[0\].budget: 'YEAR' is not a valid BudgetPeriod"):
        configuration_from_mapping(data, default_name="x", bases={}, where="file")


@pytest.mark.parametrize("ordering", [Ordering.BEST_EFFORT_FIFO, Ordering.STRICT_FIFO])
def test_a_philly_replay_with_budgets_decides_every_pass_as_the_whole_queue_would(philly_day, ordering):
    rows, vcs, mix = philly_day
    base = philly.philly_configuration(
        name="budgets", vcs=vcs, mix=mix, capacity_scale=0.1, strategy=Strategy.LEND_AND_BORROW
    )
    shares = tuple(
        replace(
            s,
            budget=BudgetConfig(
                gpu_hours=Decimal(sum(s.limits.values()) * 4),
                period=BudgetPeriod.DAY,
                scope=(BudgetScope.ALL, BudgetScope.BORROWED)[i % 2],
            ),
        )
        for i, s in enumerate(base.shares)
    )
    base = replace(base, ordering=ordering)
    budgeted = replace(base, shares=shares)
    start = rows[0].submitted_at
    jobs = [j for j in philly.philly_jobs(rows, budgeted, seed=2) if j.submitted_at < start + 4 * HOUR]

    result = simulate(budgeted, jobs, start=start, end=start + 4 * HOUR, verify_shortcuts=True, check=True)
    free = simulate(base, jobs, start=start, end=start + 4 * HOUR)

    assert sum(bool(result.budgets.spent_periods(share_id)) for share_id in result.share_ids.values()) >= 2
    admitted = sum(r.kind == Kind.ADMITTED for r in result.records)
    assert 0 < admitted < sum(r.kind == Kind.ADMITTED for r in free.records)


# --- estimates ---------------------------------------------------------------------------------------------


def spent(reset_in: timedelta, scope=BudgetScope.ALL) -> Budget:
    return Budget(Decimal(10), BudgetPeriod.DAY, scope, Decimal(12), NOW + reset_in)


def test_the_estimate_of_a_job_held_back_by_its_budget_counts_the_reset():
    nlp = share(1, "nlp", RESERVE, limits={P5: 2}, budget=spent(timedelta(hours=12)))
    jobs = [runnable(1, nlp, entry(P5, 1))]

    run = estimate(snapshot({P5: 2}, [nlp], jobs), Expectations(default=Runtime.exactly(600)), resolution=0)

    assert run.estimates[1].earliest == datetime(2025, 6, 3, tzinfo=UTC)  # NOW is 2025-06-02 12:00
    assert run.estimates[1].basis == (
        "after the budget of share nlp resets (Tue 03 Jun 00:00 UTC), around Tue 03 Jun 00:00 UTC"
    )


def test_the_estimate_counts_the_budget_running_out_while_jobs_run():
    # 2 P5s (8 GPUs each) for 1 hour is 16 GPU-hours: with 20 left of the day, the next job cannot start.
    budget = Budget(Decimal(30), BudgetPeriod.DAY, BudgetScope.ALL, Decimal(10), NOW + timedelta(hours=12))
    nlp = share(1, "nlp", RESERVE, limits={P5: 3}, budget=budget)
    jobs = [
        placed(10, nlp, P5, 2, scheduled_minutes_ago=0),
        runnable(1, nlp, entry(P5, 1)),
        runnable(2, nlp, entry(P5, 2)),
    ]
    expectations = Expectations(declared={10: 7200, 1: 7200, 2: 600})

    run = estimate(snapshot({P5: 3}, [nlp], jobs), expectations, resolution=0)

    # Job 1 starts at once (10 of 30 spent); with 24 GPUs held the budget is spent 50 minutes later, before
    # job 10 ends and frees room for job 2, which then waits for the reset at midnight.
    assert run.estimates[1].earliest == NOW
    assert run.estimates[2].earliest == datetime(2025, 6, 3, tzinfo=UTC)


@pytest.mark.parametrize("seed", [1, 5, 9])
def test_the_forward_replay_with_budgets_decides_every_pass_as_the_whole_queue_would(seed):
    snap = synthetic.build_synthetic_snapshot(runnable=300, placed=120, shares=8, types=3, seed=seed)
    rng = random.Random(seed)
    shares = tuple(
        replace(
            s,
            budget=Budget(
                Decimal(rng.choice([50, 500, 5000])),
                rng.choice(list(BudgetPeriod)),
                rng.choice(list(BudgetScope)),
                Decimal(rng.choice([0, 40, 600])),
                snap.now + timedelta(hours=rng.choice([2, 30])),
            ),
        )
        if rng.random() < 0.7
        else s
        for s in snap.shares
    )
    run = estimate(
        replace(snap, shares=shares),
        Expectations(default=Runtime.of([600, 1800, 7200])),
        verify_shortcuts=True,
    )
    assert sum(found.earliest is not None for found in run.estimates.values()) > 50


def test_with_consumption_every_share_is_metered_per_month_budget_or_not():
    two = config(share_config("a", small=2), share_config("b", small=2))
    # Job 1 runs 2 h over the end of July (1 GPU), job 2 runs 1 h in August.
    july_end = datetime(2017, 8, 1, tzinfo=UTC).timestamp()
    jobs = [job(1, "a", july_end - T0 - HOUR, 2 * HOUR), job(2, "b", july_end - T0 + HOUR, HOUR)]

    result = simulate(two, jobs, start=T0, consumption=True)

    a, b = (result.budgets.periods[result.share_ids[name]] for name in ("a", "b"))
    assert [(use.start, round(use.gpu_hours, 6)) for use in a] == [
        (datetime(2017, 7, 1, tzinfo=UTC).timestamp(), 1.0),
        (july_end, 1.0),
    ]
    assert [round(use.gpu_hours, 6) for use in b] == [0.0, 1.0]
