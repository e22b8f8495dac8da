"""Share queues, the order of heads across shares, FIFO modes and work conservation (behaviour.md#order)."""

from datetime import timedelta

import pytest

from engine import Ordering, Snapshot, schedule
from engine.order import head_order
from engine.scheduler import PassRun

from .builders import (
    G5,
    LEND,
    LEND_AND_BORROW,
    NOW,
    P4,
    P5,
    admitted,
    entry,
    placed,
    reason_of,
    runnable,
    share,
    snapshot,
)


def test_heads_of_shares_under_their_limit_are_served_before_others():
    nlp = share(1, "nlp", LEND, limits={P5: 2})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 2})
    jobs = [
        placed(101, vision, P5, 2),
        runnable(1, vision, entry(P5, 2), priority=9999),  # vision is at its limit: it waits for nlp
        runnable(2, nlp, entry(P5, 2), priority=0),
    ]

    decisions = schedule(snapshot({P5: 4}, [nlp, vision], jobs))

    assert admitted(decisions) == {2: (P5, 2, None)}
    assert decisions.preemptions == []


@pytest.mark.parametrize(
    ("nlp_job", "vision_job", "winner"),
    [
        ({"priority": 1}, {"priority": 5}, 2),
        ({"submitted_at": NOW - timedelta(hours=2)}, {"submitted_at": NOW - timedelta(hours=1)}, 1),
        ({"submitted_at": NOW - timedelta(hours=1)}, {"submitted_at": NOW - timedelta(hours=1)}, 1),
    ],
    ids=["higher-priority-first", "earlier-submission-first", "lower-id-first"],
)
def test_among_shares_under_their_limit_heads_go_by_priority_then_submission_then_id(
    nlp_job, vision_job, winner
):
    nlp = share(1, "nlp", LEND_AND_BORROW, limits={P5: 1})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 1})
    # Each job borrows 3 of the 4-instance free pool: only one of them fits.
    jobs = [runnable(1, nlp, entry(P5, 4), **nlp_job), runnable(2, vision, entry(P5, 4), **vision_job)]

    decisions = schedule(snapshot({P5: 6}, [nlp, vision], jobs))

    assert list(admitted(decisions)) == [winner]


def test_a_share_that_reaches_its_limit_during_the_pass_waits_behind_shares_still_under_theirs():
    nlp = share(1, "nlp", LEND_AND_BORROW, limits={P5: 2})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 2})
    jobs = [
        runnable(1, nlp, entry(P5, 2), priority=5),
        runnable(2, nlp, entry(P5, 2), priority=5),  # would borrow vision's idle capacity if it went first
        runnable(3, vision, entry(P5, 2), priority=0),
    ]

    decisions = schedule(snapshot({P5: 4}, [nlp, vision], jobs))

    assert [a.job_id for a in decisions.admissions] == [1, 3]
    assert decisions.preemptions == []


def test_each_share_queue_goes_by_priority_then_submission_then_id():
    nlp = share(1, "nlp", LEND, limits={P5: 3})
    jobs = [
        runnable(1, nlp, entry(P5, 1), priority=0, submitted_at=NOW - timedelta(hours=3)),
        runnable(2, nlp, entry(P5, 1), priority=5, submitted_at=NOW - timedelta(hours=1)),
        runnable(3, nlp, entry(P5, 1), priority=5, submitted_at=NOW - timedelta(hours=2)),
        runnable(4, nlp, entry(P5, 1), priority=5, submitted_at=NOW - timedelta(hours=2)),
    ]

    decisions = schedule(snapshot({P5: 3}, [nlp], jobs))

    assert [a.job_id for a in decisions.admissions] == [3, 4, 2]


def test_best_effort_fifo_skips_a_job_that_cannot_be_placed_and_tries_the_next():
    nlp = share(1, "nlp", LEND, limits={P5: 4})
    jobs = [runnable(1, nlp, entry(P5, 8), priority=9), runnable(2, nlp, entry(P5, 2), priority=0)]

    decisions = schedule(snapshot({P5: 8}, [nlp], jobs, ordering=Ordering.BEST_EFFORT_FIFO))

    assert admitted(decisions) == {2: (P5, 2, None)}


def test_strict_fifo_holds_a_share_behind_a_job_that_cannot_be_placed():
    nlp = share(1, "nlp", LEND, limits={P5: 4})
    vision = share(2, "vision", LEND, limits={P5: 4})
    jobs = [
        runnable(1, nlp, entry(P5, 8), priority=9),
        runnable(2, nlp, entry(P5, 2), priority=0),
        runnable(3, nlp, entry(P5, 1), priority=0),
        runnable(4, vision, entry(P5, 2)),
    ]

    decisions = schedule(snapshot({P5: 8}, [nlp, vision], jobs, ordering=Ordering.STRICT_FIFO))

    assert admitted(decisions) == {4: (P5, 2, None)}
    assert reason_of(decisions, 1).startswith(f"{P5} x8: share nlp has 4 left of its limit")
    assert reason_of(decisions, 2) == "held by STRICT_FIFO behind job #1, which cannot be placed yet"
    assert reason_of(decisions, 3) == "held by STRICT_FIFO behind job #1, which cannot be placed yet"
    assert [(p.job_id, p.queue_position) for p in decisions.pending] == [(1, 1), (2, 2), (3, 3)]
    # The held jobs were never looked at.
    assert decisions.stats.jobs_considered == 2


