"""Preference lists and training plans (behaviour.md#preference-evaluation)."""

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
    plan,
    reason_of,
    runnable,
    share,
    snapshot,
)


def test_borrowing_on_an_earlier_entry_is_taken_before_a_later_entry_within_quota():
    vision = share(1, "vision", LEND_AND_BORROW, limits={P5: 2, P4: 4})

    decisions = schedule(
        snapshot({P5: 8, P4: 4}, [vision], [runnable(1, vision, entry(P5, 4), entry(P4, 4))])
    )

    [admission] = decisions.admissions
    assert (admission.instance_type, admission.entry_index, admission.borrowed) == (P5, 0, 2)
    assert decisions.stats.fallbacks == 0


def test_the_job_falls_back_to_the_first_later_entry_that_fits():
    nlp = share(1, "nlp", RESERVE, limits={P5: 4, P4: 4})
    jobs = [placed(101, nlp, P5, 4), runnable(1, nlp, entry(P5, 4), entry(P4, 8), entry(P4, 2), entry(P4, 1))]

    decisions = schedule(snapshot({P5: 4, P4: 8}, [nlp], jobs))

    assert admitted(decisions) == {1: (P4, 2, None)}
    assert decisions.admissions[0].message == f"placed on {P4} x2 (entry 3 of 4) within share quota"
    assert decisions.stats.fallbacks == 1


def test_a_plan_entry_is_tried_before_on_demand_and_a_full_plan_falls_back():
    nlp = share(1, "nlp", LEND, limits={P5: 8})
    dec = plan(1, "dec-p5", P5, 4)
    jobs = [
        runnable(1, nlp, entry(P5, 4, "dec-p5"), entry(P5, 4)),
        runnable(2, nlp, entry(P5, 4, "dec-p5"), entry(P5, 4)),
    ]

    decisions = schedule(snapshot({P5: 8}, [nlp], jobs, plans=(dec,)))

    assert admitted(decisions) == {1: (P5, 4, "dec-p5"), 2: (P5, 4, None)}
    first, second = decisions.admissions
    assert first.borrowed == 0
    assert first.message == f"placed on {P5} x4 (entry 1 of 2) on training plan dec-p5"
    assert second.entry_index == 1
    assert (
        decisions.stats.placed_on_plan,
        decisions.stats.placed_within_quota,
        decisions.stats.fallbacks,
    ) == (
        1,
        1,
        1,
    )


def test_instances_on_a_plan_count_against_the_plan_only():
    nlp = share(1, "nlp", RESERVE, limits={P5: 4})
    dec = plan(1, "dec-p5", P5, 8)
    jobs = [placed(101, nlp, P5, 8, plan="dec-p5"), runnable(1, nlp, entry(P5, 4))]

    decisions = schedule(snapshot({P5: 4}, [nlp], jobs, plans=(dec,)))

    assert admitted(decisions) == {1: (P5, 4, None)}
    assert decisions.preemptions == []


def test_a_plan_not_yet_active_is_skipped_for_the_next_entry():
    nlp = share(1, "nlp", LEND, limits={P5: 8})
    later = plan(1, "dec-p5", P5, 4, started_hours_ago=-2)
    jobs = [runnable(1, nlp, entry(P5, 4, "dec-p5"), entry(P5, 4)), runnable(2, nlp, entry(P5, 4, "dec-p5"))]

    decisions = schedule(snapshot({P5: 8}, [nlp], jobs, plans=(later,)))

    assert admitted(decisions) == {1: (P5, 4, None)}
    assert reason_of(decisions, 2) == (
        f"{P5} x4 on plan dec-p5: plan dec-p5 not yet active (starts at 2025-06-02T14:00:00+00:00)"
    )


def test_a_plan_not_open_to_the_share_is_skipped_for_the_next_entry():
    nlp = share(1, "nlp", LEND, limits={P5: 8})
    vision = share(2, "vision", LEND, limits={P4: 8})
    theirs = plan(1, "vision-p5", P5, 4, share_ids=frozenset({vision.id}))
    jobs = [
        runnable(1, nlp, entry(P5, 4, "vision-p5"), entry(P5, 4)),
        runnable(2, nlp, entry(P5, 4, "vision-p5")),
    ]

    decisions = schedule(snapshot({P5: 8, P4: 8}, [nlp, vision], jobs, plans=(theirs,)))

    assert admitted(decisions) == {1: (P5, 4, None)}
    assert reason_of(decisions, 2) == f"{P5} x4 on plan vision-p5: plan vision-p5 not open to share nlp"


def test_a_plan_is_never_fitted_with_preemption():
    nlp = share(1, "nlp", RESERVE, limits={P5: 4}, in_share_preemption=True)
    dec = plan(1, "dec-p5", P5, 4)
    jobs = [
        placed(101, nlp, P5, 4, plan="dec-p5", priority=0),
        runnable(1, nlp, entry(P5, 4, "dec-p5"), priority=9),
    ]

    decisions = schedule(snapshot({P5: 4}, [nlp], jobs, plans=(dec,)))

    assert decisions.admissions == [] and decisions.preemptions == []
    assert reason_of(decisions, 1) == f"{P5} x4 on plan dec-p5: plan dec-p5 full 4/4"


def test_a_plan_entry_of_another_type_or_an_unknown_plan_does_not_fit():
    nlp = share(1, "nlp", LEND, limits={P5: 8})
    dec = plan(1, "dec-p5", P5, 4)
    jobs = [runnable(1, nlp, entry(P4, 4, "dec-p5"), entry(P5, 4, "gone"))]

    decisions = schedule(snapshot({P5: 8}, [nlp], jobs, plans=(dec,)))

    assert decisions.admissions == []
    assert reason_of(decisions, 1) == (
        f"{P4} x4 on plan dec-p5: plan dec-p5 is for {P5}; "
        f"{P5} x4 on plan gone: plan gone does not exist (expired or removed)"
    )


def test_a_plan_within_its_drain_window_takes_no_new_jobs():
    nlp = share(1, "nlp", LEND, limits={P5: 8})
    ending = plan(1, "dec-p5", P5, 4, ends_in_hours=0.25)

    decisions = schedule(
        snapshot({P5: 8}, [nlp], [runnable(1, nlp, entry(P5, 4, "dec-p5"))], plans=(ending,))
    )

    assert decisions.admissions == []
    assert reason_of(decisions, 1) == (
        f"{P5} x4 on plan dec-p5: plan dec-p5 draining (ends at 2025-06-02T12:15:00+00:00, within the 1800 s "
        f"drain window)"
    )
