"""Issue 17: lending limits (behaviour.md#capacity-what-a-share-may-hold reserved), protection from early preemption
(3.4), fair borrowing (3.2)."""

from datetime import timedelta
from decimal import Decimal

from engine import IdleCapacityAssignment, schedule
from engine.accounting import share_usage
from engine.ceilings import lendable_capacity, lends, reserved_capacity
from engine.invariants import IN_USE_OR_RESERVED, share_breaches
from engine.order import head_order
from engine.preemption import protection_end

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
    preempted,
    reason_of,
    runnable,
    share,
    snapshot,
)

FAIR_SHARE = IdleCapacityAssignment.FAIR_SHARE

# --- lending limit ---------------------------------------------------------------------------------------


def test_reserved_capacity_is_what_a_share_may_not_lend():
    assert reserved_capacity(RESERVE, 8) == 8
    assert reserved_capacity(LEND, 8) == 0
    assert reserved_capacity(LEND, 8, 3) == 5
    assert reserved_capacity(LEND_AND_BORROW, 8, 8) == 0
    assert reserved_capacity(LEND_AND_BORROW, 8, 0) == 8


def test_a_share_with_lending_limit_zero_lends_nothing():
    assert lends(LEND) and lends(LEND, 2) and not lends(LEND, 0) and not lends(RESERVE)
    assert lendable_capacity(LEND, 8, 2, 3) == 3
    assert lendable_capacity(LEND, 8, 6, 3) == 2
    assert lendable_capacity(RESERVE, 8, 0) == 0


def test_a_borrower_takes_only_the_lending_limit_of_an_idle_lender():
    nlp = share(1, "nlp", LEND, limits={P5: 8}, lending_limits={P5: 3})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 0})
    jobs = [runnable(1, vision, entry(P5, 4)), runnable(2, vision, entry(P5, 3))]

    decisions = schedule(snapshot({P5: 8}, [nlp, vision], jobs))

    assert admitted(decisions) == {2: (P5, 3, None)}
    assert "lendable capacity exhausted" in reason_of(decisions, 1)


def test_the_kept_part_starts_jobs_without_preempting_the_borrowers_of_the_lent_part():
    nlp = share(1, "nlp", LEND, limits={P5: 8}, lending_limits={P5: 3})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 0})
    jobs = [placed(1, vision, P5, 3), runnable(2, nlp, entry(P5, 5))]

    decisions = schedule(snapshot({P5: 8}, [nlp, vision], jobs))

    assert admitted(decisions) == {2: (P5, 5, None)}
    assert preempted(decisions) == []


def test_the_lent_part_comes_back_by_reclaim():
    nlp = share(1, "nlp", LEND, limits={P5: 8}, lending_limits={P5: 3})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 0})
    jobs = [placed(1, vision, P5, 3), runnable(2, nlp, entry(P5, 8))]

    decisions = schedule(snapshot({P5: 8}, [nlp, vision], jobs))

    assert admitted(decisions) == {2: (P5, 8, None)}
    assert preempted(decisions) == [1]


def test_invariant_b_counts_what_a_lending_share_keeps():
    nlp = share(1, "nlp", LEND, limits={P5: 8}, lending_limits={P5: 3})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 0})

    assert share_breaches({P5: 8}, [nlp, vision], {(2, P5): 3}) == []
    [breach] = share_breaches({P5: 8}, [nlp, vision], {(2, P5): 4})
    assert (breach.rule, breach.held, breach.allowed) == (IN_USE_OR_RESERVED, 9, 8)


# --- protection from early preemption --------------------------------------------------------------------


def reclaim_scene(minutes_ago: int, min_runtime: int):
    nlp = share(1, "nlp", LEND, limits={P5: 4})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 4})
    jobs = [
        placed(1, vision, P5, 4, scheduled_minutes_ago=minutes_ago + 1),
        placed(2, vision, P5, 4, scheduled_minutes_ago=minutes_ago),
        runnable(3, nlp, entry(P5, 4)),
    ]
    return snapshot({P5: 8}, [nlp, vision], jobs, preemption_min_runtime_seconds=min_runtime)


def test_a_protected_job_is_no_reclaim_victim():
    decisions = schedule(reclaim_scene(minutes_ago=5, min_runtime=600))

    assert preempted(decisions) == []
    until = (NOW + timedelta(minutes=5)).isoformat(timespec="seconds")
    assert reason_of(decisions, 3) == (
        f"{P5} x4: environment full 8/8 (4 borrowed by vision), waits for protection from early preemption "
        f"to end: would preempt job #2 of share vision, protected until {until}"
    )


def test_a_job_past_its_protection_is_reclaimed():
    decisions = schedule(reclaim_scene(minutes_ago=11, min_runtime=600))

    assert preempted(decisions) == [2]
    assert admitted(decisions) == {3: (P5, 4, None)}


def test_without_protection_the_newest_borrower_is_reclaimed_at_once():
    decisions = schedule(reclaim_scene(minutes_ago=1, min_runtime=0))

    assert preempted(decisions) == [2]


def test_reclaim_passes_over_a_protected_job_to_an_older_one():
    nlp = share(1, "nlp", LEND, limits={P5: 4})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 2})
    jobs = [
        placed(1, vision, P5, 2, scheduled_minutes_ago=120),
        placed(2, vision, P5, 2, scheduled_minutes_ago=90),
        placed(3, vision, P5, 2, scheduled_minutes_ago=1),
        runnable(4, nlp, entry(P5, 2)),
    ]
    decisions = schedule(snapshot({P5: 6}, [nlp, vision], jobs, preemption_min_runtime_seconds=600))

    assert preempted(decisions) == [2]


