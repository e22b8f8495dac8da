"""Shares that refuse all are parked (engine/refusals.py): the pass decides exactly as when it takes every
head one by one, reasons, positions and pass record included, and it does take far fewer heads."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Snapshot, Strategy, schedule, synthetic
from engine.scheduler import PassRun
from engine.types import Ordering

from .builders import apply_decisions
from .test_model import more_changes, with_budgets, with_weights
from .test_properties import between_passes, executors_at_work, new_jobs, placed_jobs, queues


def one_by_one(snapshot: Snapshot, monkeypatch: pytest.MonkeyPatch):
    with monkeypatch.context() as patch:
        patch.setattr(PassRun, "park_refusing_shares", False)
        return schedule(snapshot)


def count_heads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    tried = [0]
    try_place = PassRun.try_place

    def counting(self, job, heads, *, allow_preemption):
        tried[0] += 1
        return try_place(self, job, heads, allow_preemption=allow_preemption)

    monkeypatch.setattr(PassRun, "try_place", counting)
    return tried


def compare(snapshot: Snapshot, rng: random.Random, passes: int, *, graceful: bool = False) -> None:
    next_id = 1000
    with pytest.MonkeyPatch.context() as monkeypatch:
        for _ in range(passes):
            if graceful:
                snapshot = executors_at_work(rng, snapshot)
            decisions = schedule(snapshot)
            assert decisions == one_by_one(snapshot, monkeypatch)
            snapshot = more_changes(rng, between_passes(rng, apply_decisions(snapshot, decisions), next_id))
            next_id += 100


def contended(queue: Snapshot, rng: random.Random) -> Snapshot:
    queue = with_weights(queue, rng)
    queue = replace(
        queue, shares=tuple(replace(s, in_share_preemption=rng.random() < 0.5) for s in queue.shares)
    )
    running = placed_jobs(rng, queue, rng.randint(10, 40))
    waiting = [replace(job, priority=rng.choice([1, 5, 9, 9])) for job in new_jobs(rng, queue, 120)]
    return replace(queue, jobs=tuple(running + waiting))


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(), rng=st.randoms(use_true_random=True))
def test_parking_decides_as_one_by_one_on_contended_queues(queue: Snapshot, rng: random.Random):
    compare(contended(queue, rng), rng, 6)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(), rng=st.randoms(use_true_random=True))
def test_parking_decides_as_one_by_one_while_victims_stop(queue: Snapshot, rng: random.Random):
    compare(contended(queue, rng), rng, 6, graceful=True)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(), rng=st.randoms(use_true_random=True))
def test_parking_decides_as_one_by_one_with_borrowers(queue: Snapshot, rng: random.Random):
    borrowers = tuple(s for s in queue.shares if s.strategy == Strategy.LEND_AND_BORROW)
    queue = with_weights(queue, rng)
    compare(replace(queue, jobs=tuple(new_jobs(rng, queue, 1, borrowers))), rng, 8)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(), rng=st.randoms(use_true_random=True))
def test_parking_decides_as_one_by_one_with_budgets_spent_or_not(queue: Snapshot, rng: random.Random):
    compare(with_budgets(contended(queue, rng), rng), rng, 6, graceful=True)


def test_a_busy_queue_takes_far_fewer_heads_for_the_same_decisions(monkeypatch):
    snapshot = synthetic.build_synthetic_snapshot(runnable=3000, placed=600, shares=20, types=5, seed=3)
    tried = count_heads(monkeypatch)
    parked = schedule(snapshot)
    with_parking, tried[0] = tried[0], 0
    assert parked == one_by_one(snapshot, monkeypatch)
    assert parked.admissions and parked.preemptions and parked.pending
    # Most heads of this queue belong to shares with no room anywhere: taken one by one, every job is a
    # head; parked, only those of shares that could place or preempt are.
    assert tried[0] >= 2_500
    assert with_parking * 2 < tried[0]


def test_strict_fifo_is_left_to_its_own_blocking(monkeypatch):
    snapshot = synthetic.build_synthetic_snapshot(runnable=1500, placed=300, shares=10, types=3, seed=4)
    snapshot = replace(snapshot, ordering=Ordering.STRICT_FIFO)
    assert schedule(snapshot) == one_by_one(snapshot, monkeypatch)
