"""The replay on tiny hand-made job streams: placement, borrowing, reclaim, restarts, timeouts, drains."""

import random

import pytest

from simulator import Kind, Status, philly, simulate, summarize

from .builders import BIG, LEND_AND_BORROW, RESERVE, SMALL, T0, config, job, kinds, plan, share

ADMITTED, RECLAIM = Kind.ADMITTED, Kind.PREEMPTED_RECLAIM


def burst(strategy):
    """Share a submits 4 one-GPU jobs at 0 (1000 s each), share b 2 at 100 s; each has a limit of 2."""
    two_shares = config(share("a", strategy, small=2), share("b", strategy, small=2))
    jobs = [job(i, "a", 0, 1000) for i in (1, 2, 3, 4)] + [job(i, "b", 100, 1000) for i in (5, 6)]
    return simulate(two_shares, jobs, start=T0)


def test_every_job_completes_when_capacity_is_ample():
    rng = random.Random(3)
    jobs = [job(i, "a", at=rng.uniform(0, 3600), duration=rng.uniform(1, 900)) for i in range(1, 201)]

    result = simulate(config(share("a", small=1000)), jobs, start=T0)

    assert {o.status for o in result.outcomes.values()} == {Status.SUCCEEDED}
    for outcome in result.outcomes.values():
        assert 0 <= outcome.wait_seconds < 30  # placed at the first pass after it arrived
        assert outcome.finished_at == pytest.approx(outcome.first_placed_at + outcome.job.duration)
    assert [r.kind for r in result.records] == [ADMITTED] * 200


def test_reserve_keeps_its_idle_capacity_so_a_burst_waits_for_its_own_jobs():
    result = burst(RESERVE)

    assert kinds(result) == [
        (0, ADMITTED, 1),
        (0, ADMITTED, 2),
        (4, ADMITTED, 5),
        (4, ADMITTED, 6),
        (34, ADMITTED, 3),
        (34, ADMITTED, 4),
    ]  # 3 and 4 wait for 1 and 2 (t = 1020)
    assert all(r.borrowed == 0 for r in result.records)


def test_lend_and_borrow_borrows_idle_capacity_and_reclaim_preempts_the_newest_borrowers():
    result = burst(LEND_AND_BORROW)

    assert kinds(result)[:8] == [
        (0, ADMITTED, 1),
        (0, ADMITTED, 2),
        (0, ADMITTED, 3),
        (0, ADMITTED, 4),  # 3 and 4 borrow b's idle GPUs
        (4, RECLAIM, 4),
        (4, RECLAIM, 3),
        (4, ADMITTED, 5),
        (4, ADMITTED, 6),  # b takes them back at t = 120
    ]  # applied as the live system writes a pass: preemptions, then admissions
    assert [r.borrowed for r in result.records[:4]] == [0, 0, 1, 1]
    assert [r.preemptor_job_id for r in result.records if r.kind == RECLAIM] == [5, 6]
    assert kinds(result)[8:] == [(34, ADMITTED, 3), (34, ADMITTED, 4)]


def test_a_preempted_job_keeps_its_submission_time_and_restarts_from_zero():
    result = burst(LEND_AND_BORROW)
    preempted = result.outcomes[3]

    assert preempted.preemptions == 1
    assert preempted.first_placed_at == T0 and preempted.wait_seconds == 0
    assert preempted.finished_at == T0 + 1020 + 1000  # the whole run again after its second placement
    assert preempted.lost_gpu_seconds == 120  # 120 s on one 1-GPU instance, thrown away
    assert result.outcomes[1].finished_at == T0 + 1000


def test_a_job_waiting_longer_than_its_max_pending_seconds_fails():
    jobs = [job(1, "a", 0, 1000), job(2, "a", 0, 10, max_pending_seconds=100)]

    result = simulate(config(share("a", small=1)), jobs, start=T0)

    assert kinds(result) == [(0, ADMITTED, 1), (4, Kind.PENDING_TIMEOUT, 2)]  # first pass after 100 s: 120 s
    assert (result.outcomes[2].status, result.outcomes[2].reason) == (Status.FAILED, "PENDING_TIMEOUT")


