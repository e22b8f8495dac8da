"""Moving to a preferred entry (behaviour.md#moving-to-a-preferred-entry): a running job that opted in moves to an
earlier entry of its list when that entry has room no waiting job asks for, and waits for it nominated, its new entry
earmarked."""

from __future__ import annotations

from dataclasses import replace

from engine import JobStatus, schedule

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
    plan,
    runnable,
    share,
    snapshot,
)
from .oracle import invariant_violations


def fell_back(job_id, owner, *, minutes_ago=60, taken=True, **fields):
    """A job running on on-demand p4 x4, its second entry, that would rather be on plan dec-p5 (x4)."""
    return placed(
        job_id,
        owner,
        P4,
        4,
        scheduled_minutes_ago=minutes_ago,
        entries=(entry(P5, 4, "dec-p5"), entry(P4, 4)),
        relocate=True,
        taken=taken,
        **fields,
    )


NLP = share(1, "nlp", RESERVE, limits={P4: 8, P5: 2})


def queue(jobs, *, plan_count=8, **fields):
    return snapshot({P4: 8, P5: 2}, [NLP], jobs, plans=(plan(1, "dec-p5", P5, plan_count),), **fields)


def test_a_job_that_fell_back_moves_onto_its_plan_once_the_plan_has_room():
    snap = queue([fell_back(1, NLP)])

    decisions = schedule(snap)

    [move] = decisions.relocations
    assert (move.job_id, move.from_entry_index, move.entry_index, move.training_plan) == (1, 1, 0, "dec-p5")
    assert move.graceful and decisions.preemptions == [] and admitted(decisions) == {}
    assert move.message.startswith("moving to training plan dec-p5: 8 instances free")
    assert decisions.stats.relocations == 1

    stopping = apply_decisions(snap, decisions)
    assert [job.status for job in stopping.jobs] == [JobStatus.STOPPING]
    # While it stops, the plan's 4 instances are earmarked: a job submitted now gets only the other 4.
    newcomer = runnable(2, NLP, entry(P5, 8, "dec-p5"), entry(P4, 4))
    while_stopping = schedule(replace(stopping, jobs=stopping.jobs + (newcomer,)))
    assert admitted(while_stopping) == {2: (P4, 4, None)} and while_stopping.lapsed_nominations == []

    stopped = finish_stopping(stopping)
    placed_again = schedule(stopped)
    assert admitted(placed_again) == {1: (P5, 4, "dec-p5")}
    assert placed_again.relocations == []


def test_the_earmark_on_the_plan_keeps_a_newcomer_off_it_while_the_job_stops():
    snap = queue([fell_back(1, NLP)], plan_count=4)
    stopping = apply_decisions(snap, schedule(snap))
    newcomer = runnable(2, NLP, entry(P5, 4, "dec-p5"))

    decisions = schedule(replace(stopping, jobs=stopping.jobs + (newcomer,)))

    assert admitted(decisions) == {}
    [pending] = [p for p in decisions.pending if p.job_id == 2]
    assert (
        pending.reason
        == f"{P5} x4 on plan dec-p5: plan dec-p5 full 0/4 (4 earmarked for jobs moving onto it)"
    )


def test_no_move_onto_capacity_a_waiting_job_asks_for():
    waiting = runnable(2, NLP, entry(P5, 8, "dec-p5"))  # does not fit now, but waits for the plan
    decisions = schedule(queue([fell_back(1, NLP), waiting], plan_count=6))

    assert decisions.relocations == []


def test_a_waiting_job_of_another_type_does_not_hold_a_move_back():
    waiting = runnable(2, NLP, entry(P4, 8))
    decisions = schedule(queue([fell_back(1, NLP), waiting]))

    assert [r.job_id for r in decisions.relocations] == [1]


def test_no_move_before_the_minimum_runtime_nor_while_protected():
    assert schedule(queue([fell_back(1, NLP, minutes_ago=9)])).relocations == []
    assert schedule(queue([fell_back(1, NLP, minutes_ago=9)], relocation_min_runtime_seconds=0)).relocations
    protected = queue([fell_back(1, NLP, minutes_ago=30)], preemption_min_runtime_seconds=3600)
    assert schedule(protected).relocations == []


