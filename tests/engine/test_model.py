"""The engine against `model`, a plain reading of behaviour.md#the-scheduling-pass, pass after pass on random queues.

Every decision is compared: who is placed, on which entry and borrowing how much, in which order; who is
preempted, by whom, of which kind, failing or not, in which order; drains, timeouts and queue positions.
The default profile runs a few hundred derandomized examples; `HYPOTHESIS_PROFILE=fuzz` searches fresh ones,
as many as `FUZZ_EXAMPLES` says (see tests/conftest.py):

    HYPOTHESIS_PROFILE=fuzz FUZZ_EXAMPLES=20000 .venv/bin/python -m pytest tests/engine/test_model.py -q
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import (
    PLACED_STATUSES,
    Budget,
    BudgetPeriod,
    BudgetScope,
    Decisions,
    Entry,
    JobStatus,
    Placement,
    Snapshot,
    Strategy,
    schedule,
)

from .builders import apply_decisions
from .model import ModelDecisions, model_pass
from .oracle import limit, on_demand_usage
from .test_properties import (
    between_passes,
    check_graceful_pass,
    executors_at_work,
    new_jobs,
    placed_jobs,
    queues,
)

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
        relocations=[
            (r.job_id, r.from_entry_index, r.entry_index, r.graceful) for r in decisions.relocations
        ],
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


def with_relocation(rng: random.Random, snap: Snapshot) -> Snapshot:
    """Jobs opt in to relocation at random, the queue's settings vary, and taken jobs run."""
    return replace(
        snap,
        relocation_min_runtime_seconds=rng.choice([0, 600, 1800]),
        max_relocations_per_pass=rng.choice([0, 1, 2, 4]),
        jobs=tuple(
            replace(
                job,
                relocate=job.relocate or (job.status == JobStatus.RUNNABLE and rng.random() < 0.6),
                status=JobStatus.RUNNING if job.status in PLACED_STATUSES and job.taken else job.status,
            )
            for job in snap.jobs
        ),
    )


def compare_passes(
    snap: Snapshot,
    rng: random.Random,
    passes: int = PASSES,
    *,
    graceful: bool = False,
    relocation: bool = False,
) -> int:
    """Passes compared one by one; returns how many jobs were relocated."""
    next_id = 1000
    moved = 0
    for _ in range(passes):
        if graceful:
            snap = executors_at_work(rng, snap)
        if relocation:
            snap = with_relocation(rng, snap)
        decisions = schedule(snap)
        assert engine_decisions(decisions) == model_pass(snap)
        moved += len(decisions.relocations)
        snap = more_changes(rng, between_passes(rng, apply_decisions(snap, decisions), next_id))
        next_id += 100
    return moved


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


def relocation_passes(queue: Snapshot, rng: random.Random, passes: int = 10) -> Counter[str]:
    """A queue full of running jobs, and jobs with several entries that opt in to relocation: as the running
    jobs finish and few new ones arrive, earlier entries free and the opted-in jobs may move. Every pass is
    compared with the model; returns how many jobs were moved gracefully and at once."""
    running = []
    options = [Entry(t, n) for t in sorted(queue.capacity) for n in (1, 2, 4)]
    options += [Entry(p.instance_type, n, p.name) for p in queue.plans for n in (1, 2, 4)]
    for job in placed_jobs(rng, queue, rng.randint(5, 20)):
        if rng.random() < 0.7:  # it fell back: it runs on its last entry and prefers others
            earlier = [
                e
                for e in rng.sample(options, min(len(options), 2))
                if e.instance_type != job.entries[0].instance_type or e.training_plan
            ]
            job = replace(job, entries=tuple(earlier) + job.entries, relocate=True, taken=rng.random() < 0.6)
        running.append(job)
    waiting = new_jobs(rng, queue, 100) if rng.random() < 0.5 else []
    snap = replace(queue, jobs=tuple(running + waiting))
    moved: Counter[str] = Counter()
    # Jobs moved gracefully and not placed since -> whether nothing was changed by hand since the move.
    stopping: dict[int, bool] = {}
    for _ in range(passes):
        before = snap
        snap = with_relocation(rng, executors_at_work(rng, snap))
        if [s.enabled for s in snap.shares] != [s.enabled for s in before.shares]:
            stopping = dict.fromkeys(stopping, False)
        decisions = schedule(snap)
        assert engine_decisions(decisions) == model_pass(snap)
        check_relocations(snap, decisions, stopping)
        check_graceful_pass(snap, decisions, apply_decisions(snap, decisions))
        moved.update("graceful" if r.graceful else "at once" for r in decisions.relocations)
        moved.update("onto a plan" for r in decisions.relocations if r.training_plan is not None)
        snap = apply_decisions(snap, decisions)
        placed_ids = sorted(job.id for job in snap.jobs if job.status in PLACED_STATUSES)
        finished = set(rng.sample(placed_ids, min(len(placed_ids), rng.randint(0, 6))))
        finished -= {job.id for job in snap.jobs if job.relocate and rng.random() < 0.8}
        snap = replace(
            snap,
            now=snap.now + timedelta(seconds=rng.choice([0, 600, 1800, 3600])),
            jobs=tuple(job for job in snap.jobs if job.id not in finished),
        )
        if rng.random() < 0.2:
            snap = more_changes(rng, snap)
            stopping = dict.fromkeys(stopping, False)
    return moved


