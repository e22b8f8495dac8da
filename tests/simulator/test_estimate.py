"""The estimator: the unchanged engine run forward from a live queue gives each RUNNABLE job a start window."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from engine import Job, JobStatus, Ordering, synthetic
from simulator.estimate import (
    Expectations,
    Runtime,
    estimate,
    what_if,
)
from tests.engine.builders import NOW, P4, P5, RESERVE, entry, placed, plan, runnable, share, snapshot

NLP = share(1, "nlp", RESERVE, limits={P5: 2})


def minutes(value: float) -> timedelta:
    return timedelta(minutes=value)


def known_queue():
    """Two P5s, both busy: job 10 ends in 20 minutes, job 11 in 50; jobs 1-3 wait for one P5 each."""
    jobs = [
        placed(10, NLP, P5, 1, scheduled_minutes_ago=40),
        placed(11, NLP, P5, 1, scheduled_minutes_ago=10),
        runnable(1, NLP, entry(P5, 1)),
        runnable(2, NLP, entry(P5, 1)),
        runnable(3, NLP, entry(P5, 1)),
    ]
    declared = {10: 3600, 11: 3600, 1: 1800, 2: 1800, 3: 1800}
    return snapshot({P5: 2}, [NLP], jobs), Expectations(declared=declared)


def test_known_queue_is_estimated_exactly():
    snap, expectations = known_queue()
    run = estimate(snap, expectations, resolution=0)
    # 1 takes 10's P5 at +20, 2 takes 11's at +50, 3 takes 1's when it ends at +20+30
    assert run.estimates[1].earliest == NOW + minutes(20)
    assert run.estimates[2].earliest == NOW + minutes(50)
    assert run.estimates[3].earliest == NOW + minutes(50)
    # declared durations are exact: the window is a point
    assert all(e.latest == e.earliest for e in run.estimates.values())
    assert (
        run.estimates[1].basis == f"once 1 job on {P5} (running or placed before it) ends, around 12:20 UTC"
    )
    assert run.estimates[3].basis.startswith(f"once 3 jobs on {P5} (running or placed before it) end")


def test_latest_widens_by_the_spread_of_declared_durations():
    snap, expectations = known_queue()
    run = estimate(snap, replace(expectations, declared_sigma=0.5), resolution=0)
    first = run.estimates[1]
    # 40 minutes into a run declared at 60: the quartiles of the runs that last that long surround +20
    assert NOW + minutes(5) <= first.earliest < NOW + minutes(30)
    assert first.latest > first.earliest


def test_learned_runtimes_use_what_a_running_job_has_already_run():
    """A job 50 minutes into runs that take 30 to 90 minutes is expected to end later than the median."""
    learned = {(NLP.id, P5): Runtime.of([1800, 2400, 3600, 4800, 5400])}
    jobs = [placed(10, NLP, P5, 2, scheduled_minutes_ago=50), runnable(1, NLP, entry(P5, 1))]
    run = estimate(snapshot({P5: 2}, [NLP], jobs), Expectations(learned=learned), resolution=0)
    first = run.estimates[1]
    assert NOW + minutes(10) < first.earliest < NOW + minutes(40)
    assert first.latest >= first.earliest


def test_a_job_that_can_never_fit_says_never_and_why():
    disabled = replace(NLP, enabled=False)
    jobs = [runnable(1, disabled, entry(P5, 1))]
    run = estimate(snapshot({P5: 2}, [disabled], jobs), Expectations(), resolution=0)
    assert run.estimates[1].earliest is None and run.estimates[1].latest is None
    assert run.estimates[1].basis == "never: share nlp is disabled"

    run = estimate(snapshot({P5: 2}, [NLP], jobs, queue_enabled=False), Expectations(), resolution=0)
    assert run.estimates[1].basis.startswith("never: no entry can fit while")


def test_an_entry_above_what_the_share_may_ever_hold_is_never():
    jobs = [runnable(1, NLP, entry(P5, 3))]
    run = estimate(snapshot({P5: 2}, [NLP], jobs), Expectations(), resolution=0)
    assert run.estimates[1].earliest is None
    assert run.estimates[1].basis.startswith("never: no entry can ever run")


def test_a_job_whose_pending_time_runs_out_first_is_never():
    jobs = [
        placed(10, NLP, P5, 2, scheduled_minutes_ago=0),
        runnable(1, NLP, entry(P5, 1), max_pending_seconds=600, runnable_since=NOW),
    ]
    run = estimate(snapshot({P5: 2}, [NLP], jobs), Expectations(declared={10: 3600}), resolution=0)
    assert run.estimates[1].basis.startswith("never: it waits longer than its max_pending_seconds")


def test_a_training_plan_that_opens_later_places_the_job_when_it_opens():
    trial = plan(1, "trial", P4, 2, started_hours_ago=-2, ends_in_hours=48)
    shares = [share(1, "nlp", RESERVE, limits={P5: 1})]
    jobs = [placed(10, shares[0], P5, 1), runnable(1, shares[0], entry(P4, 2, "trial"), entry(P5, 1))]
    snap = snapshot({P5: 1, P4: 0}, shares, jobs, plans=(trial,))
    run = estimate(snap, Expectations(declared={10: 4 * 3600 + 3600}), resolution=0)
    assert run.estimates[1].earliest == NOW + timedelta(hours=2)
    assert run.estimates[1].basis == f"on training plan trial ({P4}), around 14:00 UTC"


def test_the_same_snapshot_gives_the_same_estimates():
    snap, expectations = known_queue()
    expectations = replace(expectations, declared_sigma=0.5)
    assert (
        estimate(snap, expectations, resolution=0).estimates
        == estimate(snap, expectations, resolution=0).estimates
    )


def test_estimating_writes_nothing_back_into_the_snapshot():
    snap, expectations = known_queue()
    before = snap.jobs
    estimate(snap, expectations, resolution=0)
    assert snap.jobs == before


@dataclass(frozen=True, slots=True)
class StoppingJob:
    """An engine Job as the graceful-stops change shapes it: status STOPPING and a `stop_deadline`."""

    job: Job
    stop_deadline: object
    status: str = "STOPPING"

    def __getattr__(self, name):
        return getattr(self.job, name)


def test_a_stopping_victim_frees_its_capacity_at_its_deadline():
    victim = placed(10, NLP, P5, 2, scheduled_minutes_ago=5)
    stopping = StoppingJob(victim, stop_deadline=NOW + minutes(2))
    jobs = [stopping, runnable(1, NLP, entry(P5, 1))]
    run = estimate(snapshot({P5: 2}, [NLP], jobs), Expectations(declared={10: 36_000}), resolution=0)
    first = run.estimates[1]
    assert NOW + minutes(2) <= first.earliest <= NOW + minutes(2) + timedelta(seconds=5)
    assert first.latest == first.earliest


def test_what_if_adds_one_job_behind_the_queue():
    snap, expectations = known_queue()
    newcomer = Job(id=0, share_id=NLP.id, priority=0, submitted_at=NOW, entries=(entry(P5, 1),))
    found = what_if(snap, expectations, newcomer, resolution=0)
    # behind 1, 2 and 3: 1 ends at +50, 2 and 3 at +80
    assert found.earliest == NOW + minutes(80)
    assert found.job_id == 0
    assert newcomer.status == JobStatus.RUNNABLE


def test_a_time_cap_stops_a_long_estimate_with_not_before():
    snap, expectations = known_queue()
    run = estimate(snap, expectations, time_limit=-1)
    assert run.estimates[1].earliest is None
    assert run.estimates[1].basis == "not before 12:00 UTC: the estimate stopped there"


def test_runtime_quantiles_are_read_back():
    runtime = Runtime.of([10, 20, 30, 40, 50])
    assert runtime.at(0.5) == 30
    assert runtime.below(30) == pytest.approx(0.5)
    assert runtime.remaining(0, 0.5) == 30
    assert runtime.remaining(30, 0.5) == pytest.approx(10)


@pytest.mark.parametrize("seed", [1, 4, 5, 6])
def test_the_forward_replay_of_a_busy_queue_decides_every_pass_as_the_whole_queue_would(seed):
    """The replay's shortcuts (holdings of in-share shares given as real jobs, passes without reasons) are
    checked against the engine's pass on the whole queue, pass by pass."""
    snap = synthetic.build_synthetic_snapshot(runnable=300, placed=120, shares=8, types=3, seed=seed)
    in_share = {share.id for share in snap.shares if share.in_share_preemption}
    assert any(job.placement is not None and job.share_id in in_share for job in snap.jobs)
    run = estimate(snap, Expectations(default=Runtime.of([600, 1800, 7200])), verify_shortcuts=True)
    assert sum(found.earliest is not None for found in run.estimates.values()) > 100


