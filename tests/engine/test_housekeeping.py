"""Plan drains, pending timeouts and LIMIT_REDUCED preemptions (behaviour.md#housekeeping and
behaviour.md#capacity-what-a-share-may-hold)."""

from datetime import timedelta

from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine import PreemptionKind, schedule
from engine.housekeeping import pending_too_long, pending_too_long_after, pending_too_long_before

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


def test_jobs_on_a_draining_plan_are_drained_and_fall_back_in_the_same_pass():
    nlp = share(1, "nlp", LEND, limits={P5: 8})
    ending = plan(1, "dec-p5", P5, 4, ends_in_hours=0.25)
    on_plan = placed(101, nlp, P5, 4, plan="dec-p5", entries=(entry(P5, 4, "dec-p5"), entry(P5, 4)))

    decisions = schedule(snapshot({P5: 8}, [nlp], [on_plan], plans=(ending,)))

    [drain] = decisions.drains
    assert (drain.job_id, drain.training_plan, drain.instance_type, drain.instances) == (101, "dec-p5", P5, 4)
    assert drain.message == (
        "training plan dec-p5 ends at 2025-06-02T12:15:00+00:00, within the 1800 s drain window: stopped and "
        "returned to RUNNABLE"
    )
    assert admitted(decisions) == {101: (P5, 4, None)}
    assert decisions.preemptions == []
    assert (decisions.stats.plan_drains, decisions.stats.fallbacks) == (1, 1)


def test_jobs_on_an_ended_or_removed_plan_are_drained():
    nlp = share(1, "nlp", LEND, limits={P5: 8})
    ended = plan(1, "old", P5, 4, started_hours_ago=48, ends_in_hours=-1)
    jobs = [placed(101, nlp, P5, 4, plan="old"), placed(102, nlp, P5, 4, plan="deleted")]

    decisions = schedule(snapshot({P5: 8}, [nlp], jobs, plans=(ended,), plan_drain_seconds=600))

    assert [(d.job_id, d.training_plan) for d in decisions.drains] == [(102, "deleted"), (101, "old")]
    assert (
        reason_of(decisions, 101)
        == f"{P5} x4 on plan old: plan old expired (ended at 2025-06-02T11:00:00+00:00)"
    )
    assert (
        decisions.drains[0].message
        == "training plan deleted no longer exists: stopped and returned to RUNNABLE"
    )


def test_a_plan_outside_its_drain_window_keeps_its_jobs():
    nlp = share(1, "nlp", LEND, limits={P5: 8})
    dec = plan(1, "dec-p5", P5, 4, ends_in_hours=1)

    decisions = schedule(snapshot({P5: 8}, [nlp], [placed(101, nlp, P5, 4, plan="dec-p5")], plans=(dec,)))

    assert decisions.drains == [] and decisions.pending == []


def test_runnable_jobs_that_waited_longer_than_max_pending_seconds_time_out():
    nlp = share(1, "nlp", LEND, limits={P5: 8})
    jobs = [
        runnable(1, nlp, entry(P5, 1), max_pending_seconds=3600, runnable_since=NOW - timedelta(hours=2)),
        # No runnable_since: measured from submission, a day ago.
        runnable(2, nlp, entry(P5, 1), max_pending_seconds=3600),
        runnable(3, nlp, entry(P5, 1), max_pending_seconds=3600, runnable_since=NOW - timedelta(minutes=59)),
        runnable(
            4, nlp, entry(P5, 1), max_pending_seconds=3600, runnable_since=NOW - timedelta(seconds=3600)
        ),
    ]

    decisions = schedule(snapshot({P5: 8}, [nlp], jobs))

    assert [t.job_id for t in decisions.timeouts] == [1, 2]
    assert (
        decisions.timeouts[0].message
        == "waited 7200 s to be placed, more than its max_pending_seconds of 3600"
    )
    assert admitted(decisions) == {3: (P5, 1, None), 4: (P5, 1, None)}
    assert decisions.stats.timeouts == 2
    assert {p.job_id for p in decisions.pending} == set()


def test_lowered_capacity_stops_over_limit_jobs_in_victim_order_then_puts_back_those_not_needed():
    nlp = share(1, "nlp", LEND, limits={P5: 4})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 4})
    jobs = [
        placed(100, nlp, P5, 4, priority=0),
        placed(101, vision, P5, 4, priority=1),
        placed(102, vision, P5, 2, priority=0),
        placed(103, vision, P5, 2, priority=5),
        runnable(1, vision, entry(P5, 2)),
    ]

    # Capacity was 12 and is now 8: vision holds 8 against a limit of 4. Victim order takes 102 then 101;
    # with 101 gone 102's return still leaves every invariant holding, so 102 is put back.
    decisions = schedule(snapshot({P5: 8}, [nlp, vision], jobs))

    assert preempted(decisions) == [101]
    assert {p.kind for p in decisions.preemptions} == {PreemptionKind.LIMIT_REDUCED}
    assert {p.preemptor_job_id for p in decisions.preemptions} == {None}
    assert decisions.preemptions[0].message == (
        f"job #101 of share vision preempted to give back 4 {P5}: capacity lowered to 8 with 12 in use "
        f"(vision at 8/4)"
    )
    assert (
        reason_of(decisions, 101)
        == "preempted in this pass because capacity was lowered (will be retried next pass)"
    )
    # The environment is full again at 8/8: job 1 waits.
    assert admitted(decisions) == {}
    assert decisions.stats.preemptions["PREEMPTED_LIMIT_REDUCED"] == 1


