"""--check: behaviour.md#capacity-what-a-share-may-hold after every pass, caught at the first pass a broken schedule
function breaks it."""

import pytest

from engine import Admission, Decisions, JobStatus
from simulator import InvariantViolation, simulate

from .builders import LEND, LEND_AND_BORROW, RESERVE, SMALL, T0, config, job, plan, share


def admit_everything(snapshot):
    """A broken engine: every RUNNABLE job on its first entry, whatever the capacity."""
    decisions = Decisions()
    for waiting in snapshot.jobs:
        if waiting.status == JobStatus.RUNNABLE:
            entry = waiting.entries[0]
            decisions.admissions.append(
                Admission(
                    job_id=waiting.id,
                    share_id=waiting.share_id,
                    entry_index=0,
                    instance_type=entry.instance_type,
                    instance_count=entry.instance_count,
                    training_plan=entry.training_plan,
                    borrowed=0,
                    message="x",
                )
            )
    return decisions


def replay_broken(setup, jobs, **options):
    return simulate(setup, jobs, start=T0, schedule_function=admit_everything, shortcuts=False, **options)


def test_check_catches_a_schedule_function_that_over_allocates():
    jobs = [job(i, "a", 0, 100) for i in (1, 2, 3)]

    with pytest.raises(InvariantViolation) as caught:
        replay_broken(config(share("a", RESERVE, small=2)), jobs, check=True)

    message = str(caught.value)
    assert "after pass 0" in message
    assert "A: ml.g5.xlarge in use 3 > capacity 2" in message
    assert "C (RESERVE share over its limit): share a holds 3 ml.g5.xlarge, at most 2" in message


def test_without_check_the_broken_replay_runs_on():
    jobs = [job(i, "a", 0, 100) for i in (1, 2, 3)]

    result = replay_broken(config(share("a", RESERVE, small=2)), jobs)

    assert len(result.records) == 3


def test_check_catches_borrowing_beyond_the_borrow_limit():
    setup = config(share("a", LEND_AND_BORROW, small=2, borrow_limit=50), share("b", LEND, small=2))

    with pytest.raises(
        InvariantViolation, match=r"C \(borrow limit\): share a holds 4 ml.g5.xlarge, at most 3"
    ):
        replay_broken(setup, [job(i, "a", 0, 100) for i in (1, 2, 3, 4)], check=True)


def test_check_catches_lending_the_idle_capacity_of_a_reserve_share():
    setup = config(share("a", RESERVE, small=2), share("b", LEND_AND_BORROW, small=2))

    with pytest.raises(
        InvariantViolation, match=r"B: ml.g5.xlarge sum of max\(usage, reserved\) 5 > capacity 4"
    ):
        replay_broken(setup, [job(i, "b", 0, 100) for i in (1, 2, 3)], check=True)


def test_check_catches_a_plan_holding_more_than_it_reserves():
    setup = config(share("a", small=1), plans=(plan("p", SMALL, 1, 0, 86400),))
    jobs = [job(i, "a", 0, 100, (SMALL, 1, "p")) for i in (1, 2)]

    with pytest.raises(InvariantViolation, match="D: plan p holds 2 of 1"):
        replay_broken(setup, jobs, check=True)


def test_an_admission_of_a_job_that_is_not_waiting_is_refused_even_without_check():
    def admit_twice(snapshot):
        decisions = admit_everything(snapshot)
        decisions.admissions += decisions.admissions
        return decisions

    with pytest.raises(InvariantViolation, match="admission of job 1, which is not RUNNABLE"):
        simulate(config(share("a", small=2)), [job(1, "a", 0, 100)], start=T0, schedule_function=admit_twice)


def test_the_real_engine_passes_the_check():
    jobs = [job(i, "ab"[i % 2], 10 * i, 300) for i in range(1, 60)]
    setup = config(
        share("a", LEND_AND_BORROW, small=3), share("b", RESERVE, small=2), share("c", LEND, small=3)
    )

    result = simulate(setup, jobs, start=T0, check=True)

    assert len(result.records) >= 59