def borrows(share, usage, entry) -> int:
    """Instances above the share's limit a job accounts for on `entry`, `usage` being the share's without it."""
    if entry.training_plan is not None:
        return 0
    before, cap = usage[share.id, entry.instance_type], limit(share, entry.instance_type)
    return max(0, before + entry.instance_count - cap) - max(0, before - cap)


def check_relocations(snap: Snapshot, decisions: Decisions, stopping: dict[int, bool]) -> None:
    """behaviour.md#moving-to-a-preferred-entry read off each pass: a move takes nothing a waiting job asks for, borrows
    no more, and happens once an attempt. (Its earmark is checked by `check_graceful_pass`: every rule holds once
    settled with each moving job on its new entry, so nobody was given that room meanwhile.)"""
    jobs = {job.id: job for job in snap.jobs}
    enabled = {s.id for s in snap.shares if s.enabled}
    # What the jobs still waiting after the pass ask for: (type, plan or None).
    asked = {
        (e.instance_type, e.training_plan)
        for job in apply_decisions(snap, decisions).jobs
        if job.status == JobStatus.RUNNABLE and job.share_id in enabled
        for e in job.entries
    }
    for job_id in list(stopping):
        job = jobs.get(job_id)
        if job is None or job.status != JobStatus.STOPPING:
            del stopping[job_id]  # stopped: its next placement is a new attempt
    # Borrowing is read on what the pass left when it came to the moves: its decisions up to the first
    # admission of a job moved at once (the sweep after the moves comes later), then each move in turn.
    moved_at_once = {r.job_id for r in decisions.relocations if not r.graceful}
    cut = next((i for i, a in enumerate(decisions.admissions) if a.job_id in moved_at_once), None)
    left = apply_decisions(snap, replace(decisions, relocations=[], admissions=decisions.admissions[:cut]))
    for move in decisions.relocations:
        job = jobs[move.job_id]
        assert job.status == JobStatus.RUNNING and move.job_id not in stopping
        target = job.entries[move.entry_index]
        if target.training_plan is not None:
            assert not any(plan == target.training_plan for _, plan in asked)
        else:
            assert (target.instance_type, None) not in asked
        share = next(s for s in snap.shares if s.id == job.share_id)
        usage = on_demand_usage(replace(left, jobs=tuple(j for j in left.jobs if j.id != job.id)))
        assert borrows(share, usage, target) <= borrows(share, usage, job.entries[move.from_entry_index])
        if move.graceful:
            stopping[move.job_id] = True
        else:  # it holds its new entry for the moves after it
            placement = Placement(target.instance_type, target.instance_count, target.training_plan, snap.now)
            left = replace(
                left, jobs=tuple(replace(j, placement=placement) if j.id == job.id else j for j in left.jobs)
            )


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(), rng=st.randoms(use_true_random=True))
def test_engine_relocates_as_spec_reads_on_random_queues(queue: Snapshot, rng: random.Random):
    queue = with_weights(queue, rng)
    borrowers = tuple(s for s in queue.shares if s.strategy == Strategy.LEND_AND_BORROW)
    jobs = new_jobs(rng, queue, 1, borrowers) + new_jobs(rng, queue, 20)
    compare_passes(replace(queue, jobs=tuple(jobs)), rng, 10, graceful=True, relocation=True)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(), rng=st.randoms(use_true_random=True))
def test_engine_relocates_as_spec_reads_as_running_jobs_finish(queue: Snapshot, rng: random.Random):
    relocation_passes(with_weights(queue, rng), rng)


def test_random_queues_with_relocation_do_move_jobs():
    """The comparisons above are not idle: over seeded queues, jobs are moved."""
    moved: Counter[str] = Counter()

    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(queue=queues(), seed=st.integers(0, 10**6))
    def count(queue: Snapshot, seed: int):
        moved.update(relocation_passes(queue, random.Random(seed)))

    count()
    assert moved["graceful"] >= 5 and moved["at once"] >= 1 and moved["onto a plan"] >= 2, moved