@pytest.mark.parametrize("seed", [2, 6, 8, 11])
def test_under_strict_fifo_the_forward_replay_judges_a_share_by_its_first_job_not_timing_out(seed):
    """Under STRICT_FIFO a share's queue is one group, judged by its head. When the head times out in the
    pass, the next job is the head (seed 6: share 5's head, over its RESERVE limit, times out and the two
    jobs behind it are placed); judged by the job timing out, the whole queue was left out."""
    snap = replace(
        synthetic.build_synthetic_snapshot(runnable=600, placed=150, shares=8, types=4, seed=seed),
        ordering=Ordering.STRICT_FIFO,
    )
    assert any(job.max_pending_seconds is not None for job in snap.jobs)
    run = estimate(snap, Expectations(default=Runtime.of([600, 1800, 7200])), verify_shortcuts=True)
    assert sum(found.earliest is not None for found in run.estimates.values()) > 100


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(
    seed=st.integers(0, 10**6),
    shares=st.integers(2, 12),
    types=st.integers(1, 6),
    waiting=st.integers(20, 400),
    placed=st.integers(0, 150),
    ordering=st.sampled_from([Ordering.BEST_EFFORT_FIFO, Ordering.STRICT_FIFO]),
    learned=st.booleans(),
)
def test_the_forward_replay_of_random_queues_decides_every_pass_as_the_whole_queue_would(
    seed, shares, types, waiting, placed, ordering, learned
):
    """Every shortcut of the replay, pass by pass, against the engine on the whole queue (`verify_shortcuts`
    raises at the first difference); HYPOTHESIS_PROFILE=fuzz searches many more queues."""
    try:
        snap = synthetic.build_synthetic_snapshot(
            runnable=waiting, placed=placed, shares=shares, types=types, seed=seed
        )
    except ValueError:  # more placed jobs than the synthetic environment holds
        assume(False)
    snap = replace(snap, ordering=ordering)
    rng = random.Random(seed)
    if learned:
        runtimes = {
            (share.id, name): Runtime.of([rng.lognormvariate(8.0, 1.0) for _ in range(20)])
            for share in snap.shares
            for name in snap.capacity
        }
        expectations = Expectations(learned=runtimes)
    else:
        expectations = Expectations(default=Runtime.of([600, 1800, 7200]))
    estimate(snap, expectations, verify_shortcuts=True)


