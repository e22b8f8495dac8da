"""The reclaim-first search decides the same whether it takes the reclaim candidates one by one or a share's
run of them at once (`preemption.in_share_after_all_reclaim`), and whether or not its searches try first where
the rules turn and read a put-back's returns off the candidates' running sums."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Snapshot, preemption, schedule
from engine.synthetic import build_synthetic_snapshot
from engine.types import PLACED_STATUSES

from .test_properties import contended_types, placed_jobs, waiting_on_t0


def one_by_one(state, victims, priority):
    return False, None


def both_ways(snap: Snapshot, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object, int]:
    """The decisions with the shortcut, without it, and how often the shortcut decided."""
    shortcut = preemption.in_share_after_all_reclaim
    decided = 0

    def counting(state, victims, priority):
        nonlocal decided
        answer = shortcut(state, victims, priority)
        decided += answer[0]
        return answer

    with monkeypatch.context() as patch:
        patch.setattr(preemption, "in_share_after_all_reclaim", counting)
        fast = schedule(snap)
    with monkeypatch.context() as patch:
        patch.setattr(preemption, "in_share_after_all_reclaim", one_by_one)
        slow = schedule(snap)
    return fast, slow, decided


def taken_by_executors(snap: Snapshot, seed: int) -> Snapshot:
    """Most placed jobs taken by an executor, so their preemption is a graceful stop (the type settles)."""
    rng = random.Random(seed)
    jobs = tuple(
        replace(job, taken=rng.random() < 0.7) if job.status in PLACED_STATUSES else job for job in snap.jobs
    )
    return replace(snap, jobs=jobs)


original_prefix = preemption.VictimSet.own_prefix


def without_turns(self):
    return []


def walked_whole(self, run):
    candidates, _ = original_prefix(self, run)
    return candidates, 0


def with_and_without_the_shortcuts(
    snap: Snapshot, monkeypatch: pytest.MonkeyPatch
) -> tuple[object, object, int]:
    """The decisions with the searches' shortcuts (probes where the rules turn first, the put-back's returns
    read off the candidates' sums), without them (doubling steps from nothing, a walk over every run), and how
    often a put-back read its returns off the sums."""
    read = 0

    def counting(self, run):
        nonlocal read
        candidates, first = original_prefix(self, run)
        read += first > 0
        return candidates, first

    with monkeypatch.context() as patch:
        patch.setattr(preemption.VictimSet, "own_prefix", counting)
        fast = schedule(snap)
    with monkeypatch.context() as patch:
        patch.setattr(preemption.VictimSet, "turns", without_turns)
        patch.setattr(preemption.VictimSet, "own_prefix", walked_whole)
        slow = schedule(snap)
    return fast, slow, read


# Each shortcut and how to decide with it and without it: the decisions with it, without it, and how often it
# was taken.
SHORTCUTS = {
    "a share's run of victims at once": both_ways,
    "the searches' turns and sums": with_and_without_the_shortcuts,
}


@pytest.mark.parametrize("decide", SHORTCUTS.values(), ids=SHORTCUTS)
@pytest.mark.parametrize("seed", [1, 7, 19])
@pytest.mark.parametrize("shares,types", [(20, 5), (12, 8), (6, 2)])
@pytest.mark.parametrize("graceful", [False, True])
def test_synthetic_queues_get_the_same_decisions_and_the_shortcut_is_taken(
    decide, seed, shares, types, graceful, monkeypatch
):
    snap = build_synthetic_snapshot(runnable=1500, placed=300, shares=shares, types=types, seed=seed)
    if graceful:
        snap = taken_by_executors(snap, seed)
    fast, slow, taken = decide(snap, monkeypatch)
    assert fast == slow
    assert fast.preemptions
    assert taken > 0


@pytest.mark.parametrize("decide", SHORTCUTS.values(), ids=SHORTCUTS)
@settings(max_examples=600, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(queue=contended_types(), rng=st.randoms(use_true_random=True), graceful=st.booleans())
def test_contended_passes_get_the_same_victims(decide, queue: Snapshot, rng: random.Random, graceful: bool):
    running = placed_jobs(rng, replace(queue, capacity={"t0": queue.capacity["t0"]}), rng.randint(6, 20))
    if graceful:
        running = [replace(job, taken=rng.random() < 0.7) for job in running]
    waiting = waiting_on_t0(rng, queue, most_jobs=4, most_entries=3)
    before = replace(queue, jobs=tuple(running + waiting))
    with pytest.MonkeyPatch.context() as patch:
        fast, slow, _ = decide(before, patch)
    assert fast == slow