def test_a_protected_job_is_no_in_share_victim():
    nlp = share(1, "nlp", RESERVE, limits={P5: 4}, in_share_preemption=True)
    jobs = [placed(1, nlp, P5, 4, scheduled_minutes_ago=2), runnable(2, nlp, entry(P5, 4), priority=5)]

    decisions = schedule(snapshot({P5: 4}, [nlp], jobs, preemption_min_runtime_seconds=300))

    assert preempted(decisions) == []
    assert "would preempt job #1 of share nlp, protected until" in reason_of(decisions, 2)


def test_a_lowered_capacity_stops_protected_jobs_all_the_same():
    nlp = share(1, "nlp", LEND_AND_BORROW, limits={P5: 2})
    jobs = [placed(1, nlp, P5, 4, scheduled_minutes_ago=1)]

    decisions = schedule(snapshot({P5: 2}, [nlp], jobs, preemption_min_runtime_seconds=3600))

    assert preempted(decisions) == [1]


# --- fair borrowing --------------------------------------------------------------------------------------


def fair_scene(assignment, **weights):
    owner = share(1, "owner", LEND, limits={P5: 8})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 0}, **weights.get("vision", {}))
    nlp = share(3, "nlp", LEND_AND_BORROW, limits={P5: 0}, **weights.get("nlp", {}))
    jobs = [
        placed(1, vision, P5, 2),
        runnable(2, vision, entry(P5, 2)),  # submitted first
        runnable(3, vision, entry(P5, 2)),
        runnable(4, nlp, entry(P5, 2)),
        runnable(5, nlp, entry(P5, 2)),
    ]
    return snapshot({P5: 8}, [owner, vision, nlp], jobs, idle_capacity_assignment=assignment)


def test_fifo_hands_idle_capacity_to_the_earliest_submission():
    decisions = schedule(fair_scene(IdleCapacityAssignment.FIFO))

    assert sorted(admitted(decisions)) == [2, 3, 4]


def test_fair_share_hands_idle_capacity_to_the_share_that_borrows_least():
    decisions = schedule(fair_scene(FAIR_SHARE))

    assert sorted(admitted(decisions)) == [2, 4, 5]
    assert [a.job_id for a in decisions.admissions] == [4, 2, 5]


def test_fair_share_weight_lets_a_share_borrow_more():
    decisions = schedule(fair_scene(FAIR_SHARE, vision={"fair_share_weight": Decimal(3)}))

    assert [a.job_id for a in decisions.admissions] == [4, 2, 3]


def test_fair_share_never_passes_over_a_higher_priority_head():
    owner = share(1, "owner", LEND, limits={P5: 4})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 0})
    nlp = share(3, "nlp", LEND_AND_BORROW, limits={P5: 0})
    jobs = [
        placed(1, vision, P5, 2),
        runnable(2, vision, entry(P5, 2), priority=9),
        runnable(3, nlp, entry(P5, 2)),
    ]

    decisions = schedule(snapshot({P5: 4}, [owner, vision, nlp], jobs, idle_capacity_assignment=FAIR_SHARE))

    assert [a.job_id for a in decisions.admissions] == [2]


def test_dominant_borrowed_share_takes_the_type_borrowed_most_against_its_lendable_capacity():
    owner = share(1, "owner", LEND, limits={P5: 8, P4: 2})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 0, P4: 0})
    nlp = share(3, "nlp", LEND_AND_BORROW, limits={P5: 0, P4: 0})
    # vision borrows 3 of 8 p5 (0.375); nlp 1 of 2 p4 (0.5): vision's head goes first.
    jobs = [
        placed(1, vision, P5, 3),
        placed(2, nlp, P4, 1),
        runnable(3, nlp, entry(P5, 1)),
        runnable(4, vision, entry(P5, 1)),
    ]
    snap = snapshot({P5: 8, P4: 2}, [owner, vision, nlp], jobs, idle_capacity_assignment=FAIR_SHARE)

    assert [job.id for job in head_order(snap)] == [4, 3]


def test_a_shares_row_says_what_it_may_lend_and_what_it_keeps_beyond_its_lending_limit():
    rows, _, _ = share_usage(
        capacity={P5: 12},
        limits={1: {P5: 8}, 2: {P5: 2}, 3: {P5: 2}},
        strategies={1: LEND, 2: LEND_AND_BORROW, 3: RESERVE},
        usage={(1, P5): 1, (2, P5): 4},
        lending_limits={1: {P5: 3}},
    )
    row = {r.share_id: r for r in rows}
    # a holds 1 of 8 and lends at most 3: 3 lendable (2 of them lent to b), 4 kept, 1 simply idle
    assert (row[1].lendable, row[1].lent, row[1].kept, row[1].idle) == (3, 2, 4, 5)
    assert row[1].lendable == lendable_capacity(LEND, 8, 1, 3)
    assert (row[2].lendable, row[3].lendable) == (0, 0)  # b holds all of its own; RESERVE lends nothing


# --- protection from early preemption: the one rule, for the engine and the pages -----------------------


def test_a_job_is_protected_until_it_has_run_the_minimum_since_it_was_scheduled():
    scheduled = NOW - timedelta(minutes=4)
    assert protection_end(scheduled_at=scheduled, min_runtime_seconds=600, now=NOW) == NOW + timedelta(
        minutes=6
    )
    assert protection_end(scheduled_at=scheduled, min_runtime_seconds=240, now=NOW) is None  # ends now
    assert protection_end(scheduled_at=scheduled, min_runtime_seconds=0, now=NOW) is None
    assert protection_end(scheduled_at=None, min_runtime_seconds=600, now=NOW) is None  # never scheduled