def test_lowered_capacity_takes_a_shares_jobs_first_only_while_that_share_is_over_its_limit():
    nlp = share(1, "nlp", LEND, limits={P5: 4})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 2})
    ops = share(3, "ops", LEND_AND_BORROW, limits={P5: 2})
    jobs = [
        placed(100, nlp, P5, 4, priority=9),
        placed(101, vision, P5, 2, priority=0),  # vision at 4/2: taking 101 brings it back to its limit
        placed(102, vision, P5, 2, priority=1),  # so 102 is not offered before ops's borrower
        placed(103, ops, P5, 2, priority=2),
        placed(104, ops, P5, 2, priority=3),
    ]

    # Capacity was 12 and is now 8 (the limits' sum): 4 too many.
    decisions = schedule(snapshot({P5: 8}, [nlp, vision, ops], jobs))

    assert preempted(decisions) == [101, 103]


def test_a_capacity_cut_restores_the_reserve_guarantee_with_no_reserve_job_waiting():
    ops = share(1, "ops", RESERVE, limits={P5: 4})  # idle, and keeps its 4
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 2})
    jobs = [
        placed(101, vision, P5, 1, priority=0),  # taken first, then put back: 102 alone is enough
        placed(102, vision, P5, 4, priority=1),
        placed(103, vision, P5, 1, priority=5),
    ]

    # Capacity was 10 and is now 6: vision's 6 are no longer outside what ops keeps (4 + 6 > 6).
    decisions = schedule(snapshot({P5: 6}, [ops, vision], jobs))

    assert preempted(decisions) == [102]
    assert decisions.preemptions[0].kind == PreemptionKind.LIMIT_REDUCED


def test_capacity_lowered_below_what_in_limit_shares_hold_preempts_them_too():
    nlp = share(1, "nlp", LEND, limits={P5: 8})
    jobs = [placed(101, nlp, P5, 4, priority=1), placed(102, nlp, P5, 4, priority=0)]

    decisions = schedule(snapshot({P5: 4}, [nlp], jobs))

    assert preempted(decisions) == [102]
    assert decisions.preemptions[0].kind == PreemptionKind.LIMIT_REDUCED


def test_raising_a_reserve_limit_takes_back_what_borrowers_hold_of_it():
    ops = share(1, "ops", RESERVE, limits={P5: 8})  # was 4
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 4})
    jobs = [
        placed(101, vision, P5, 4, priority=0),
        placed(102, vision, P5, 4, priority=1),
        placed(103, vision, P5, 4),
    ]

    decisions = schedule(snapshot({P5: 12}, [ops, vision], jobs))

    assert sorted(preempted(decisions)) == [101, 103]
    assert {p.kind for p in decisions.preemptions} == {PreemptionKind.LIMIT_REDUCED}


def test_a_lowered_share_limit_makes_its_jobs_reclaimable():
    nlp = share(1, "nlp", LEND, limits={P5: 2})  # lowered from 4 while holding 4
    vision = share(2, "vision", LEND, limits={P5: 6})
    jobs = [
        placed(101, nlp, P5, 2, priority=9),
        placed(102, nlp, P5, 2, priority=9),
        placed(103, vision, P5, 2),
        runnable(1, vision, entry(P5, 4)),
    ]

    decisions = schedule(snapshot({P5: 8}, [nlp, vision], jobs))

    assert admitted(decisions) == {1: (P5, 4, None)}
    assert preempted(decisions) == [102]
    assert decisions.preemptions[0].kind == PreemptionKind.RECLAIM


def test_a_plan_holding_more_than_its_instance_count_gives_back_its_newest_jobs():
    nlp = share(1, "nlp", LEND, limits={P4: 1})
    dec = plan(1, "dec-p5", P5, 4)  # was 6
    jobs = [
        placed(101, nlp, P5, 2, plan="dec-p5", scheduled_minutes_ago=30),
        placed(102, nlp, P5, 2, plan="dec-p5", scheduled_minutes_ago=10),
        placed(103, nlp, P5, 2, plan="dec-p5", scheduled_minutes_ago=20),
    ]

    decisions = schedule(snapshot({P4: 1}, [nlp], jobs, plans=(dec,)))

    assert preempted(decisions) == [102]
    assert decisions.preemptions[0].kind == PreemptionKind.LIMIT_REDUCED
    assert decisions.preemptions[0].message == (
        f"job #102 of share nlp preempted to give back 2 {P5} of training plan dec-p5, which holds 6 of the 4 "
        f"it may use now"
    )


