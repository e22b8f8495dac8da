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
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Decisions, Snapshot, Strategy, schedule

from .builders import apply_decisions
from .model import ModelDecisions, model_pass
from .test_properties import between_passes, new_jobs, placed_jobs, queues

PASSES = 5


def engine_decisions(decisions: Decisions) -> ModelDecisions:
    """The engine's decisions in the model's terms."""
    return ModelDecisions(
        admissions=[(a.job_id, a.entry_index, a.borrowed) for a in decisions.admissions],
        preemptions=[(p.job_id, p.kind, p.preemptor_job_id, p.fails) for p in decisions.preemptions],
        drains={d.job_id for d in decisions.drains},
        timeouts={t.job_id for t in decisions.timeouts},
        positions={p.job_id: p.queue_position for p in decisions.pending},
    )


def with_weights(queue: Snapshot, rng: random.Random) -> Snapshot:
    weights = [Decimal(1), Decimal(1), Decimal(2), Decimal("0.5"), Decimal(3)]
    return replace(
        queue, shares=tuple(replace(s, fair_share_weight=rng.choice(weights)) for s in queue.shares)
    )


def compare_passes(snap: Snapshot, rng: random.Random, passes: int = PASSES) -> None:
    next_id = 1000
    for _ in range(passes):
        decisions = schedule(snap)
        assert engine_decisions(decisions) == model_pass(snap)
        snap = between_passes(rng, apply_decisions(snap, decisions), next_id)
        next_id += 100


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(), rng=st.randoms(use_true_random=True))
def test_engine_decides_as_spec_reads_on_random_queues(queue: Snapshot, rng: random.Random):
    queue = with_weights(queue, rng)
    borrowers = tuple(s for s in queue.shares if s.strategy == Strategy.LEND_AND_BORROW)
    compare_passes(replace(queue, jobs=tuple(new_jobs(rng, queue, 1, borrowers))), rng)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(), rng=st.randoms(use_true_random=True))
def test_engine_decides_as_spec_reads_on_contended_queues(queue: Snapshot, rng: random.Random):
    queue = with_weights(queue, rng)
    queue = replace(
        queue, shares=tuple(replace(s, in_share_preemption=rng.random() < 0.7) for s in queue.shares)
    )
    running = placed_jobs(rng, queue, rng.randint(10, 40))
    waiting = [replace(job, priority=rng.choice([1, 5, 9, 9])) for job in new_jobs(rng, queue, 100)]
    compare_passes(replace(queue, jobs=tuple(running + waiting)), rng)