def test_only_running_jobs_that_opted_in_and_are_not_on_their_first_entry_move():
    assert schedule(queue([replace(fell_back(1, NLP), relocate=False)])).relocations == []
    assert schedule(queue([replace(fell_back(1, NLP), status=JobStatus.STARTING)])).relocations == []
    on_first = placed(
        1, NLP, P5, 4, plan="dec-p5", entries=(entry(P5, 4, "dec-p5"), entry(P4, 4)), relocate=True
    )
    assert schedule(queue([on_first])).relocations == []


def test_no_move_that_borrows_more():
    borrower = share(1, "vision", LEND_AND_BORROW, limits={P4: 4, P5: 1})
    lender = share(2, "idle", LEND, limits={P5: 3})
    job = placed(1, borrower, P4, 4, entries=(entry(P5, 2), entry(P4, 4)), relocate=True, taken=True)
    snap = snapshot({P4: 4, P5: 4}, [borrower, lender], [job])

    # On p4 it is within its limit; on p5 x2 it would borrow 1: no move.
    assert schedule(snap).relocations == []

    # Once it borrows on p4 too (its limit there lowered to 2), p5 x2 borrows less: it moves.
    lowered = replace(borrower, limits={P4: 2, P5: 1})
    moved = schedule(replace(snap, shares=(lowered, lender), capacity={P4: 4, P5: 4}))
    assert [(r.job_id, r.instance_type) for r in moved.relocations] == [(1, P5)]


def test_the_earliest_entry_that_fits_wins():
    nlp = share(1, "nlp", RESERVE, limits={P4: 8, "ml.g5.12xlarge": 4})
    job = placed(
        1,
        nlp,
        "ml.g5.12xlarge",
        4,
        relocate=True,
        taken=True,
        entries=(entry(P5, 4, "dec-p5"), entry(P4, 4), entry("ml.g5.12xlarge", 4)),
    )
    snap = snapshot({P4: 8, "ml.g5.12xlarge": 4}, [nlp], [job], plans=(plan(1, "dec-p5", P5, 2),))

    [move] = schedule(snap).relocations  # the plan has 2 free of the 4 needed: the on-demand p4 entry
    assert (move.entry_index, move.instance_type, move.training_plan) == (1, P4, None)


def test_at_most_max_relocations_a_pass_oldest_placement_first():
    nlp = share(1, "nlp", RESERVE, limits={P4: 16})
    jobs = [fell_back(job_id, nlp, minutes_ago=60 + job_id * (-1) ** job_id) for job_id in range(1, 5)]
    snap = snapshot({P4: 16}, [nlp], jobs, plans=(plan(1, "dec-p5", P5, 16),), max_relocations_per_pass=2)

    decisions = schedule(snap)

    oldest = sorted(jobs, key=lambda j: j.placement.scheduled_at)[:2]
    assert [r.job_id for r in decisions.relocations] == [j.id for j in oldest]


def test_a_job_not_taken_yet_moves_at_once_and_its_old_entry_is_free_in_the_same_pass():
    waiting = runnable(2, NLP, entry(P4, 8))
    snap = queue([fell_back(1, NLP, taken=False), waiting])

    decisions = schedule(snap)

    [move] = decisions.relocations
    assert not move.graceful and "stopped at once" in move.message
    assert admitted(decisions) == {1: (P5, 4, "dec-p5"), 2: (P4, 8, None)}
    assert invariant_violations(apply_decisions(snap, decisions)) == []


def test_a_move_ends_the_attempt_so_a_job_is_never_moved_twice_in_one():
    snap = queue([fell_back(1, NLP)], relocation_min_runtime_seconds=0)
    first = schedule(snap)
    stopping = apply_decisions(snap, first)

    again = schedule(replace(stopping, now=NOW))

    assert len(first.relocations) == 1 and again.relocations == [] and again.admissions == []


def test_a_relocated_job_that_no_longer_fits_its_new_entry_loses_its_nomination():
    snap = queue([fell_back(1, NLP)])
    stopped = finish_stopping(apply_decisions(snap, schedule(snap)))
    shrunk = replace(stopped, plans=(plan(1, "dec-p5", P5, 2),))

    decisions = schedule(shrunk)

    assert admitted(decisions) == {1: (P4, 4, None)}  # an ordinary head again: back on its fallback