def test_a_plan_gives_back_its_lowest_priority_jobs_before_its_newest():
    nlp = share(1, "nlp", LEND, limits={P4: 1})
    dec = plan(1, "dec-p5", P5, 4)  # was 6
    jobs = [
        placed(101, nlp, P5, 2, plan="dec-p5", priority=5, scheduled_minutes_ago=10),
        placed(102, nlp, P5, 2, plan="dec-p5", priority=0, scheduled_minutes_ago=30),
        placed(103, nlp, P5, 2, plan="dec-p5", priority=1, scheduled_minutes_ago=20),
    ]

    decisions = schedule(snapshot({P4: 1}, [nlp], jobs, plans=(dec,)))

    assert preempted(decisions) == [102]


def test_a_plan_gives_back_only_what_it_must_after_the_put_back():
    nlp = share(1, "nlp", LEND, limits={P4: 1})
    dec = plan(1, "dec-p5", P5, 1)  # was 3
    jobs = [
        placed(101, nlp, P5, 1, plan="dec-p5", scheduled_minutes_ago=10),  # first in victim order
        placed(102, nlp, P5, 2, plan="dec-p5", scheduled_minutes_ago=30),
    ]

    # 101 then 102 are taken; 101's return leaves the plan at 1/1, so only 102 is stopped.
    decisions = schedule(snapshot({P4: 1}, [nlp], jobs, plans=(dec,)))

    assert preempted(decisions) == [102]
    assert decisions.preemptions[0].kind == PreemptionKind.LIMIT_REDUCED


def test_a_plan_moved_to_start_later_gives_back_its_jobs():
    nlp = share(1, "nlp", LEND, limits={P4: 1})
    moved = plan(1, "dec-p5", P5, 4, started_hours_ago=-1)

    decisions = schedule(snapshot({P4: 1}, [nlp], [placed(101, nlp, P5, 2, plan="dec-p5")], plans=(moved,)))

    assert preempted(decisions) == [101]
    assert decisions.drains == []


def test_a_drained_job_does_not_time_out_in_the_pass_that_drains_it():
    nlp = share(1, "nlp", LEND, limits={P4: 4})
    ending = plan(1, "dec-p5", P5, 4, ends_in_hours=0.1)
    job = placed(
        101, nlp, P5, 4, plan="dec-p5", max_pending_seconds=60, entries=(entry(P5, 4, "dec-p5"), entry(P4, 4))
    )

    decisions = schedule(snapshot({P4: 4}, [nlp], [job], plans=(ending,)))

    assert decisions.timeouts == []
    assert admitted(decisions) == {101: (P4, 4, None)}


def waited_job(waited: int, max_pending: int | None, since_submission: bool):
    """A RUNNABLE job that became runnable two days before NOW (counted from its submission, or from a later
    return to RUNNABLE), and the moment `waited` microseconds after that."""
    nlp = share(1, "nlp", LEND, limits={P5: 8})
    became_runnable = NOW - timedelta(days=2)
    job = runnable(
        101,
        nlp,
        entry(P5, 1),
        max_pending_seconds=max_pending,
        submitted_at=became_runnable if since_submission else became_runnable - timedelta(hours=5),
        runnable_since=None if since_submission else became_runnable,
    )
    return job, became_runnable + timedelta(microseconds=waited)


@settings(max_examples=200, deadline=None)
@given(
    waited=st.integers(min_value=0, max_value=4 * 86_400_000_000),
    max_pending=st.one_of(st.none(), st.integers(min_value=0, max_value=3 * 86_400)),
    since_submission=st.booleans(),
)
@example(waited=3_600_000_000, max_pending=3_600, since_submission=False)  # exactly at the limit: not yet
@example(waited=3_600_000_001, max_pending=3_600, since_submission=True)
def test_pending_too_long_after_is_the_moment_pending_too_long_starts_to_hold(
    waited, max_pending, since_submission
):
    job, now = waited_job(waited, max_pending, since_submission)

    after = pending_too_long_after(job)

    assert pending_too_long(job, now) == (after is not None and now > after)


@settings(max_examples=300, deadline=None)
@given(
    waited=st.integers(min_value=-86_400_000_000, max_value=4 * 86_400_000_000),
    max_pending=st.one_of(
        st.integers(min_value=0, max_value=3 * 86_400),
        st.integers(min_value=-(10**13), max_value=10**13),
    ),
    since_submission=st.booleans(),
)
@example(waited=3_600_000_000, max_pending=3_600, since_submission=False)  # exactly at the limit: not yet
@example(waited=3_600_000_001, max_pending=3_600, since_submission=True)
@example(waited=0, max_pending=10**12, since_submission=True)  # the moment is before the first datetime
def test_pending_too_long_before_is_the_start_before_which_a_job_is_pending_too_long(
    waited, max_pending, since_submission
):
    job, now = waited_job(waited, max_pending, since_submission)

    moment = pending_too_long_before(now, max_pending)

    if moment is None:
        assert abs(max_pending) > 10**10
    else:
        assert pending_too_long(job, now) == (NOW - timedelta(days=2) < moment)  # it became runnable then
