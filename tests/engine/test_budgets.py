"""GPU-hour budgets (behaviour.md#gpu-hour-budgets): a spent budget starts nothing new (ALL) or borrows no more
(BORROWED), says so and when it resets, stops nothing running and never lends a share's capacity."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from engine import Budget, BudgetPeriod, BudgetScope, schedule
from engine.budgets import (
    budget_spent_words,
    gpu_hours_held,
    gpu_hours_text,
    period_end,
    period_label,
    period_start,
    split_by_period,
)

from .builders import (
    LEND,
    LEND_AND_BORROW,
    NOW,
    P4,
    P5,
    RESERVE,
    admitted,
    entry,
    placed,
    plan,
    preempted,
    reason_of,
    runnable,
    share,
    snapshot,
)

JUNE_END = datetime(2025, 7, 1, tzinfo=UTC)


def budget(gpu_hours: int, used: float, scope: BudgetScope = BudgetScope.ALL, **fields) -> Budget:
    fields.setdefault("period", BudgetPeriod.MONTH)
    fields.setdefault("resets_at", JUNE_END)
    return Budget(gpu_hours=Decimal(gpu_hours), scope=scope, used_gpu_hours=Decimal(str(used)), **fields)


# --- the engine's decisions ------------------------------------------------------------------------------


def test_a_share_whose_budget_is_spent_starts_no_new_job_and_says_until_when():
    nlp = share(1, "nlp", RESERVE, limits={P5: 8}, budget=budget(5000, 5012.4))

    decisions = schedule(snapshot({P5: 8}, [nlp], [runnable(1, nlp, entry(P5, 1))]))

    assert decisions.admissions == []
    assert reason_of(decisions, 1) == (
        "share nlp: budget of 5,000 GPU-hours for June spent (5,012); resets 2025-07-01 00:00 UTC"
    )


def test_a_share_below_its_budget_schedules_as_usual():
    nlp = share(1, "nlp", RESERVE, limits={P5: 8}, budget=budget(5000, 4999.9))

    decisions = schedule(snapshot({P5: 8}, [nlp], [runnable(1, nlp, entry(P5, 1))]))

    assert admitted(decisions) == {1: (P5, 1, None)}


def test_a_spent_budget_starts_nothing_on_a_training_plan_either():
    nlp = share(1, "nlp", LEND, limits={P5: 2}, budget=budget(10, 10))
    dec = plan(1, "dec-p5", P5, 4)

    decisions = schedule(snapshot({P5: 2}, [nlp], [runnable(1, nlp, entry(P5, 1, "dec-p5"))], plans=(dec,)))

    assert decisions.admissions == []
    assert "budget of 10 GPU-hours for June spent (10)" in reason_of(decisions, 1)


def test_a_spent_budget_stops_nothing_that_runs_and_preempts_for_nobody():
    nlp = share(1, "nlp", LEND_AND_BORROW, limits={P5: 4}, budget=budget(100, 150), in_share_preemption=True)
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 4})
    jobs = [
        placed(1, nlp, P5, 4),
        placed(2, vision, P5, 2),  # vision borrows nothing; nlp's high-priority job could preempt its own
        runnable(3, nlp, entry(P5, 4), priority=9),
    ]

    decisions = schedule(snapshot({P5: 8}, [nlp, vision], jobs))

    assert decisions.admissions == [] and preempted(decisions) == []
    assert "spent (150)" in reason_of(decisions, 3)


def test_a_spent_borrowed_budget_lets_the_share_use_its_own_limit_but_borrow_no_more():
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 4}, budget=budget(50, 60, BudgetScope.BORROWED))
    nlp = share(1, "nlp", LEND, limits={P5: 4})
    jobs = [runnable(1, vision, entry(P5, 3)), runnable(2, vision, entry(P5, 2))]

    decisions = schedule(snapshot({P5: 8}, [nlp, vision], jobs))

    assert admitted(decisions) == {1: (P5, 3, None)}
    assert reason_of(decisions, 2) == (
        f"{P5} x2: share vision has 1 left of its limit (3/4) and borrows no more: budget of 50 GPU-hours "
        "on borrowing for June spent (60); resets 2025-07-01 00:00 UTC"
    )


def test_a_spent_borrowed_budget_falls_back_to_an_entry_within_the_limit():
    vision = share(
        2, "vision", LEND_AND_BORROW, limits={P5: 4, P4: 4}, budget=budget(50, 60, BudgetScope.BORROWED)
    )
    nlp = share(1, "nlp", LEND, limits={P5: 4})
    jobs = [placed(1, vision, P5, 4), runnable(2, vision, entry(P5, 2), entry(P4, 2))]

    decisions = schedule(snapshot({P5: 8, P4: 4}, [nlp, vision], jobs))

    assert admitted(decisions) == {2: (P4, 2, None)}


def test_a_spent_borrowed_budget_still_reclaims_its_own_lent_capacity():
    nlp = share(1, "nlp", LEND_AND_BORROW, limits={P5: 4}, budget=budget(50, 60, BudgetScope.BORROWED))
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 4})
    jobs = [placed(1, vision, P5, 8), runnable(2, nlp, entry(P5, 4))]

    decisions = schedule(snapshot({P5: 8}, [nlp, vision], jobs))

    assert preempted(decisions) == [1]
    assert admitted(decisions) == {2: (P5, 4, None)}


def test_a_reserve_share_whose_budget_is_spent_still_keeps_its_idle_capacity():
    nlp = share(1, "nlp", RESERVE, limits={P5: 4}, budget=budget(10, 20))
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 4})

    decisions = schedule(snapshot({P5: 8}, [nlp, vision], [runnable(1, vision, entry(P5, 6))]))

    assert decisions.admissions == []
    assert "RESERVE shares idle" in reason_of(decisions, 1)


def test_a_lend_and_borrow_share_whose_budget_is_spent_keeps_its_unlendable_part():
    nlp = share(
        1,
        "nlp",
        LEND_AND_BORROW,
        limits={P5: 4},
        lending_limits={P5: 1},
        budget=budget(10, 20, BudgetScope.BORROWED),
    )
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 4})

    decisions = schedule(snapshot({P5: 8}, [nlp, vision], [runnable(1, vision, entry(P5, 6))]))

    assert decisions.admissions == []


def test_a_nominated_job_of_a_share_whose_budget_ran_out_is_not_started_and_its_earmark_lapses():
    from engine import Nomination

    nlp = share(1, "nlp", LEND, limits={P5: 4}, budget=budget(10, 11))
    job = runnable(1, nlp, entry(P5, 4), nomination=Nomination(0, frozenset({9})))

    decisions = schedule(snapshot({P5: 4}, [nlp], [job]))

    assert decisions.admissions == [] and decisions.lapsed_nominations == [1]


# --- periods and words -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("period", "moment", "start", "end"),
    [
        (
            "DAY",
            datetime(2026, 12, 5, 13, 7, tzinfo=UTC),
            datetime(2026, 12, 5, tzinfo=UTC),
            datetime(2026, 12, 6, tzinfo=UTC),
        ),
        # 2026-12-05 is a Saturday: its week started on Monday 30 November.
        (
            "WEEK",
            datetime(2026, 12, 5, 13, 7, tzinfo=UTC),
            datetime(2026, 11, 30, tzinfo=UTC),
            datetime(2026, 12, 7, tzinfo=UTC),
        ),
        (
            "WEEK",
            datetime(2026, 11, 30, tzinfo=UTC),
            datetime(2026, 11, 30, tzinfo=UTC),
            datetime(2026, 12, 7, tzinfo=UTC),
        ),
        (
            "MONTH",
            datetime(2026, 12, 31, 23, 59, tzinfo=UTC),
            datetime(2026, 12, 1, tzinfo=UTC),
            datetime(2027, 1, 1, tzinfo=UTC),
        ),
        (
            "MONTH",
            datetime(2027, 2, 14, tzinfo=UTC),
            datetime(2027, 2, 1, tzinfo=UTC),
            datetime(2027, 3, 1, tzinfo=UTC),
        ),
    ],
)
def test_periods_are_utc_calendar_periods_with_weeks_from_monday(period, moment, start, end):
    assert period_start(period, moment) == start
    assert period_end(period, moment) == end


def test_periods_are_named_as_a_person_would():
    assert period_label("MONTH", datetime(2026, 12, 1, tzinfo=UTC)) == "December"
    assert period_label("WEEK", datetime(2026, 11, 30, tzinfo=UTC)) == "the week of 30 November"
    assert period_label("DAY", datetime(2026, 12, 5, tzinfo=UTC)) == "5 December"


def test_the_spent_words_read_as_in_the_rules():
    spent = budget(5000, 5012, resets_at=datetime(2027, 1, 1, tzinfo=UTC))
    assert budget_spent_words(spent) == (
        "budget of 5,000 GPU-hours for December spent (5,012); resets 2027-01-01 00:00 UTC"
    )
    assert gpu_hours_text(Decimal("12.46")) == "12.5"
    assert gpu_hours_text(Decimal("100.4")) == "100"


def test_consumption_counts_instances_times_gpus_times_hours():
    assert gpu_hours_held(4, 8, NOW, NOW.replace(hour=13, minute=30)) == Decimal(48)
    assert gpu_hours_held(4, 8, NOW, NOW) == 0


def test_a_stretch_of_time_is_cut_at_period_ends():
    start, end = datetime(2026, 12, 31, 22, tzinfo=UTC), datetime(2027, 1, 1, 2, tzinfo=UTC)
    assert split_by_period("MONTH", start, end) == [
        (start, datetime(2027, 1, 1, tzinfo=UTC)),
        (datetime(2027, 1, 1, tzinfo=UTC), end),
    ]


def test_a_spent_budgets_reset_is_when_the_queue_next_needs_a_pass():
    from engine.due import next_pass_due

    nlp = share(1, "nlp", RESERVE, limits={P5: 8}, budget=budget(10, 12))
    snap = snapshot({P5: 8}, [nlp], [runnable(1, nlp, entry(P5, 1))])

    assert next_pass_due(snap, schedule(snap)) == JUNE_END