@pytest.mark.parametrize("seed", [1, 4])
def test_the_lean_replay_gives_the_estimates_of_the_replay_as_first_written(seed):
    snap = synthetic.build_synthetic_snapshot(runnable=300, placed=120, shares=8, types=3, seed=seed)
    expectations = Expectations(default=Runtime.of([600, 1800, 7200]))
    lean, plain = estimate(snap, expectations), estimate(snap, expectations, lean=False)
    assert lean.estimates == plain.estimates
    assert [stats.passes_run for stats in lean.replays] == [stats.passes_run for stats in plain.replays]


def test_the_latest_replay_decides_its_own_first_pass_when_a_job_ends_at_once_only_in_the_earliest():
    """Job 10 has run 10 minutes; runs of its kind took 10, 10, 10 and 20: its lower quartile says it is
    over now, its upper quartile 2.5 minutes from now. The replays' first passes see different queues."""
    one = share(1, "nlp", RESERVE, limits={P5: 1})
    jobs = [placed(10, one, P5, 1, scheduled_minutes_ago=10), runnable(1, one, entry(P5, 1))]
    expectations = Expectations(learned={(one.id, P5): Runtime.of([600, 600, 600, 1200])})
    snap = snapshot({P5: 1}, [one], jobs)
    run = estimate(snap, expectations, resolution=0)
    assert run.estimates[1].earliest == NOW
    assert run.estimates[1].latest == NOW + timedelta(seconds=150)
    assert run.estimates == estimate(snap, expectations, resolution=0, lean=False).estimates
