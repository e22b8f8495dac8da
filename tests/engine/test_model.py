"""The engine against `model`, a plain reading of SPEC 3, pass after pass on random queues.

Every decision is compared: who is placed, on which entry and borrowing how much, in which order; who is
preempted, by whom, of which kind, failing or not, in which order; drains, timeouts and queue positions.
The default profile runs a few hundred derandomized examples; `HYPOTHESIS_PROFILE=fuzz` searches fresh ones,
as many as `FUZZ_EXAMPLES` says (see tests/conftest.py):

    HYPOTHESIS_PROFILE=fuzz FUZZ_EXAMPLES=20000 .venv/bin/python -m pytest tests/engine/test_model.py -q
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Budget, BudgetPeriod, BudgetScope, Decisions, JobStatus, Snapshot, Strategy, schedule

from .builders import apply_decisions
from .model import ModelDecisions, model_pass
from .test_properties import between_passes, executors_at_work, new_jobs, placed_jobs, queues

PASSES = 5


def engine_decisions(decisions: Decisions) -> ModelDecisions:
    """The engine's decisions in the model's terms."""
    return ModelDecisions(
        admissions=[(a.job_id, a.entry_index, a.borrowed) for a in decisions.admissions],
        preemptions=[
            (p.job_id, p.kind, p.preemptor_job_id, p.fails, p.graceful) for p in decisions.preemptions
        ],
        drains={d.job_id: d.graceful for d in decisions.drains},
        timeouts={t.job_id for t in decisions.timeouts},
        nominations={n.job_id: (n.entry_index, tuple(sorted(n.victim_ids))) for n in decisions.nominations},
        lapsed=sorted(decisions.lapsed_nominations),
        positions={p.job_id: p.queue_position for p in decisions.pending},
    )


def with_weights(queue: Snapshot, rng: random.Random) -> Snapshot:
    weights = [Decimal(1), Decimal(1), Decimal(2), Decimal("0.5"), Decimal(3)]
    return replace(
        queue, shares=tuple(replace(s, fair_share_weight=rng.choice(weights)) for s in queue.shares)
    )


def random_budget(rng: random.Random, snap: Snapshot) -> Budget | None:
    """No budget, or one spent or not, of either scope."""
    if rng.random() < 0.4:
        return None
    return Budget(
        gpu_hours=Decimal(100),
        period=rng.choice(list(BudgetPeriod)),
        scope=rng.choice(list(BudgetScope)),
        used_gpu_hours=Decimal(rng.choice([0, 79, 100, 130])),
        resets_at=snap.now + timedelta(hours=rng.choice([1, 20, 200])),
    )


def with_budgets(queue: Snapshot, rng: random.Random) -> Snapshot:
    return replace(queue, shares=tuple(replace(s, budget=random_budget(rng, queue)) for s in queue.shares))


def more_changes(rng: random.Random, snap: Snapshot) -> Snapshot:
    """What `between_passes` leaves out: lending limits and weights changed, priorities changed, the queue
    disabled for a pass, submission times that tie across shares, and budgets set, spent or reset."""
    change = rng.choice(["none", "none", "lending", "weight", "priority", "queue", "ties", "budget"])
    if change == "lending":
        share = rng.choice(snap.shares)
        if share.strategy != Strategy.RESERVE and share.limits:
            instance_type = rng.choice(sorted(share.limits))
            lending = {**share.lending_limits, instance_type: rng.randint(0, share.limits[instance_type])}
            if rng.random() < 0.3:
                lending.pop(instance_type)
            snap = replace(
                snap,
                shares=tuple(replace(s, lending_limits=lending) if s is share else s for s in snap.shares),
            )
    elif change == "weight":
        snap = with_weights(snap, rng)
    elif change == "budget":
        share = rng.choice(snap.shares)
        budget = random_budget(rng, snap)
        snap = replace(
            snap, shares=tuple(replace(s, budget=budget) if s is share else s for s in snap.shares)
        )
    elif change == "priority" and snap.jobs:
        job = rng.choice(snap.jobs)
        changed = replace(job, priority=rng.choice([0, 1, 5, 9]))
        snap = replace(snap, jobs=tuple(changed if j is job else j for j in snap.jobs))
    elif change == "queue":
        snap = replace(snap, queue_enabled=not snap.queue_enabled)
    elif change == "ties":
        moments = [snap.now - timedelta(seconds=s) for s in (0, 60, 60, 300)]
        snap = replace(
            snap,
            jobs=tuple(
                replace(j, submitted_at=rng.choice(moments)) if j.status == JobStatus.RUNNABLE else j
                for j in snap.jobs
            ),
        )
    if change != "queue" and not snap.queue_enabled and rng.random() < 0.7:
        snap = replace(snap, queue_enabled=True)
    return snap


def compare_passes(
    snap: Snapshot, rng: random.Random, passes: int = PASSES, *, graceful: bool = False
) -> None:
    next_id = 1000
    for _ in range(passes):
        if graceful:
            snap = executors_at_work(rng, snap)
        decisions = schedule(snap)
        assert engine_decisions(decisions) == model_pass(snap)
        snap = more_changes(rng, between_passes(rng, apply_decisions(snap, decisions), next_id))
        next_id += 100


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(), rng=st.randoms(use_true_random=True))
def test_engine_decides_as_spec_reads_on_random_queues(queue: Snapshot, rng: random.Random):
    queue = with_budgets(with_weights(queue, rng), rng)
    borrowers = tuple(s for s in queue.shares if s.strategy == Strategy.LEND_AND_BORROW)
    compare_passes(replace(queue, jobs=tuple(new_jobs(rng, queue, 1, borrowers))), rng)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(), rng=st.randoms(use_true_random=True))
def test_engine_decides_as_spec_reads_on_contended_queues(queue: Snapshot, rng: random.Random):
    queue = with_budgets(with_weights(queue, rng), rng)
    queue = replace(
        queue, shares=tuple(replace(s, in_share_preemption=rng.random() < 0.7) for s in queue.shares)
    )
    running = placed_jobs(rng, queue, rng.randint(10, 40))
    waiting = [replace(job, priority=rng.choice([1, 5, 9, 9])) for job in new_jobs(rng, queue, 100)]
    compare_passes(replace(queue, jobs=tuple(running + waiting)), rng)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(), rng=st.randoms(use_true_random=True))
def test_engine_decides_as_spec_reads_when_victims_stop_gracefully(queue: Snapshot, rng: random.Random):
    queue = with_budgets(with_weights(queue, rng), rng)
    borrowers = tuple(s for s in queue.shares if s.strategy == Strategy.LEND_AND_BORROW)
    compare_passes(replace(queue, jobs=tuple(new_jobs(rng, queue, 1, borrowers))), rng, 8, graceful=True)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(), rng=st.randoms(use_true_random=True))
def test_engine_decides_as_spec_reads_on_contended_queues_with_graceful_stops(queue: Snapshot, rng):
    queue = with_budgets(with_weights(queue, rng), rng)
    queue = replace(
        queue, shares=tuple(replace(s, in_share_preemption=rng.random() < 0.7) for s in queue.shares)
    )
    running = [replace(job, taken=rng.random() < 0.7) for job in placed_jobs(rng, queue, rng.randint(10, 40))]
    waiting = [replace(job, priority=rng.choice([1, 5, 9, 9])) for job in new_jobs(rng, queue, 100)]
    compare_passes(replace(queue, jobs=tuple(running + waiting)), rng, 8, graceful=True)
