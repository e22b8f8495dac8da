"""Nominations read exactly (behaviour.md#preemption, the paragraph after "Victims stop gracefully"): only a job whose
own preemption stopped someone is nominated, and it waits only for its own victims; capacity held by other
STOPPING jobs is held, and a job that would fit once they are gone waits RUNNABLE, preempting nobody for that
entry or a later one; a nominee that fits on free capacity is placed at once; a RESERVE share may start jobs
on instances free now while jobs stopped for a lowered capacity still stop."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from engine import JobStatus, Nomination, PreemptionKind, schedule

from .builders import (
    LEND,
    LEND_AND_BORROW,
    NOW,
    P4,
    P5,
    RESERVE,
    admitted,
    apply_decisions,
    entry,
    finish_stopping,
    placed,
    preempted,
    reason_of,
    runnable,
    share,
    snapshot,
)
from .oracle import invariant_violations


def stopping(job_id: int, owner, instance_type: str, count: int, **fields):
    """A job STOPPING (cancelled, drained or stopped for a lowered capacity: nobody's victim)."""
    job = placed(job_id, owner, instance_type, count, taken=True, **fields)
    return replace(job, status=JobStatus.STOPPING, stop_deadline=NOW + timedelta(seconds=60))


# --- a job that would fit once STOPPING jobs are gone waits, RUNNABLE, not nominated ----------------------


def test_a_job_waiting_for_a_cancelled_jobs_instances_is_not_nominated():
    reserve = share(1, "nlp", RESERVE, limits={P5: 2})
    snap = snapshot({P5: 2}, [reserve], [stopping(1, reserve, P5, 1), runnable(2, reserve, entry(P5, 2))])

    decisions = schedule(snap)

    assert decisions.nominations == [] and decisions.preemptions == [] and admitted(decisions) == {}
    assert reason_of(decisions, 2) == (
        f"{P5} x2: waits for instances being freed (1 held by stopping job #1), preempting nobody for room "
        f"already on its way"
    )


def test_a_job_that_fits_once_a_stopping_job_is_gone_preempts_nobody_and_is_not_nominated():
    reserve = share(1, "nlp", RESERVE, limits={P5: 6}, in_share_preemption=True)
    snap = snapshot(
        {P5: 6},
        [reserve],
        [
            placed(1, reserve, P5, 4, priority=0, taken=True),
            stopping(2, reserve, P5, 1),
            runnable(3, reserve, entry(P5, 2), priority=1),
        ],
    )

    decisions = schedule(snap)

    assert decisions.preemptions == [] and decisions.nominations == [] and admitted(decisions) == {}
    assert "waits for instances being freed" in reason_of(decisions, 3)


def test_a_job_waiting_for_instances_being_freed_preempts_for_no_later_entry_either():
    lender = share(1, "nlp", LEND, limits={P5: 2, P4: 4})
    borrower = share(2, "vision", LEND_AND_BORROW, limits={})
    snap = snapshot(
        {P5: 2, P4: 4},
        [lender, borrower],
        [
            stopping(1, lender, P5, 1),
            placed(2, borrower, P4, 4, taken=True),
            # Entry 1 fits once job 1 is gone; entry 2 could reclaim job 2.
            runnable(3, lender, entry(P5, 2), entry(P4, 4)),
        ],
    )

    decisions = schedule(snap)

    assert decisions.preemptions == [] and decisions.nominations == [] and admitted(decisions) == {}
    reason = reason_of(decisions, 3)
    assert reason.startswith(f"{P5} x2: waits for instances being freed")
    second = reason.split("; ")[1]
    assert second.startswith(f"{P4} x4: environment full 4/4")
    assert second.endswith("no preemption while an earlier entry waits for instances being freed")


def test_the_instances_of_a_cancelled_job_earmark_nothing_for_a_later_head():
    # Without the cancelled job's instances counted as free to it, job 2 is no nominee: the next pass after
    # they are free takes heads in plain order, and job 5 of the higher priority is placed.
    reserve = share(1, "nlp", RESERVE, limits={P5: 2})
    snap = snapshot({P5: 2}, [reserve], [stopping(1, reserve, P5, 1), runnable(2, reserve, entry(P5, 2))])
    first = schedule(snap)
    assert [n.job_id for n in first.nominations] == []
    after = apply_decisions(snap, first)
    after = replace(after, jobs=(*after.jobs, runnable(5, reserve, entry(P5, 2), priority=9)))

    second = schedule(finish_stopping(after, {1}))

    assert admitted(second) == {5: (P5, 2, None)}


# --- a nominee waits only for its own victims -------------------------------------------------------------


def test_a_nominee_waits_only_for_its_own_victims():
    s1 = share(1, "s1", RESERVE, limits={P5: 2}, in_share_preemption=True)
    s2 = share(2, "s2", RESERVE, limits={P5: 1})
    snap = snapshot(
        {P5: 3},
        [s1, s2],
        [
            stopping(1, s2, P5, 1),
            placed(2, s1, P5, 1, priority=0, taken=True),
            runnable(3, s1, entry(P5, 2), priority=1),
        ],
    )

    decisions = schedule(snap)

    assert [(p.job_id, p.kind, p.graceful) for p in decisions.preemptions] == [
        (2, PreemptionKind.IN_SHARE, True)
    ]
    assert [(n.job_id, n.victim_ids) for n in decisions.nominations] == [(3, (2,))]
    assert "stopping job #1" not in reason_of(decisions, 3)
    assert reason_of(decisions, 3).startswith(f"waiting for {P5} x2 held by stopping job #2 until")


def test_no_job_is_nominated_for_instances_a_stopping_job_holds_that_is_not_its_victim():
    # Job 3 could reclaim job 2, but its x4 also needs job 1's instances, which are on their way out for
    # nobody: it may neither be placed on them nor nominated for them before they are free.
    lender = share(1, "nlp", LEND, limits={P5: 4})
    borrower = share(2, "vision", LEND_AND_BORROW, limits={})
    snap = snapshot(
        {P5: 4},
        [lender, borrower],
        [
            stopping(1, borrower, P5, 2),
            placed(2, borrower, P5, 2, taken=True),
            runnable(3, lender, entry(P5, 4)),
        ],
    )

    decisions = schedule(snap)

    assert decisions.preemptions == [] and decisions.nominations == [] and admitted(decisions) == {}
    # Once job 1 is gone, the reclaim follows.
    later = schedule(finish_stopping(snap, {1}))
    assert preempted(later) == [2]
    assert [(n.job_id, n.victim_ids) for n in later.nominations] == [(3, (2,))]


# --- a nominee that fits on free capacity is placed at once -----------------------------------------------


def test_a_nominee_that_fits_on_instances_another_preemption_freed_at_once_is_placed_in_the_same_pass():
    lender = share(1, "nlp", LEND, limits={P5: 8})
    borrower = share(2, "vision", LEND_AND_BORROW, limits={})
    other = share(3, "speech", LEND_AND_BORROW, limits={})
    snap = snapshot(
        {P5: 8},
        [lender, borrower, other],
        [
            placed(1, borrower, P5, 2, priority=0, taken=True),
            placed(2, other, P5, 4, priority=1, taken=False, scheduled_minutes_ago=30),
            placed(3, other, P5, 2, priority=1, taken=True, scheduled_minutes_ago=90),
            runnable(10, lender, entry(P5, 2)),
            runnable(11, lender, entry(P5, 2)),
        ],
    )

    decisions = schedule(snap)

    # Job 10 reclaims job 1 (taken: STOPPING); job 11 reclaims job 2, which stops at once and frees 4 of which
    # job 11 needs 2: job 10 fits on the other 2 and is placed at once; job 1 still stops.
    assert [(p.job_id, p.preemptor_job_id, p.graceful) for p in decisions.preemptions] == [
        (1, 10, True),
        (2, 11, False),
    ]
    assert set(admitted(decisions)) == {10, 11}
    assert decisions.nominations == []
    after = apply_decisions(snap, decisions)
    assert [j.id for j in after.jobs if j.status == JobStatus.STOPPING] == [1]
    assert invariant_violations(after) == []


def test_a_nominee_from_an_earlier_pass_that_fits_on_free_capacity_is_placed_at_once():
    lender = share(1, "nlp", LEND, limits={P5: 8})
    borrower = share(2, "vision", LEND_AND_BORROW, limits={})
    snap = snapshot(
        {P5: 8},
        [lender, borrower],
        [
            stopping(1, borrower, P5, 4),
            replace(runnable(10, lender, entry(P5, 4)), nomination=Nomination(0, frozenset({1}))),
        ],
    )

    decisions = schedule(snap)

    assert admitted(decisions) == {10: (P5, 4, None)}
    assert decisions.lapsed_nominations == [] and decisions.nominations == []


# --- a nominee that could not fit even once its victims are gone loses its earmark ------------------------


def test_a_nominee_loses_its_earmark_when_capacity_is_lowered_below_its_entry():
    lender = share(1, "nlp", LEND, limits={P5: 4})
    borrower = share(2, "vision", LEND_AND_BORROW, limits={})
    snap = snapshot(
        {P5: 5},  # lowered from 8 while job 1 stops for job 10
        [lender, borrower, share(3, "speech", RESERVE, limits={P5: 1})],
        [
            stopping(1, borrower, P5, 4),
            placed(2, borrower, P5, 1, taken=True),
            replace(runnable(10, lender, entry(P5, 4)), nomination=Nomination(0, frozenset({1}))),
        ],
    )

    decisions = schedule(snap)

    assert decisions.lapsed_nominations == [10]
    assert 10 not in {n.job_id for n in decisions.nominations}


# --- RESERVE starts on instances free now while jobs stopped for a lowered capacity still stop ------------


def test_a_reserve_share_starts_on_free_instances_while_jobs_stopped_for_a_lowered_capacity_still_stop():
    reserve = share(1, "nlp", RESERVE, limits={P5: 4})
    borrower = share(2, "vision", LEND_AND_BORROW, limits={P5: 2})
    snap = snapshot(
        {P5: 6},  # lowered from 8: the borrower's 4 leave the RESERVE share's 4 only 2
        [reserve, borrower],
        [
            placed(1, borrower, P5, 2, taken=True, scheduled_minutes_ago=10),
            placed(2, borrower, P5, 2, taken=True, scheduled_minutes_ago=60),
        ],
    )
    first = schedule(snap)
    assert [(p.job_id, p.kind, p.graceful) for p in first.preemptions] == [
        (1, PreemptionKind.LIMIT_REDUCED, True)
    ]
    during = apply_decisions(snap, first)
    waiting = (runnable(5, reserve, entry(P5, 2)), runnable(6, reserve, entry(P5, 2)))
    during = replace(during, jobs=(*during.jobs, *waiting))

    decisions = schedule(during)

    # 2 are free now; the RESERVE share's x2 makes no invariant worse now (its use stays within what it
    # keeps) and all hold once job 1 is gone. Job 6 then fits only once job 1 is gone: it waits for it.
    assert admitted(decisions) == {5: (P5, 2, None)}
    assert decisions.preemptions == [] and decisions.nominations == []
    assert "waits for instances being freed" in reason_of(decisions, 6)
    after = apply_decisions(during, decisions)
    assert invariant_violations(finish_stopping(after)) == []


def test_a_borrower_does_not_start_while_jobs_stopped_for_a_lowered_capacity_still_stop():
    reserve = share(1, "nlp", RESERVE, limits={P5: 4})
    borrower = share(2, "vision", LEND_AND_BORROW, limits={P5: 2})
    snap = snapshot(
        {P5: 6},
        [reserve, borrower],
        [
            stopping(1, borrower, P5, 2),
            placed(2, borrower, P5, 2, taken=True),
            runnable(5, borrower, entry(P5, 1)),
        ],
    )

    decisions = schedule(snap)

    assert admitted(decisions) == {}
