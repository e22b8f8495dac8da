"""Reclaim, in-share preemption, the minimal victim set and retries (behaviour.md#preemption)."""

import pytest

from engine import PreemptionKind, schedule

from .builders import (
    G5,
    LEND,
    LEND_AND_BORROW,
    P4,
    P5,
    RESERVE,
    admitted,
    apply_decisions,
    entry,
    placed,
    preempted,
    reason_of,
    runnable,
    share,
    snapshot,
)


def test_reclaim_preempts_only_borrowers_whatever_their_priority():
    nlp = share(1, "nlp", LEND, limits={P5: 4})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 4})
    ops = share(3, "ops", LEND, limits={P5: 4})
    jobs = [
        placed(101, vision, P5, 4, priority=9000),
        placed(102, vision, P5, 4, priority=9999),
        placed(103, ops, P5, 4, priority=0),  # lowest priority, but within its share's limit
        runnable(1, nlp, entry(P5, 4), priority=0),
    ]

    decisions = schedule(snapshot({P5: 12}, [nlp, vision, ops], jobs))

    assert admitted(decisions) == {1: (P5, 4, None)}
    [preemption] = decisions.preemptions
    assert (preemption.job_id, preemption.kind) == (101, PreemptionKind.RECLAIM)
    assert (preemption.preemptor_job_id, preemption.preemptor_share_id) == (1, nlp.id)
    assert (preemption.instance_type, preemption.instances, preemption.fails) == (P5, 4, False)
    assert preemption.message == (
        f"job #101 of share vision preempted by job #1 of share nlp to reclaim 4 {P5} lent by nlp and borrowed "
        f"by vision (vision at 8/4)"
    )
    assert (
        decisions.admissions[0].message
        == f"placed on {P5} x4 (entry 1 of 1) within share quota after preempting job #101"
    )
    assert decisions.stats.preemptions == {
        "PREEMPTED_RECLAIM": 1,
        "PREEMPTED_IN_SHARE": 0,
        "PREEMPTED_LIMIT_REDUCED": 0,
    }


def test_reclaim_takes_a_shares_jobs_only_while_that_share_is_still_over_its_limit():
    nlp = share(1, "nlp", LEND, limits={P5: 4})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 4})
    ops = share(3, "ops", LEND_AND_BORROW, limits={P4: 1})  # borrows all the P5 it holds
    jobs = [
        placed(501, vision, P5, 1, priority=0),
        placed(
            502, vision, P5, 4, priority=1
        ),  # next in victim order, but vision is back at its limit by then
        placed(503, ops, P5, 2, priority=2),
        runnable(1, nlp, entry(P5, 4)),
    ]

    decisions = schedule(snapshot({P5: 8, P4: 1}, [nlp, vision, ops], jobs))

    assert admitted(decisions) == {1: (P5, 4, None)}
    assert preempted(decisions) == [501, 503]


def test_no_reclaim_when_the_job_would_still_be_borrowing():
    nlp = share(1, "nlp", LEND_AND_BORROW, limits={P5: 2})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 6})
    jobs = [
        placed(601, vision, P5, 4),
        placed(602, vision, P5, 4),
        runnable(1, nlp, entry(P5, 4)),  # would be 4/2: borrowing, so it may not reclaim
        runnable(2, nlp, entry(P5, 2)),  # 2/2: within its quota, so it reclaims
    ]

    decisions = schedule(snapshot({P5: 8}, [nlp, vision], jobs))

    assert admitted(decisions) == {2: (P5, 2, None)}
    assert preempted(decisions) == [602]
    assert "no reclaim while share nlp would be over its limit" in reason_of(decisions, 1)


def test_in_share_preemption_takes_only_jobs_of_strictly_lower_priority():
    nlp = share(1, "nlp", RESERVE, limits={P5: 8}, in_share_preemption=True)
    jobs = [
        placed(701, nlp, P5, 4, priority=5),
        placed(702, nlp, P5, 4, priority=3),
        runnable(1, nlp, entry(P5, 4), priority=5),
    ]

    decisions = schedule(snapshot({P5: 8}, [nlp], jobs))

    assert admitted(decisions) == {1: (P5, 4, None)}
    [preemption] = decisions.preemptions
    assert (preemption.job_id, preemption.kind, preemption.preemptor_job_id) == (
        702,
        PreemptionKind.IN_SHARE,
        1,
    )
    assert preemption.message == (
        f"job #702 at priority 3 preempted by job #1 at priority 5 of share nlp: in-share preemption frees 4 {P5}"
    )


