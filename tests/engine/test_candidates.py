"""A holding's candidate list, after some of its jobs stop, reads as a list built afresh from the live ones."""

from __future__ import annotations

import random

import pytest

from engine.candidates import Candidates

from .builders import P5, placed, share

TEAM = share(1, "team", limits={P5: 100})


def jobs_in_victim_order(rng: random.Random, count: int) -> list:
    priorities = sorted(rng.choice([0, 1, 2, 5]) for _ in range(count))
    return [
        placed(i, TEAM, P5, rng.choice([1, 2, 4, 8]), priority=priority)
        for i, priority in enumerate(priorities, start=1)
    ]


def readings(candidates: Candidates) -> tuple:
    """Everything a search reads of the list."""
    total = candidates.instances(len(candidates))
    return (
        len(candidates),
        [job.id for job in candidates.all()],
        [candidates.instances(k) for k in range(len(candidates) + 1)],
        [candidates.below(priority) for priority in range(7)],
        [candidates.fewest_holding(instances) for instances in range(total + 2)],
        [job.id for job in candidates.first(3)],
        [
            candidates.tail_within(count, instances)
            for count in range(len(candidates) + 1)
            for instances in range(0, 20, 3)
        ],
    )


def walked_tail(jobs: list, instances: int) -> int:
    """Where a walk from the end of `jobs`, taking each while its instances are within what is left, stops."""
    position = len(jobs)
    while position and jobs[position - 1].placement.instance_count <= instances:
        position -= 1
        instances -= jobs[position].placement.instance_count
    return position


@pytest.mark.parametrize("seed", range(40))
def test_jobs_stopped_near_the_front_leave_the_list_a_fresh_one_would_be(seed):
    rng = random.Random(seed)
    jobs = jobs_in_victim_order(rng, rng.randint(1, 30))
    candidates = Candidates(0, jobs)
    live = list(jobs)
    for _ in range(rng.randint(1, 4)):  # several passes of stops, each from the front with holes
        if not live:
            break
        reach = rng.randint(1, min(len(live), 8))
        stopped = {job.id for job in live[:reach] if rng.random() < 0.6} or {live[reach - 1].id}
        lost = sum(job.placement.instance_count for job in live if job.id in stopped)
        assert candidates.drop_stopped(stopped, lost)
        live = [job for job in live if job.id not in stopped]
        assert readings(candidates) == readings(Candidates(0, live))


@pytest.mark.parametrize("seed", range(20))
def test_the_tail_within_some_instances_begins_where_a_walk_from_the_end_stops(seed):
    rng = random.Random(seed)
    jobs = jobs_in_victim_order(rng, rng.randint(1, 30))
    candidates = Candidates(0, list(jobs))  # the list rewrites its own jobs in place
    stopped = {job.id for job in jobs[: rng.randint(0, 6)] if rng.random() < 0.5}
    lost = sum(job.placement.instance_count for job in jobs if job.id in stopped)
    if stopped:
        assert candidates.drop_stopped(stopped, lost)
    live = [job for job in jobs if job.id not in stopped]
    for count in range(len(live) + 1):
        held = sum(job.placement.instance_count for job in live[:count])
        for instances in range(held + 2):
            assert candidates.tail_within(count, instances) == walked_tail(live[:count], instances)


def test_a_stop_the_list_does_not_hold_leaves_it_unchanged_and_says_so():
    jobs = jobs_in_victim_order(random.Random(3), 12)
    candidates = Candidates(0, jobs)
    before = readings(candidates)
    # The first job stopped, and so did a job that is no candidate (protected): more lost than the list holds.
    first = jobs[0]
    assert not candidates.drop_stopped({first.id, 999}, first.placement.instance_count + 4)
    assert readings(candidates) == before