def test_no_job_is_placed_while_the_queue_is_disabled_but_housekeeping_still_runs():
    nlp = share(1, "nlp", LEND, limits={P5: 4})
    jobs = [
        runnable(1, nlp, entry(P5, 1)),
        runnable(2, nlp, entry(P5, 1), max_pending_seconds=60),
    ]

    decisions = schedule(snapshot({P5: 4}, [nlp], jobs, queue_enabled=False))

    assert decisions.admissions == []
    assert [t.job_id for t in decisions.timeouts] == [2]
    assert reason_of(decisions, 1) == "job queue is disabled: no job is placed until it is enabled"
    assert decisions.stats.jobs_considered == 0


def test_runnable_jobs_of_a_disabled_share_are_not_considered_but_its_placed_jobs_keep_running():
    nlp = share(1, "nlp", LEND, limits={P5: 4}, enabled=False)
    jobs = [placed(101, nlp, P5, 2), runnable(1, nlp, entry(P5, 1))]

    decisions = schedule(snapshot({P5: 4}, [nlp], jobs))

    assert decisions.admissions == [] and decisions.preemptions == []
    assert (
        reason_of(decisions, 1)
        == "share nlp is disabled: its RUNNABLE jobs are not placed until it is enabled"
    )
    assert decisions.stats.jobs_considered == 0


def test_capacity_a_preemption_frees_beyond_its_need_goes_to_a_job_skipped_earlier():
    nlp = share(1, "nlp", LEND, limits={P5: 4})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 2})
    ops = share(3, "ops", LEND_AND_BORROW, limits={P5: 2})
    jobs = [
        placed(101, vision, P5, 6),
        runnable(1, ops, entry(P5, 3), priority=9),  # first, but would borrow: skipped
        runnable(2, nlp, entry(P5, 4), priority=0),  # reclaims all 6 of vision's job to use 4
    ]

    decisions = schedule(snapshot({P5: 8}, [nlp, vision, ops], jobs))

    assert [(a.job_id, a.borrowed) for a in decisions.admissions] == [(2, 0), (1, 1)]
    assert decisions.stats.jobs_considered == 2


def mixed_queue() -> Snapshot:
    """Shares under and over their limit, several priorities, ties on priority and submission time."""
    under = share(1, "under", LEND_AND_BORROW, limits={P5: 4})
    over = share(2, "over", LEND_AND_BORROW, limits={P5: 2})
    also_under = share(3, "also-under", LEND, limits={P4: 2})
    paused = share(4, "paused", LEND, limits={P4: 2}, enabled=False)
    tie = NOW - timedelta(hours=1)
    # Nothing fits: every runnable job asks for a type the environment does not have, so none is placed.
    nowhere = entry(G5, 1)
    jobs = [
        placed(101, under, P5, 1),
        placed(102, over, P5, 3),  # over its limit of 2 (a borrower)
        runnable(1, over, nowhere, priority=90),
        runnable(2, under, nowhere, priority=10, submitted_at=tie),
        runnable(3, under, nowhere, priority=10, submitted_at=tie - timedelta(minutes=5)),
        runnable(4, also_under, nowhere, priority=10, submitted_at=tie),
        runnable(5, over, nowhere, priority=50),
        runnable(6, under, nowhere, priority=30),
        runnable(7, also_under, nowhere, priority=0),
        runnable(8, over, nowhere, priority=90, submitted_at=NOW - timedelta(days=3)),
        runnable(9, paused, nowhere, priority=99),
    ]
    return snapshot({P5: 8, P4: 4}, [under, over, also_under, paused], jobs)


def test_head_order_puts_heads_of_shares_under_their_limit_first_then_priority_submission_id():
    order = [job.id for job in head_order(mixed_queue())]

    # under and also-under: 6 (30); 3, then 2 and 4 tied on priority and submission (lower id first); 7.
    # over: 8 (90, older), 1 (90), 5 (50). The disabled share's job is not ordered.
    assert order == [6, 3, 2, 4, 7, 8, 1, 5]


def test_head_order_is_the_order_in_which_the_pass_considers_heads_when_none_is_placed(monkeypatch):
    considered = []

    def consider_only(self, job, heads, *, allow_preemption):
        considered.append(job.id)
        return False

    monkeypatch.setattr(PassRun, "try_place", consider_only)
    snap = mixed_queue()

    schedule(snap)

    assert considered == [job.id for job in head_order(snap)]