def test_in_share_preemption_spares_jobs_of_equal_priority():
    nlp = share(1, "nlp", RESERVE, limits={P5: 8}, in_share_preemption=True)
    jobs = [
        placed(701, nlp, P5, 4, priority=5),
        placed(702, nlp, P5, 4, priority=3),
        runnable(1, nlp, entry(P5, 4), priority=3),
    ]

    decisions = schedule(snapshot({P5: 8}, [nlp], jobs))

    assert decisions.admissions == [] and decisions.preemptions == []
    assert reason_of(decisions, 1) == (
        f"{P5} x4: share nlp at its limit 8/8 and RESERVE cannot borrow, would need preemption but none "
        f"possible (no reclaim while share nlp would be over its limit, "
        f"no lower-priority jobs of share nlp on {P5})"
    )


def test_no_in_share_preemption_when_the_share_disables_it():
    nlp = share(1, "nlp", RESERVE, limits={P5: 8}, in_share_preemption=False)
    jobs = [placed(701, nlp, P5, 8, priority=0), runnable(1, nlp, entry(P5, 4), priority=9)]

    decisions = schedule(snapshot({P5: 8}, [nlp], jobs))

    assert decisions.admissions == [] and decisions.preemptions == []
    assert reason_of(decisions, 1) == f"{P5} x4: share nlp at its limit 8/8 and RESERVE cannot borrow"


def test_put_back_returns_victims_the_job_does_not_need():
    nlp = share(1, "nlp", RESERVE, limits={P5: 8}, in_share_preemption=True)
    jobs = [
        placed(811, nlp, P5, 1, priority=0),  # taken first, but too small on its own
        placed(812, nlp, P5, 4, priority=1),  # enough on its own: 811 is put back
        placed(813, nlp, P5, 3, priority=9),
        runnable(1, nlp, entry(P5, 4), priority=5),
    ]

    decisions = schedule(snapshot({P5: 8}, [nlp], jobs))

    assert preempted(decisions) == [812]


def test_put_back_spares_a_large_low_priority_job_when_a_smaller_one_suffices():
    # ops's limit was lowered from 6 to 5: its 6-instance job is reclaimable, but taking it frees only the
    # 1 instance above the limit (the rest stays reserved for ops). vision's 2-instance job frees 2: enough.
    ops = share(1, "ops", RESERVE, limits={P5: 5})
    nlp = share(2, "nlp", LEND, limits={P5: 4})
    vision = share(3, "vision", LEND_AND_BORROW, limits={P5: 3})
    jobs = [
        placed(901, ops, P5, 6, priority=0),
        placed(902, vision, P5, 2, priority=1),
        placed(903, vision, P5, 2, priority=9),
        runnable(1, nlp, entry(P5, 4)),
    ]

    decisions = schedule(snapshot({P5: 12}, [ops, nlp, vision], jobs))

    assert admitted(decisions) == {1: (P5, 4, None)}
    assert preempted(decisions) == [902]


def test_nobody_is_preempted_when_the_job_cannot_fit_even_after_every_victim():
    nlp = share(1, "nlp", RESERVE, limits={P5: 8}, in_share_preemption=True)
    jobs = [
        placed(901, nlp, P5, 2, priority=0),
        placed(902, nlp, P5, 4, priority=9),
        runnable(1, nlp, entry(P5, 8), priority=5),  # would need 902 gone too, which outranks it
    ]

    decisions = schedule(snapshot({P5: 8}, [nlp], jobs))

    assert decisions.admissions == [] and decisions.preemptions == []
    assert "lower-priority jobs of share nlp hold only 2" in reason_of(decisions, 1)


def test_a_borrowing_share_gives_up_one_lower_priority_job_rather_than_coming_back_within_its_limit():
    vision = share(1, "vision", LEND_AND_BORROW, limits={P5: 2}, in_share_preemption=True)
    nlp = share(2, "nlp", LEND, limits={P5: 8})
    jobs = [
        *[placed(100 + i, vision, P5, 2, priority=0) for i in range(4)],  # 8/2: borrowing 6
        placed(200, nlp, P5, 2),
        runnable(1, vision, entry(P5, 2), priority=5),
    ]

    decisions = schedule(snapshot({P5: 10}, [vision, nlp], jobs))

    assert admitted(decisions) == {1: (P5, 2, None)}
    assert len(decisions.preemptions) == 1
    assert decisions.preemptions[0].kind == PreemptionKind.IN_SHARE
    assert decisions.admissions[0].borrowed == 2


def test_preemption_is_used_only_when_no_entry_fits_without_it():
    nlp = share(1, "nlp", LEND, limits={P5: 4, P4: 4})
    vision = share(2, "vision", LEND_AND_BORROW, limits={G5: 1})
    jobs = [placed(101, vision, P5, 4), runnable(1, nlp, entry(P5, 4), entry(P4, 4))]

    decisions = schedule(snapshot({P5: 4, P4: 4, G5: 1}, [nlp, vision], jobs))

    assert admitted(decisions) == {1: (P4, 4, None)}
    assert decisions.preemptions == []
    assert decisions.stats.fallbacks == 1