def test_a_plan_ending_drains_its_jobs_which_fall_back_in_the_same_pass():
    setup = config(share("a", small=1), plans=(plan("p", SMALL, 2, 0, 3600),))
    jobs = [job(1, "a", 0, 5000, (SMALL, 1, "p"), (SMALL, 1))]

    result = simulate(setup, jobs, start=T0)

    drained_at = 60  # the drain window (1800 s) opens at 3600 - 1800 = 1800 s, pass 60
    assert kinds(result) == [(0, ADMITTED, 1), (drained_at, Kind.PLAN_EXPIRING, 1), (drained_at, ADMITTED, 1)]
    assert [(r.training_plan, r.entry_index) for r in result.records if r.kind == ADMITTED] == [
        ("p", 0),
        (None, 1),
    ]
    outcome = result.outcomes[1]
    assert (outcome.drains, outcome.preemptions, outcome.drained_gpu_seconds) == (1, 0, 1800)
    assert outcome.finished_at == T0 + 1800 + 5000


def test_passes_at_given_times_are_numbered_by_their_position():
    jobs = [job(1, "a", 10, 50), job(2, "a", 50, 10)]

    result = simulate(config(share("a", small=1)), jobs, start=T0, pass_times=[T0, T0 + 45, T0 + 200])

    assert kinds(result) == [(1, ADMITTED, 1), (2, ADMITTED, 2)]
    assert [r.time for r in result.records] == [T0 + 45, T0 + 200]


def test_a_cancelled_job_frees_its_capacity():
    jobs = [job(1, "a", 0, None, cancelled_at=T0 + 500), job(2, "a", 0, 60)]

    result = simulate(config(share("a", small=1)), jobs, start=T0)

    assert kinds(result) == [(0, ADMITTED, 1), (17, ADMITTED, 2)]  # 510 s: the first pass after 500 s
    assert result.outcomes[1].status == Status.CANCELLED and result.outcomes[1].finished_at == T0 + 500


def test_jobs_the_live_system_would_refuse_are_rejected_at_submission():
    jobs = [job(1, "nobody", 0, 10), job(2, "a", 0, 10, (SMALL, 3)), job(3, "a", 0, 10, (BIG, 1))]

    result = simulate(config(share("a", small=2), capacity={SMALL: 4}), jobs, start=T0)

    assert {o.status for o in result.outcomes.values()} == {Status.REJECTED}
    assert result.unknown_shares == {"nobody": 1}
    assert "share a may hold at most 2" in result.outcomes[2].reason
    assert "offers no ml.g5.48xlarge" in result.outcomes[3].reason


def test_the_window_end_stops_the_replay_and_counts_what_is_left():
    jobs = [job(1, "a", 0, 10_000), job(2, "a", 10, 100), job(3, "a", 3590, 100)]

    result = simulate(config(share("a", small=1)), jobs, start=T0, end=T0 + 3600)

    statuses = {job_id: o.status for job_id, o in result.outcomes.items()}
    assert statuses == {1: Status.RUNNING, 2: Status.RUNNABLE, 3: Status.RUNNABLE}
    assert result.stats.passes_on_clock == 120


def test_a_pass_that_cannot_decide_anything_is_skipped_without_changing_the_record():
    rng = random.Random(5)
    jobs = [
        job(i, rng.choice("ab"), rng.uniform(0, 7200), rng.uniform(60, 1800), priority=rng.choice([0, 5]))
        for i in range(1, 120)
    ]
    setup = config(share("a", LEND_AND_BORROW, small=3, in_share_preemption=True), share("b", small=2))

    fast = simulate(setup, jobs, start=T0, verify_shortcuts=True)
    slow = simulate(setup, jobs, start=T0, shortcuts=False)

    assert fast.records == slow.records
    assert fast.stats.passes_run < slow.stats.passes_run


def test_a_replay_is_deterministic_for_a_fixed_seed(philly_day):
    rows, vcs, mix = philly_day
    setup = philly.philly_configuration(
        name="x", vcs=vcs, mix=mix, capacity_scale=0.1, strategy=LEND_AND_BORROW
    )
    start = rows[0].submitted_at

    def run(seed):
        jobs = philly.philly_jobs(rows[:400], setup, seed=seed)
        return simulate(setup, jobs, start=start)

    first, again, other = run(1), run(1), run(2)

    assert first.records == again.records
    metrics, repeated = summarize(first), summarize(again)
    metrics.pop("replay"), repeated.pop("replay")  # wall times
    assert metrics == repeated
    assert first.records != other.records


def test_progress_is_reported_up_to_done():
    seen = []
    jobs = [job(i, "a", 60 * i, 30) for i in range(1, 600)]

    simulate(config(share("a", small=1)), jobs, start=T0, end=T0 + 36_000, progress=seen.append)

    assert seen == sorted(seen) and seen[-1] == 1.0 and len(seen) > 2
