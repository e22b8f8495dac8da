"""What the working state gathers in its one walk over the jobs, and the share queues built from it."""

import random
from dataclasses import replace

import pytest

from engine import JobStatus, schedule
from engine.capacity import WorkingState
from engine.order import queue_key, share_queues
from engine.synthetic import build_synthetic_snapshot
from engine.types import PLACED_STATUSES, Nomination


def varied(seed: int):
    """A synthetic queue whose jobs come shuffled, some with a nomination, a max_pending_seconds or
    `relocate`, some placed jobs STOPPING, and some statuses given as plain strings."""
    rng = random.Random(seed)
    snap = build_synthetic_snapshot(runnable=300, placed=120, shares=6, types=3, seed=seed)
    jobs = []
    for job in snap.jobs:
        fields = {}
        if rng.random() < 0.2:
            fields["nomination"] = Nomination(0, frozenset({job.id}))
        if rng.random() < 0.3:
            fields["relocate"] = True
        if job.status == JobStatus.RUNNABLE and rng.random() < 0.1:
            fields["status"] = "RUNNABLE"
        if job.status in PLACED_STATUSES and rng.random() < 0.2:
            fields["status"] = rng.choice(
                [JobStatus.STOPPING, JobStatus.SCHEDULED, JobStatus.STARTING, "RUNNING"]
            )
        jobs.append(replace(job, **fields) if fields else job)
    rng.shuffle(jobs)
    return replace(snap, jobs=tuple(jobs))


@pytest.mark.parametrize("seed", range(8))
def test_the_working_state_gathers_in_id_order_what_each_step_of_the_pass_asks_about(seed):
    state = WorkingState(varied(seed))

    assert [job.id for job in state.jobs] == sorted(job.id for job in state.jobs)
    assert state.runnable_jobs == [job for job in state.jobs if job.status == JobStatus.RUNNABLE]
    assert state.may_time_out == [
        job for job in state.jobs if job.status == JobStatus.RUNNABLE and job.max_pending_seconds is not None
    ]
    assert state.placed_jobs == [job for job in state.jobs if job.status in PLACED_STATUSES]
    assert state.nominated_jobs == [job for job in state.jobs if job.nomination is not None]
    assert state.relocatable_jobs == [
        job for job in state.jobs if job.relocate and job.status == JobStatus.RUNNING
    ]
    assert state.nominated_jobs and state.relocatable_jobs and state.may_time_out  # each is asked about


@pytest.mark.parametrize("seed", range(8))
def test_share_queues_are_in_queue_order_whichever_order_the_jobs_come_in(seed):
    rng = random.Random(seed)
    snap = build_synthetic_snapshot(runnable=2_000, placed=0, shares=7, types=2, seed=seed)
    # Ties of priority and submission time, broken by id.
    jobs = [
        replace(job, submitted_at=snap.jobs[rng.randrange(40)].submitted_at) if rng.random() < 0.3 else job
        for job in snap.jobs
    ]
    expected = {}
    for job in sorted(jobs, key=queue_key):
        expected.setdefault(job.share_id, []).append(job)
    expected = dict(sorted(expected.items()))
    shuffled = list(jobs)
    rng.shuffle(shuffled)

    by_id = share_queues(sorted(jobs, key=lambda job: job.id), in_id_order=True)
    assert by_id == expected and list(by_id) == list(expected)
    assert share_queues(shuffled) == expected


def test_a_pass_over_the_varied_queues_decides_as_a_pass_over_the_same_jobs_in_another_order():
    for seed in range(4):
        snap = varied(seed)
        reordered = replace(snap, jobs=tuple(sorted(snap.jobs, key=lambda job: -job.id)))
        assert repr(schedule(snap)) == repr(schedule(reordered))
