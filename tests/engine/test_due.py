"""When a queue next needs a pass if nothing in it changes (`engine.due.next_pass_due`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from engine import Plan, Snapshot, schedule
from engine.due import next_pass_due
from tests.engine.builders import NOW, P5, entry, placed, runnable, share

NLP = share(1, "nlp", limits={P5: 2})


def snapshot(*jobs, plans=(), capacity=2, drain_seconds=1800) -> Snapshot:
    return Snapshot(
        now=NOW,
        capacity={P5: capacity},
        shares=(NLP,),
        jobs=tuple(jobs),
        plans=tuple(plans),
        plan_drain_seconds=drain_seconds,
    )


def due(snap: Snapshot):
    return next_pass_due(snap, schedule(snap))


def test_a_settled_queue_is_never_due():
    assert due(snapshot(placed(1, NLP, P5, 2), runnable(2, NLP, entry(P5, 1)))) is None


def test_an_empty_queue_is_never_due():
    assert due(snapshot()) is None


def test_a_waiting_job_is_due_just_after_its_max_pending_seconds():
    waiting = runnable(
        2, NLP, entry(P5, 1), runnable_since=NOW - timedelta(minutes=10), max_pending_seconds=3600
    )
    assert due(snapshot(placed(1, NLP, P5, 2), waiting)) == NOW + timedelta(minutes=50, seconds=1)


def test_a_placed_job_has_no_timeout_due():
    assert due(snapshot(placed(1, NLP, P5, 1, max_pending_seconds=60))) is None


def test_the_earliest_of_plan_start_drain_start_and_timeout_wins():
    plan = Plan(
        id=1,
        name="reserved",
        instance_type=P5,
        instance_count=2,
        start_time=NOW + timedelta(hours=2),
        end_time=NOW + timedelta(hours=5),
        share_ids=frozenset({NLP.id}),
    )
    waiting = runnable(2, NLP, entry(P5, 1), runnable_since=NOW, max_pending_seconds=4 * 3600)
    busy = placed(1, NLP, P5, 2)
    assert due(snapshot(busy, plans=[plan])) == NOW + timedelta(hours=2)
    started = Plan(
        id=1,
        name="reserved",
        instance_type=P5,
        instance_count=2,
        start_time=NOW - timedelta(hours=1),
        end_time=NOW + timedelta(hours=5),
        share_ids=frozenset({NLP.id}),
    )
    # the drain window opens half an hour before the end; the waiting job times out before that
    assert due(snapshot(busy, plans=[started])) == NOW + timedelta(hours=4, minutes=30)
    assert due(snapshot(busy, waiting, plans=[started])) == NOW + timedelta(hours=4, seconds=1)
    early = runnable(3, NLP, entry(P5, 1), runnable_since=NOW, max_pending_seconds=600)
    assert due(snapshot(busy, early, plans=[started])) == NOW + timedelta(minutes=10, seconds=1)


def test_a_pass_that_stopped_jobs_is_followed_by_one_at_once():
    # Capacity lowered below use: the pass preempts (LIMIT_REDUCED), and jobs ahead may fit in what it freed
    snap = snapshot(placed(1, NLP, P5, 2), placed(2, NLP, P5, 2), capacity=2)
    decisions = schedule(snap)
    assert decisions.preemptions
    assert next_pass_due(snap, decisions) == NOW


def test_a_stopping_job_makes_a_pass_due_just_after_its_deadline():
    from engine import types as et

    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    deadline = now + timedelta(seconds=120)
    stopping = et.Job(
        id=1,
        share_id=1,
        priority=0,
        submitted_at=now - timedelta(hours=1),
        entries=(et.Entry("gpu", 1),),
        status=et.JobStatus.STOPPING,
        placement=et.Placement("gpu", 1, None, now - timedelta(minutes=30)),
        taken=True,
        stop_deadline=deadline,
    )
    snapshot = et.Snapshot(
        now=now,
        capacity={"gpu": 1},
        shares=(et.Share(id=1, name="a", strategy=et.Strategy.LEND, limits={"gpu": 1}),),
        jobs=(stopping,),
    )

    assert next_pass_due(snapshot, et.Decisions()) == deadline + timedelta(seconds=1)
