"""Why a job is still pending, and where it stands in its share's queue
(behaviour.md#why-pending-and-when-it-will-start)."""

from engine import schedule

from .builders import (
    G5,
    LEND,
    LEND_AND_BORROW,
    P4,
    P5,
    RESERVE,
    apply_decisions,
    entry,
    placed,
    reason_of,
    runnable,
    share,
    snapshot,
)


def test_the_reason_names_each_entry_in_preference_order():
    nlp = share(1, "nlp", LEND_AND_BORROW, limits={P5: 8, P4: 4}, borrow_limit=50)
    vision = share(2, "vision", LEND_AND_BORROW, limits={P4: 8})
    ops = share(3, "ops", LEND, limits={P4: 4})
    jobs = [
        placed(101, nlp, P5, 12),
        placed(102, nlp, P4, 4),
        placed(103, vision, P4, 12),
        runnable(1, nlp, entry(P5, 4), entry(P4, 2)),
    ]

    decisions = schedule(snapshot({P5: 12, P4: 16}, [nlp, vision, ops], jobs))

    assert reason_of(decisions, 1) == (
        f"{P5} x4: borrow limit reached (4 borrowed of at most 4); "
        f"{P4} x2: environment full 16/16 (4 borrowed by vision), would need preemption but none possible "
        f"(no reclaim while share nlp would be over its limit, in-share preemption disabled)"
    )


def test_the_reason_says_when_the_share_is_at_its_limit_and_cannot_borrow():
    nlp = share(1, "nlp", RESERVE, limits={P5: 8})

    decisions = schedule(snapshot({P5: 8}, [nlp], [placed(101, nlp, P5, 8), runnable(1, nlp, entry(P5, 4))]))

    assert reason_of(decisions, 1) == f"{P5} x4: share nlp at its limit 8/8 and RESERVE cannot borrow"


def test_the_reason_says_when_a_share_has_no_quota_for_the_type():
    nlp = share(1, "nlp", LEND, limits={P4: 8})

    decisions = schedule(snapshot({P5: 8, P4: 8}, [nlp], [runnable(1, nlp, entry(P5, 4))]))

    assert reason_of(decisions, 1) == f"{P5} x4: share nlp has no quota for {P5} and LEND cannot borrow"


def test_the_reason_says_when_the_environment_does_not_offer_the_type_or_is_too_small():
    nlp = share(1, "nlp", LEND_AND_BORROW, limits={P5: 8})

    decisions = schedule(snapshot({P5: 8}, [nlp], [runnable(1, nlp, entry(G5, 1), entry(P5, 9))]))

    assert reason_of(decisions, 1) == (
        f"{G5} x1: type not offered by the environment; "
        f"{P5} x9: needs more than the environment's 8 instances"
    )


def test_the_reason_says_how_much_is_free_when_a_borrower_does_not_fit():
    vision = share(1, "vision", LEND_AND_BORROW, limits={P5: 8})

    decisions = schedule(
        snapshot({P5: 8}, [vision], [placed(101, vision, P5, 6), runnable(1, vision, entry(P5, 4))])
    )

    assert reason_of(decisions, 1) == (
        f"{P5} x4: only 2 of 8 free in the environment, would need preemption but none possible "
        f"(no reclaim while share vision would be over its limit, in-share preemption disabled)"
    )


def test_the_reason_says_how_much_is_lendable_besides_reserve_idle_capacity():
    ops = share(1, "ops", RESERVE, limits={P5: 4})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 2})

    decisions = schedule(snapshot({P5: 8}, [ops, vision], [runnable(1, vision, entry(P5, 6))]))

    assert reason_of(decisions, 1).startswith(
        f"{P5} x6: lendable capacity exhausted (only 4 lendable, 4 held by RESERVE shares idle)"
    )


def test_the_reason_explains_why_in_share_preemption_cannot_help():
    nlp = share(1, "nlp", LEND, limits={P5: 4}, in_share_preemption=True)
    jobs = [placed(101, nlp, P5, 4, priority=5), runnable(1, nlp, entry(P5, 2), priority=5)]

    decisions = schedule(snapshot({P5: 4}, [nlp], jobs))

    assert reason_of(decisions, 1) == (
        f"{P5} x2: share nlp at its limit 4/4 and LEND cannot borrow, would need preemption but none "
        f"possible (no reclaim while share nlp would be over its limit, "
        f"no lower-priority jobs of share nlp on {P5})"
    )


def test_the_reason_says_when_there_is_no_borrower_to_reclaim_from():
    nlp = share(1, "nlp", LEND, limits={P5: 4})
    vision = share(2, "vision", LEND, limits={P5: 4})
    jobs = [placed(101, nlp, P5, 2), placed(102, vision, P5, 4), runnable(1, nlp, entry(P5, 2))]

    # Capacity 7 against limits of 8 is not allowed, but the engine still explains itself.
    decisions = schedule(snapshot({P5: 7}, [nlp, vision], jobs))

    assert reason_of(decisions, 1) == (
        f"{P5} x2: only 1 of 7 free in the environment, would need preemption but none possible "
        f"(no over-limit borrowers, in-share preemption disabled)"
    )


def test_queue_positions_count_the_runnable_jobs_left_in_each_share_in_queue_order():
    nlp = share(1, "nlp", LEND, limits={P5: 1})
    vision = share(2, "vision", LEND, limits={P4: 1})
    jobs = [
        placed(101, nlp, P5, 1),
        runnable(1, nlp, entry(P5, 1), priority=0),
        runnable(2, nlp, entry(P5, 1), priority=5),
        runnable(3, nlp, entry(P5, 1), priority=5),
        runnable(4, vision, entry(P4, 2)),
        runnable(5, vision, entry(P4, 1)),  # placed: no position
    ]

    decisions = schedule(snapshot({P5: 1, P4: 1}, [nlp, vision], jobs))

    positions = {p.job_id: p.queue_position for p in decisions.pending}
    assert positions == {2: 1, 3: 2, 1: 3, 4: 1}


def test_a_preempted_job_is_pending_with_its_place_in_the_queue_and_says_why():
    nlp = share(1, "nlp", RESERVE, limits={P5: 4}, in_share_preemption=True)
    jobs = [
        placed(101, nlp, P5, 4, priority=3),
        runnable(1, nlp, entry(P5, 4), priority=9),
        runnable(2, nlp, entry(P5, 4), priority=1),
    ]

    decisions = schedule(snapshot({P5: 4}, [nlp], jobs))

    assert [(p.job_id, p.queue_position) for p in decisions.pending] == [(101, 1), (2, 2)]
    assert (
        reason_of(decisions, 101)
        == "preempted in this pass by job #1 of share nlp (will be retried next pass)"
    )
    # Next pass, the reason is about capacity again.
    after = schedule(apply_decisions(snapshot({P5: 4}, [nlp], jobs), decisions))
    assert reason_of(after, 101).startswith(f"{P5} x4: share nlp at its limit 4/4")


def test_every_job_left_runnable_has_a_reason():
    nlp = share(1, "nlp", LEND, limits={P5: 2})
    jobs = [runnable(i, nlp, entry(P5, 1 + i % 3)) for i in range(1, 20)]

    decisions = schedule(snapshot({P5: 2}, [nlp], jobs))

    placed_ids = {a.job_id for a in decisions.admissions}
    assert {p.job_id for p in decisions.pending} == {job.id for job in jobs} - placed_ids
    assert all(p.reason for p in decisions.pending)
