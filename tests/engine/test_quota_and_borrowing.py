"""Own quota, borrowing, lending and the borrow limit (behaviour.md#capacity-what-a-share-may-hold and
behaviour.md#preference-evaluation)."""

from engine import schedule

from .builders import (
    LEND,
    LEND_AND_BORROW,
    P4,
    P5,
    RESERVE,
    admitted,
    entry,
    placed,
    reason_of,
    runnable,
    share,
    snapshot,
)


def test_job_within_its_share_quota_is_placed_without_borrowing():
    nlp = share(1, "nlp", RESERVE, limits={P5: 8})

    decisions = schedule(snapshot({P5: 8}, [nlp], [placed(1, nlp, P5, 4), runnable(2, nlp, entry(P5, 4))]))

    [admission] = decisions.admissions
    assert (admission.job_id, admission.instance_type, admission.instance_count) == (2, P5, 4)
    assert admission.borrowed == 0
    assert admission.message == f"placed on {P5} x4 (entry 1 of 1) within share quota"
    assert decisions.stats.placed_within_quota == 1
    assert decisions.stats.placed_borrowing == 0


def test_lend_and_borrow_share_borrows_the_idle_capacity_of_a_lend_share():
    nlp = share(1, "nlp", LEND, limits={P5: 4})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 4})

    decisions = schedule(snapshot({P5: 8}, [nlp, vision], [runnable(1, vision, entry(P5, 8))]))

    [admission] = decisions.admissions
    assert admission.borrowed == 4
    assert admission.message == f"placed on {P5} x8 (entry 1 of 1) borrowing 4 from idle capacity"
    assert decisions.stats.placed_borrowing == 1


def test_lend_and_borrow_share_borrows_the_idle_capacity_of_another_lend_and_borrow_share():
    nlp = share(1, "nlp", LEND_AND_BORROW, limits={P5: 4})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 4})

    decisions = schedule(snapshot({P5: 8}, [nlp, vision], [runnable(1, vision, entry(P5, 6))]))

    assert admitted(decisions) == {1: (P5, 6, None)}
    assert decisions.admissions[0].borrowed == 2


def test_lend_and_borrow_share_borrows_from_the_free_pool_no_share_owns():
    vision = share(1, "vision", LEND_AND_BORROW, limits={P5: 4})

    decisions = schedule(snapshot({P5: 10}, [vision], [runnable(1, vision, entry(P5, 10))]))

    assert decisions.admissions[0].borrowed == 6


def test_lend_and_borrow_share_may_borrow_a_type_it_has_no_limit_for():
    vision = share(1, "vision", LEND_AND_BORROW, limits={P4: 2})

    decisions = schedule(snapshot({P5: 4, P4: 2}, [vision], [runnable(1, vision, entry(P5, 3))]))

    assert decisions.admissions[0].borrowed == 3


def test_borrowed_counts_only_the_instances_above_the_limit():
    vision = share(1, "vision", LEND_AND_BORROW, limits={P5: 4})

    decisions = schedule(
        snapshot({P5: 8}, [vision], [placed(1, vision, P5, 2), runnable(2, vision, entry(P5, 4))])
    )

    assert decisions.admissions[0].borrowed == 2


def test_reserve_idle_capacity_is_never_lent():
    ops = share(1, "ops", RESERVE, limits={P5: 4})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 4})

    decisions = schedule(
        snapshot(
            {P5: 8}, [ops, vision], [runnable(1, vision, entry(P5, 6)), runnable(2, vision, entry(P5, 4))]
        )
    )

    assert admitted(decisions) == {2: (P5, 4, None)}
    assert reason_of(decisions, 1) == (
        f"{P5} x6: lendable capacity exhausted (4 held by RESERVE shares idle), would need preemption but "
        f"none possible (no reclaim while share vision would be over its limit, in-share preemption disabled)"
    )


def test_reserve_share_starts_up_to_its_limit_without_preempting_while_others_borrow():
    ops = share(1, "ops", RESERVE, limits={P5: 4})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 4})
    jobs = [placed(1, vision, P5, 8), runnable(2, ops, entry(P5, 4))]

    decisions = schedule(snapshot({P5: 12}, [ops, vision], jobs))

    assert admitted(decisions) == {2: (P5, 4, None)}
    assert decisions.preemptions == []


def test_lend_and_reserve_shares_never_borrow():
    nlp = share(1, "nlp", LEND, limits={P5: 4})
    ops = share(2, "ops", RESERVE, limits={P5: 4})
    jobs = [placed(1, nlp, P5, 2), runnable(2, nlp, entry(P5, 4)), runnable(3, ops, entry(P5, 6))]

    decisions = schedule(snapshot({P5: 16}, [nlp, ops], jobs))

    assert decisions.admissions == []
    assert (
        reason_of(decisions, 2) == f"{P5} x4: share nlp has 2 left of its limit (2/4) and LEND cannot borrow"
    )
    assert (
        reason_of(decisions, 3)
        == f"{P5} x6: share ops has 4 left of its limit (0/4) and RESERVE cannot borrow"
    )


def test_borrow_limit_caps_what_a_share_borrows():
    # 50 % of a limit of 4: at most 2 above it.
    vision = share(1, "vision", LEND_AND_BORROW, limits={P5: 4}, borrow_limit=50)
    jobs = [runnable(1, vision, entry(P5, 6)), runnable(2, vision, entry(P5, 1))]

    decisions = schedule(snapshot({P5: 16}, [vision], jobs))

    assert admitted(decisions) == {1: (P5, 6, None)}
    assert reason_of(decisions, 2) == f"{P5} x1: borrow limit reached (2 borrowed of at most 2)"


def test_borrow_limit_of_zero_means_no_borrowing():
    vision = share(1, "vision", LEND_AND_BORROW, limits={P5: 4}, borrow_limit=0)

    decisions = schedule(snapshot({P5: 16}, [vision], [runnable(1, vision, entry(P5, 5))]))

    assert decisions.admissions == []
    assert reason_of(decisions, 1) == f"{P5} x5: borrow limit reached (0 borrowed of at most 0)"


def test_borrow_limit_rounds_down():
    # 50 % of 3 is 1.5: one instance may be borrowed, not two.
    vision = share(1, "vision", LEND_AND_BORROW, limits={P5: 3}, borrow_limit=50)
    jobs = [runnable(1, vision, entry(P5, 5)), runnable(2, vision, entry(P5, 4))]

    decisions = schedule(snapshot({P5: 16}, [vision], jobs))

    assert admitted(decisions) == {2: (P5, 4, None)}
