"""Graceful stops and nomination (behaviour.md#preemption, last bullets; behaviour.md#a-jobs-life): a taken victim keeps
its capacity while STOPPING, its preemptor is nominated and placed first once the victims are gone, and nobody else
takes the earmarked instances nor preempts again on its behalf."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from engine import IdleCapacityAssignment, JobStatus, Nomination, PreemptionKind, schedule

from .builders import (
    LEND,
    LEND_AND_BORROW,
    NOW,
    P4,
    P5,
    admitted,
    apply_decisions,
    entry,
    finish_stopping,
    placed,
    plan,
    preempted,
    reason_of,
    runnable,
    share,
    snapshot,
)
from .oracle import invariant_violations

LENDER = share(1, "nlp", LEND, limits={P5: 8})
BORROWER = share(2, "vision", LEND_AND_BORROW, limits={P4: 1})
OTHER_BORROWER = share(3, "speech", LEND_AND_BORROW, limits={P4: 1})


def stopping(job_id: int, owner, instance_type: str, count: int, *, deadline_in: int = 60, **fields):
    """A job STOPPING on `count` of `instance_type`, its grace period ending `deadline_in` seconds from NOW."""
    job = placed(job_id, owner, instance_type, count, taken=True, **fields)
    return replace(job, status=JobStatus.STOPPING, stop_deadline=NOW + timedelta(seconds=deadline_in))


def nominated(job, entry_index: int, *victim_ids: int):
    return replace(job, nomination=Nomination(entry_index, frozenset(victim_ids)))


# --- the preemptor of a taken victim is nominated; of an untaken one, placed ------------------------------


def test_a_taken_victim_goes_stopping_and_its_preemptor_is_nominated_not_placed():
    snap = snapshot(
        {P5: 8},
        [LENDER, BORROWER],
        [
            placed(1, BORROWER, P5, 4, taken=True, scheduled_minutes_ago=90),
            placed(2, BORROWER, P5, 4, taken=True, scheduled_minutes_ago=30),
            runnable(10, LENDER, entry(P5, 4)),
        ],
    )

    decisions = schedule(snap)

    [preemption] = decisions.preemptions
    assert (preemption.job_id, preemption.graceful, preemption.kind) == (2, True, PreemptionKind.RECLAIM)
    assert admitted(decisions) == {}
    [nomination] = decisions.nominations
    assert (nomination.job_id, nomination.entry_index, nomination.victim_ids) == (10, 0, (2,))
    assert (nomination.instance_type, nomination.instance_count) == (P5, 4)
    assert reason_of(decisions, 10).startswith(f"waiting for {P5} x4 held by stopping job #2 until")
    # The victim is STOPPING, not RUNNABLE: it has no pending reason.
    assert [p.job_id for p in decisions.pending] == [10]
    after = apply_decisions(snap, decisions)
    assert invariant_violations(after) == []


def test_an_untaken_victim_stops_at_once_and_its_preemptor_is_placed_in_the_same_pass():
    snap = snapshot(
        {P5: 8},
        [LENDER, BORROWER],
        [
            placed(1, BORROWER, P5, 4, taken=True, scheduled_minutes_ago=90),
            placed(2, BORROWER, P5, 4, taken=False, scheduled_minutes_ago=30),
            runnable(10, LENDER, entry(P5, 4)),
        ],
    )

    decisions = schedule(snap)

    [preemption] = decisions.preemptions
    assert (preemption.job_id, preemption.graceful) == (2, False)
    assert admitted(decisions) == {10: (P5, 4, None)}
    assert decisions.nominations == []


def test_a_preemptor_with_taken_and_untaken_victims_is_nominated_and_the_untaken_ones_stop_at_once():
    snap = snapshot(
        {P5: 8},
        [LENDER, BORROWER],
        [
            placed(1, BORROWER, P5, 4, taken=True, scheduled_minutes_ago=90),
            placed(2, BORROWER, P5, 4, taken=False, scheduled_minutes_ago=30),
            runnable(10, LENDER, entry(P5, 6)),
        ],
    )

    decisions = schedule(snap)

    assert {(p.job_id, p.graceful) for p in decisions.preemptions} == {(1, True), (2, False)}
    assert admitted(decisions) == {}
    assert [(n.job_id, n.victim_ids) for n in decisions.nominations] == [(10, (1,))]


# --- the first pass after the victims are gone ------------------------------------------------------------


def test_the_nominated_job_is_placed_first_once_its_victims_are_gone():
    early_bird = share(4, "early", LEND_AND_BORROW, limits={P4: 1})
    snap = snapshot(
        {P5: 8},
        [LENDER, BORROWER, early_bird],
        [
            placed(1, BORROWER, P5, 4, taken=True),
            nominated(runnable(10, LENDER, entry(P5, 4), priority=0), 0, 2),
            # Without the nomination this head comes first (share under its limit, higher priority, older).
            runnable(5, early_bird, entry(P5, 4), priority=9),
        ],
    )

    decisions = schedule(snap)

    assert [a.job_id for a in decisions.admissions] == [10]
    assert decisions.preemptions == [] and decisions.nominations == []
    assert decisions.lapsed_nominations == []
    assert "environment full" in reason_of(decisions, 5)


def test_the_whole_sequence_stopping_then_placed_first():
    snap = snapshot(
        {P5: 8},
        [LENDER, BORROWER],
        [
            placed(1, BORROWER, P5, 8, taken=True),
            runnable(10, LENDER, entry(P5, 4)),
            runnable(11, BORROWER, entry(P5, 4), priority=9),
        ],
    )
    first = schedule(snap)
    # Job 10 reclaims job 1 and is nominated for its own victim; job 11, which cannot reclaim, is nobody's
    # nominee: job 1's instances are on their way to job 10, not to it.
    assert preempted(first) == [1]
    assert [(n.job_id, n.victim_ids) for n in first.nominations] == [(10, (1,))]
    during = apply_decisions(snap, first)

    second = schedule(during)  # job 1 still STOPPING
    assert second.admissions == second.preemptions == second.nominations == []

    # The nominated job comes first (job 11 has the higher priority), then job 11 takes the rest.
    third = schedule(finish_stopping(apply_decisions(during, second)))
    assert [a.job_id for a in third.admissions] == [10, 11]
    assert third.preemptions == [] and third.lapsed_nominations == []


# --- earmarks ---------------------------------------------------------------------------------------------


def test_another_head_that_would_fit_in_the_earmarked_instances_waits_with_a_reason():
    snap = snapshot(
        {P5: 8},
        [LENDER, BORROWER],
        [
            stopping(1, BORROWER, P5, 4, deadline_in=90),
            nominated(runnable(10, LENDER, entry(P5, 6)), 0, 1),
            runnable(30, BORROWER, entry(P5, 4), priority=9),
        ],
    )

    decisions = schedule(snap)

    # 4 are free now, but once job 1 is gone job 10 holds 6 of the 8: job 30 would take 2 of them.
    assert admitted(decisions) == {}
    assert decisions.preemptions == []
    assert reason_of(decisions, 30) == (
        f"{P5} x4: room held for nominated jobs: 6 earmarked until stopping jobs are gone (4 held by "
        f"stopping job #1)"
    )
    deadline = (NOW + timedelta(seconds=90)).isoformat(timespec="seconds")
    assert reason_of(decisions, 10) == f"waiting for {P5} x6 held by stopping job #1 until {deadline}"
    assert decisions.lapsed_nominations == []


def test_a_head_that_fits_beside_the_earmark_is_placed():
    snap = snapshot(
        {P5: 8},
        [LENDER, BORROWER],
        [
            stopping(1, BORROWER, P5, 4),
            nominated(runnable(10, LENDER, entry(P5, 6)), 0, 1),
            runnable(30, BORROWER, entry(P5, 2)),
        ],
    )

    assert admitted(schedule(snap)) == {30: (P5, 2, None)}


def test_no_second_preemption_on_behalf_of_a_nominated_job():
    snap = snapshot(
        {P5: 8},
        [LENDER, BORROWER, OTHER_BORROWER],
        [
            stopping(1, BORROWER, P5, 4),
            placed(3, OTHER_BORROWER, P5, 4, taken=True),
            nominated(runnable(10, LENDER, entry(P5, 4)), 0, 1),
        ],
    )

    decisions = schedule(snap)

    assert decisions.preemptions == [] and decisions.nominations == [] and admitted(decisions) == {}
    assert reason_of(decisions, 10).startswith(f"waiting for {P5} x4 held by stopping job #1 until")


def test_a_nominated_job_that_fits_elsewhere_while_its_victims_stop_is_placed_there():
    snap = snapshot(
        {P5: 8, P4: 3},
        [share(1, "nlp", LEND, limits={P5: 6, P4: 2}), BORROWER],
        [
            stopping(1, BORROWER, P5, 8),
            nominated(runnable(10, LENDER, entry(P4, 2), entry(P5, 4)), 1, 1),
        ],
    )

    decisions = schedule(snap)

    assert admitted(decisions) == {10: (P4, 2, None)}
    assert decisions.lapsed_nominations == []


# --- lapses -----------------------------------------------------------------------------------------------


def test_a_nomination_lapses_when_its_entry_no_longer_fits_and_the_victims_are_gone():
    snap = snapshot(
        {P5: 8},
        [LENDER, BORROWER, OTHER_BORROWER],
        [
            # Its victim is gone, but a job placed since holds the room (not reclaimable: just placed).
            placed(3, LENDER, P5, 6, scheduled_minutes_ago=0),
            nominated(runnable(10, LENDER, entry(P5, 4)), 0, 1),
        ],
    )

    decisions = schedule(snap)

    assert decisions.lapsed_nominations == [10]
    assert decisions.nominations == [] and admitted(decisions) == {}
    assert "share nlp" in reason_of(decisions, 10) or "environment" in reason_of(decisions, 10)


def test_a_nomination_lapses_at_once_when_capacity_is_lowered_below_it():
    snap = snapshot(
        {P5: 4},
        [share(1, "nlp", LEND, limits={P5: 4}), BORROWER],
        [
            stopping(1, BORROWER, P5, 4),
            nominated(runnable(10, LENDER, entry(P5, 6)), 0, 1),
        ],
    )

    decisions = schedule(snap)

    assert decisions.lapsed_nominations == [10]
    assert decisions.nominations == [] and decisions.preemptions == []
    assert "needs more than the environment's 4 instances" in reason_of(decisions, 10)


def test_a_nomination_lapses_when_its_share_is_disabled_and_frees_the_earmark():
    snap = snapshot(
        {P5: 8},
        [replace(LENDER, enabled=False), BORROWER],
        [
            stopping(1, BORROWER, P5, 4),
            nominated(runnable(10, LENDER, entry(P5, 6)), 0, 1),
            runnable(30, BORROWER, entry(P5, 4)),
        ],
    )

    decisions = schedule(snap)

    assert decisions.lapsed_nominations == [10]
    assert admitted(decisions) == {30: (P5, 4, None)}
    assert reason_of(decisions, 10).startswith("share nlp is disabled")


def test_a_nomination_lapses_when_the_queue_is_disabled():
    snap = snapshot(
        {P5: 8},
        [LENDER, BORROWER],
        [stopping(1, BORROWER, P5, 4), nominated(runnable(10, LENDER, entry(P5, 6)), 0, 1)],
        queue_enabled=False,
    )

    assert schedule(snap).lapsed_nominations == [10]


def test_a_nominated_job_that_times_out_loses_its_nomination():
    job = nominated(
        runnable(10, LENDER, entry(P5, 6), max_pending_seconds=60, runnable_since=NOW - timedelta(hours=1)),
        0,
        1,
    )
    decisions = schedule(snapshot({P5: 8}, [LENDER, BORROWER], [stopping(1, BORROWER, P5, 4), job]))

    assert [t.job_id for t in decisions.timeouts] == [10]
    assert decisions.lapsed_nominations == [10]


# --- STOPPING jobs hold capacity and are never victims ----------------------------------------------------


def test_stopping_jobs_count_in_the_sums_and_are_never_victims():
    snap = snapshot(
        {P5: 8},
        [LENDER, BORROWER],
        [stopping(1, BORROWER, P5, 8), runnable(10, LENDER, entry(P5, 4))],
    )

    decisions = schedule(snap)

    # Job 1 already leaves: job 10 waits for it, RUNNABLE and nominated by nobody; nobody is preempted.
    assert decisions.preemptions == [] and admitted(decisions) == {} and decisions.nominations == []
    assert "waits for instances being freed" in reason_of(decisions, 10)
    assert invariant_violations(apply_decisions(snap, decisions)) == []


def test_a_stopping_job_is_neither_drained_nor_stopped_for_a_lowered_plan():
    ending = plan(1, "dec-p5", P5, 2, ends_in_hours=0.1)
    snap = snapshot(
        {P5: 8},
        [LENDER],
        [stopping(1, LENDER, P5, 2, plan="dec-p5")],
        plans=[replace(ending, instance_count=1)],
    )

    decisions = schedule(snap)

    assert decisions.drains == [] and decisions.preemptions == []


# --- plan drains and LIMIT_REDUCED ------------------------------------------------------------------------


def test_the_plan_drain_of_a_taken_job_is_graceful_and_it_is_not_placed_again_in_the_pass():
    ending = plan(1, "dec-p5", P5, 2, ends_in_hours=0.1)
    job = placed(1, LENDER, P5, 2, plan="dec-p5", taken=True, entries=(entry(P5, 2, "dec-p5"), entry(P5, 2)))
    untaken = placed(2, LENDER, P5, 2, plan="dec-p5", entries=(entry(P5, 2, "dec-p5"), entry(P5, 2)))
    snap = snapshot({P5: 8}, [LENDER], [job, untaken], plans=[replace(ending, instance_count=4)])

    decisions = schedule(snap)

    assert {(d.job_id, d.graceful) for d in decisions.drains} == {(1, True), (2, False)}
    # The untaken job goes back to RUNNABLE and is placed on demand at once; the taken one is STOPPING.
    assert admitted(decisions) == {2: (P5, 2, None)}


def test_limit_reduced_of_taken_jobs_is_graceful_and_stops_nobody_more_while_they_stop():
    lender = share(1, "nlp", LEND, limits={P5: 4})
    snap = snapshot(
        {P5: 4},  # lowered from 8
        [lender, BORROWER],
        [
            placed(job_id, BORROWER, P5, 2, taken=True, scheduled_minutes_ago=job_id)
            for job_id in (1, 2, 3, 4)
        ],
    )

    first = schedule(snap)
    assert [(p.job_id, p.kind, p.graceful) for p in first.preemptions] == [
        (1, PreemptionKind.LIMIT_REDUCED, True),
        (2, PreemptionKind.LIMIT_REDUCED, True),
    ]
    during = apply_decisions(snap, first)
    # Counting STOPPING capacity the type is still over; once they are gone it holds.
    assert invariant_violations(during) != []
    assert invariant_violations(finish_stopping(during)) == []
    assert invariant_violations(finish_stopping(during, {1})) != []

    for _ in range(3):  # passes while they stop stop nobody more
        decisions = schedule(during)
        assert decisions.preemptions == [] and decisions.admissions == []
        during = apply_decisions(during, decisions)

    assert schedule(finish_stopping(during, {1})).preemptions == []
    settled = schedule(finish_stopping(during))
    assert settled.preemptions == []


def test_limit_reduced_counts_stopping_victims_of_reclaim_as_gone():
    lender = share(1, "nlp", LEND, limits={P5: 6})
    snap = snapshot(
        {P5: 6},  # lowered from 8; job 1 already stops for a reclaim
        [lender, BORROWER],
        [
            stopping(1, BORROWER, P5, 2),
            placed(2, BORROWER, P5, 2, taken=True),
            placed(3, BORROWER, P5, 4, taken=True),
        ],
    )

    decisions = schedule(snap)

    # 8 in use with job 1; 6 without it: nothing more to give back.
    assert decisions.preemptions == []


def test_an_untaken_limit_reduced_victim_stops_at_once():
    lender = share(1, "nlp", LEND, limits={P5: 4})
    snap = snapshot(
        {P5: 4},
        [lender, BORROWER],
        [
            placed(1, BORROWER, P5, 2, taken=False, scheduled_minutes_ago=10),
            placed(2, BORROWER, P5, 4, taken=True, scheduled_minutes_ago=60),
        ],
    )

    decisions = schedule(snap)

    assert [(p.job_id, p.graceful) for p in decisions.preemptions] == [(1, False)]
    assert invariant_violations(apply_decisions(snap, decisions)) == []


def test_nominated_jobs_are_placed_first_in_fair_share_order():
    # Two nominations wait for the same stopping job; there is room now for one of them only. The share that
    # borrows least goes first under FAIR_SHARE, as any head does (behaviour.md#order), the earlier submission under
    # FIFO.
    lender = share(1, "nlp", LEND, limits={P5: 4})
    early, late = (share(i, name, LEND_AND_BORROW) for i, name in [(2, "vision"), (3, "speech")])
    jobs = [
        placed(1, early, P5, 1),
        stopping(9, lender, P5, 1),
        replace(runnable(10, early, entry(P5, 2)), nomination=Nomination(0, frozenset({9}))),
        replace(runnable(11, late, entry(P5, 2)), nomination=Nomination(0, frozenset({9}))),
    ]
    fifo = snapshot({P5: 5}, [lender, early, late], jobs)
    fair = replace(fifo, idle_capacity_assignment=IdleCapacityAssignment.FAIR_SHARE)

    assert list(admitted(schedule(fifo))) == [10]
    decisions = schedule(fair)
    assert list(admitted(decisions)) == [11]
    assert decisions.lapsed_nominations == []