def test_the_first_entry_preemption_can_make_room_for_wins():
    nlp = share(1, "nlp", LEND, limits={P5: 4, P4: 4})
    vision = share(2, "vision", LEND_AND_BORROW, limits={G5: 1})
    jobs = [
        placed(101, vision, P5, 4),
        placed(102, vision, P4, 4),
        runnable(1, nlp, entry(P4, 8), entry(P5, 4), entry(P4, 4)),
    ]

    decisions = schedule(snapshot({P5: 4, P4: 4, G5: 1}, [nlp, vision], jobs))

    # P4 x8 is above nlp's limit (no reclaim to borrow); P5 x4 comes before P4 x4.
    assert admitted(decisions) == {1: (P5, 4, None)}
    assert preempted(decisions) == [101]
    assert decisions.admissions[0].entry_index == 1


def test_a_job_placed_in_this_pass_is_never_a_victim_in_it():
    nlp = share(1, "nlp", LEND, limits={P5: 4, P4: 4})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 4, G5: 2})
    jobs = [
        runnable(1, vision, entry(P5, 8), priority=9),  # goes first and borrows nlp's idle 4
        runnable(2, nlp, entry(P5, 4), priority=0),
    ]
    before = snapshot({P5: 8, P4: 4, G5: 2}, [nlp, vision], jobs)

    first = schedule(before)

    assert admitted(first) == {1: (P5, 8, None)}
    assert first.preemptions == []
    assert "borrowers were placed in this pass and are reclaimable from the next" in reason_of(first, 2)

    second = schedule(apply_decisions(before, first))

    assert admitted(second) == {2: (P5, 4, None)}
    assert preempted(second) == [1]


def test_an_older_job_of_a_share_over_its_limit_is_reclaimable_even_if_the_borrowing_is_new():
    nlp = share(1, "nlp", LEND, limits={P5: 4, P4: 4})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 4, G5: 2})
    jobs = [
        placed(101, vision, P5, 4),
        runnable(1, vision, entry(P5, 4), priority=9),
        runnable(2, nlp, entry(P5, 4), priority=0),
    ]

    decisions = schedule(snapshot({P5: 8, P4: 4, G5: 2}, [nlp, vision], jobs))

    assert admitted(decisions) == {1: (P5, 4, None), 2: (P5, 4, None)}
    assert preempted(decisions) == [101]


def test_a_victim_is_not_placed_again_in_the_same_pass():
    nlp = share(1, "nlp", LEND, limits={P5: 4})
    vision = share(2, "vision", LEND_AND_BORROW, limits={P4: 4})
    # The victim could run on P4 at once, but waits for the next pass.
    victim = placed(101, vision, P5, 4, entries=(entry(P5, 4), entry(P4, 4)))
    jobs = [victim, runnable(1, nlp, entry(P5, 4))]

    decisions = schedule(snapshot({P5: 4, P4: 4}, [nlp, vision], jobs))

    assert admitted(decisions) == {1: (P5, 4, None)}
    assert preempted(decisions) == [101]
    assert (
        reason_of(decisions, 101)
        == "preempted in this pass by job #1 of share nlp (will be retried next pass)"
    )


@pytest.mark.parametrize(
    ("retries", "preemption_count", "fails"),
    [(None, 7, False), (0, 0, True), (2, 1, False), (2, 2, True)],
)
def test_a_victim_fails_once_its_preemption_retries_are_used_up(retries, preemption_count, fails):
    nlp = share(1, "nlp", RESERVE, limits={P5: 4}, in_share_preemption=True)
    victim = placed(
        101,
        nlp,
        P5,
        4,
        priority=0,
        preemption_count=preemption_count,
        preemption_retries_before_termination=retries,
    )

    decisions = schedule(snapshot({P5: 4}, [nlp], [victim, runnable(1, nlp, entry(P5, 4), priority=1)]))

    [preemption] = decisions.preemptions
    assert preemption.fails is fails
    # A failed job is not RUNNABLE, so it has no pending reason.
    assert (101 in {p.job_id for p in decisions.pending}) is not fails


