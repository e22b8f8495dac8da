"""Reasons and decision texts name jobs as people read them: `nightly-retrain (#12)` for a job of the team the
text is about, `job #12` for another team's job, whose name that team may not learn (api.md)."""

from dataclasses import replace
from datetime import timedelta

from engine import Ordering, PreemptionKind, schedule

from .builders import (
    LEND,
    LEND_AND_BORROW,
    NOW,
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

NLP_TEAM, VISION_TEAM = 10, 20
NLP = share(1, "nlp", LEND, limits={P5: 4})
VISION = share(2, "vision", LEND_AND_BORROW, limits={P5: 4})


def reclaim_scene(**fields):
    """vision borrows 4 of nlp's P5s with its newest job, 101; nlp's job 1 arrives."""
    fields.setdefault("scheduled_minutes_ago", 30)
    jobs = [
        placed(101, VISION, P5, 4, name="vision-borrower", team_id=VISION_TEAM, **fields),
        placed(102, VISION, P5, 4, name="vision-own", team_id=VISION_TEAM),
        runnable(1, NLP, entry(P5, 4), name="nightly-retrain", team_id=NLP_TEAM),
    ]
    return snapshot({P5: 8}, [NLP, VISION], jobs)


def test_a_reclaim_names_the_victim_to_its_team_and_the_preemptor_only_by_number():
    decisions = schedule(reclaim_scene())

    [preemption] = decisions.preemptions
    assert preemption.kind == PreemptionKind.RECLAIM
    assert preemption.message == (
        f"vision-borrower (#101) of share vision preempted by job #1 of share nlp to reclaim 4 {P5} lent by "
        f"nlp and borrowed by vision (vision at 8/4)"
    )
    # The admission is read by nlp's team: the victim is vision's.
    [admission] = decisions.admissions
    assert (
        admission.message == f"placed on {P5} x4 (entry 1 of 1) within share quota after preempting job #101"
    )
    assert reason_of(decisions, 101) == (
        "preempted in this pass by job #1 of share nlp (will be retried next pass)"
    )


def test_jobs_of_one_team_name_each_other():
    team = share(1, "nlp", RESERVE, limits={P5: 4}, in_share_preemption=True)
    jobs = [
        placed(702, team, P5, 4, priority=3, name="old-sweep", team_id=NLP_TEAM),
        runnable(1, team, entry(P5, 4), priority=5, name="nightly-retrain", team_id=NLP_TEAM),
    ]

    decisions = schedule(snapshot({P5: 4}, [team], jobs))

    [preemption] = decisions.preemptions
    assert preemption.message == (
        f"old-sweep (#702) at priority 3 preempted by nightly-retrain (#1) at priority 5 of share nlp: "
        f"in-share preemption frees 4 {P5}"
    )
    assert decisions.admissions[0].message.endswith("after preempting old-sweep (#702)")
    assert reason_of(decisions, 702) == (
        "preempted in this pass by nightly-retrain (#1) of share nlp (will be retried next pass)"
    )


def test_a_job_without_a_name_is_named_by_its_number():
    unnamed = [replace(job, name="") for job in reclaim_scene().jobs]

    decisions = schedule(snapshot({P5: 8}, [NLP, VISION], unnamed))

    assert decisions.preemptions[0].message.startswith(
        "job #101 of share vision preempted by job #1 of share"
    )


def test_strict_fifo_names_the_job_it_waits_behind():
    jobs = [
        runnable(1, NLP, entry(P5, 8), priority=9, name="too-big", team_id=NLP_TEAM),
        runnable(2, NLP, entry(P5, 2), name="small", team_id=NLP_TEAM),
    ]

    decisions = schedule(snapshot({P5: 8}, [NLP], jobs, ordering=Ordering.STRICT_FIFO))

    assert reason_of(decisions, 2) == "held by STRICT_FIFO behind too-big (#1), which cannot be placed yet"


def test_a_nominated_job_waits_for_stopping_jobs_by_number_when_they_are_another_teams():
    snap = reclaim_scene(taken=True)

    decisions = schedule(snap)

    [nomination] = decisions.nominations
    assert nomination.message.endswith(": waiting for stopping job #101")
    assert reason_of(decisions, 1).startswith(f"waiting for {P5} x4 held by stopping job #101 until")
    # A second job of nlp's team waits for the same room; the stopping job is named by number too.
    after = apply_decisions(snap, decisions)
    jobs = [*after.jobs, runnable(3, NLP, entry(P5, 4), name="second", team_id=NLP_TEAM)]
    again = schedule(snapshot({P5: 8}, [NLP, VISION], jobs))
    assert "held by stopping job #101" in reason_of(again, 3)


def test_stopping_jobs_of_the_readers_team_are_named():
    jobs = [
        placed(
            101,
            VISION,
            P5,
            4,
            name="vision-borrower",
            team_id=VISION_TEAM,
            taken=True,
            scheduled_minutes_ago=30,
        ),
        placed(102, VISION, P5, 4, name="vision-own", team_id=VISION_TEAM),
        runnable(1, NLP, entry(P5, 4), name="nightly-retrain", team_id=NLP_TEAM),
        runnable(5, VISION, entry(P5, 4), name="vision-next", team_id=VISION_TEAM),
    ]
    snap = snapshot({P5: 8}, [NLP, VISION], jobs)
    after = apply_decisions(snap, schedule(snap))

    decisions = schedule(after)

    assert "held by stopping vision-borrower (#101)" in reason_of(decisions, 5)
    assert "held by stopping job #101" in reason_of(decisions, 1)


def test_a_protected_victim_of_another_team_is_named_by_number():
    jobs = [
        placed(101, VISION, P5, 4, name="vision-borrower", team_id=VISION_TEAM, scheduled_minutes_ago=5),
        placed(102, VISION, P5, 4, name="vision-own", team_id=VISION_TEAM, scheduled_minutes_ago=6),
        runnable(1, NLP, entry(P5, 4), name="nightly-retrain", team_id=NLP_TEAM),
    ]

    decisions = schedule(snapshot({P5: 8}, [NLP, VISION], jobs, preemption_min_runtime_seconds=600))

    until = (NOW + timedelta(minutes=5)).isoformat(timespec="seconds")
    assert reason_of(decisions, 1).endswith(
        f"would preempt job #101 of share vision, protected until {until}"
    )