def test_a_share_never_reclaims_in_order_to_borrow():
    nlp = share(1, "nlp", LEND_AND_BORROW, limits={P5: 6}, in_share_preemption=True)
    vision = share(2, "vision", LEND_AND_BORROW, limits={P5: 4})
    jobs = [
        placed(101, nlp, P5, 2, priority=0),
        placed(102, nlp, P5, 2, priority=9),
        placed(201, vision, P5, 2, priority=1),
        placed(202, vision, P5, 2, priority=2),
        placed(203, vision, P5, 4, priority=3),
        runnable(1, nlp, entry(P5, 3), priority=5),  # 7/6: nlp would be borrowing 1
    ]

    decisions = schedule(snapshot({P5: 12}, [nlp, vision], jobs))

    # Taking 201 and 202 would make room with nlp borrowing; instead nlp gives up 101 to end within its limit.
    assert preempted(decisions) == [201, 101]
    assert [p.kind for p in decisions.preemptions] == [PreemptionKind.RECLAIM, PreemptionKind.IN_SHARE]
    assert decisions.admissions[0].borrowed == 0


def test_reclaim_candidates_come_before_in_share_ones_when_the_share_would_go_over_its_own_limit():
    # Issue 13's minimal case: nlp (7 of 7 lent out but 1) must come back within its limit to place job 3.
    gpu_a, gpu_b = G5, P5
    nlp = share(1, "nlp", LEND, limits={gpu_b: 7}, in_share_preemption=True)
    vision = share(2, "vision", LEND_AND_BORROW, limits={gpu_a: 1})  # borrows all the gpu-b it holds
    jobs = [
        placed(1, nlp, gpu_b, 1, priority=0, scheduled_minutes_ago=6),
        placed(2, vision, gpu_b, 1, priority=0, scheduled_minutes_ago=1),
        placed(4, nlp, gpu_b, 3, priority=1, scheduled_minutes_ago=3),
        runnable(3, nlp, entry(gpu_b, 4), priority=2),
    ]

    decisions = schedule(snapshot({gpu_a: 1, gpu_b: 7}, [nlp, vision], jobs))

    # Not job 4, a three-instance job of higher priority, with the borrower left on what nlp lent.
    assert admitted(decisions) == {3: (gpu_b, 4, None)}
    assert preempted(decisions) == [2, 1]
    assert [p.kind for p in decisions.preemptions] == [PreemptionKind.RECLAIM, PreemptionKind.IN_SHARE]
    assert decisions.admissions[0].borrowed == 0


def test_the_in_share_alone_fallback_borrows_and_never_reclaims():
    vision = share(1, "vision", LEND_AND_BORROW, limits={P5: 2}, in_share_preemption=True)
    nlp = share(2, "nlp", LEND, limits={P5: 8})
    ops = share(3, "ops", LEND_AND_BORROW, limits={G5: 1})
    jobs = [
        placed(100, vision, P5, 2, priority=0),
        placed(101, vision, P5, 4, priority=9),  # vision at 6/2
        placed(200, ops, P5, 2, priority=0),  # a borrower, reclaimable by a share ending within its limit
        runnable(1, vision, entry(P5, 4), priority=5),
    ]

    decisions = schedule(snapshot({P5: 10, G5: 1}, [vision, nlp, ops], jobs))

    # Without 101 (not lower priority) vision cannot come back within its limit, so no reclaim set exists;
    # its in-share candidate alone makes room with vision borrowing.
    assert admitted(decisions) == {1: (P5, 4, None)}
    assert preempted(decisions) == [100]
    assert decisions.preemptions[0].kind == PreemptionKind.IN_SHARE
    assert decisions.admissions[0].borrowed == 4


def test_the_put_back_repeats_until_the_victim_set_is_minimal():
    vision = share(1, "vision", LEND_AND_BORROW, limits={P5: 4}, in_share_preemption=True)
    nlp = share(2, "nlp", LEND, limits={P5: 2})
    ops = share(3, "ops", LEND_AND_BORROW, limits={G5: 1})
    jobs = [
        placed(100, vision, P5, 2, priority=9),
        placed(101, vision, P5, 1, priority=0, scheduled_minutes_ago=10),
        placed(102, vision, P5, 1, priority=0, scheduled_minutes_ago=30),
        placed(200, ops, P5, 1, priority=0),  # borrows 1
        runnable(1, vision, entry(P5, 2), priority=5),
    ]

    decisions = schedule(snapshot({P5: 6, G5: 1}, [vision, nlp, ops], jobs))

    # Reclaim first: 200, 101, 102 until vision is back within its limit. The first round of the put-back
    # returns 200 only (101 and 102 were checked while a reclaim victim still held vision to its limit); with
    # no reclaim victim left vision may borrow, so the second round returns 102 as well.
    assert admitted(decisions) == {1: (P5, 2, None)}
    assert preempted(decisions) == [101]
    assert decisions.preemptions[0].kind == PreemptionKind.IN_SHARE
    assert decisions.admissions[0].borrowed == 1
