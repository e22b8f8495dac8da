"""Properties of nominations on random queues, pass after pass (behaviour.md#preemption, "Victims stop gracefully" and
the paragraph after it): queues with STOPPING jobs of every kind (victims, cancelled jobs, drained jobs, jobs stopped
for a lowered capacity), nominees from earlier passes, taken and untaken victims, and capacities lowered
between passes. After every pass:

- no nominee without a victim of its own: a job is nominated only in the pass its own preemption stopped
  someone, and it waits only for those of its own victims still STOPPING;
- no reclaim of a share within its limit, counting as the share's only the earmarks of nominees that have
  a victim of their own still STOPPING;
- work conservation with earmarks counted: no job left RUNNABLE (nominees included, their own earmark given
  back to them) has an entry that fits now and once settled;
- every placement is valid now (STOPPING jobs holding; invariant B no worse where a lowered capacity still
  settles) and once settled (every STOPPING job gone, every nominee on its entry).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

from hypothesis import HealthCheck, given, settings, target
from hypothesis import strategies as st

from engine import (
    PLACED_STATUSES,
    Decisions,
    Job,
    JobStatus,
    Ordering,
    PreemptionKind,
    Snapshot,
    Strategy,
    schedule,
)
from engine.order import queue_key

from .builders import apply_decisions
from .oracle import fits_now, fits_without_preemption, limit
from .test_properties import (
    between_passes,
    check_decisions_are_consistent,
    check_invariants_counting_stopping_capacity,
    executors_at_work,
    new_jobs,
    placed_jobs,
    queues,
    settled,
    without_nomination,
)

PASSES = 8


def run_and_check(snap: Snapshot, rng: random.Random) -> Counter[str]:
    """Passes one after another, each held to the properties; returns how often the rarer paths were taken."""
    own: dict[int, set[int]] = {}  # nominee -> the victims its own preemption stopped
    seen: Counter[str] = Counter()
    next_id = 1000
    for _ in range(PASSES):
        snap = executors_at_work(rng, snap)
        decisions = schedule(snap)
        after = apply_decisions(snap, decisions)
        check_decisions_are_consistent(snap, decisions)
        check_nominees_have_victims_of_their_own(snap, decisions, after, own)
        check_no_reclaim_within_limit(snap, decisions, own)
        check_work_conservation_with_earmarks(snap, decisions, after)
        check_invariants_counting_stopping_capacity(snap, decisions, after)
        seen.update(
            nominations=len(decisions.nominations),
            stopping=sum(j.status == JobStatus.STOPPING for j in snap.jobs),
            kept=sum(j.nomination is not None for j in after.jobs),
            reclaims=sum(p.kind == PreemptionKind.RECLAIM for p in decisions.preemptions),
            limit_reduced=sum(p.kind == PreemptionKind.LIMIT_REDUCED for p in decisions.preemptions),
        )
        snap = between_passes(rng, after, next_id)
        next_id += 100
    return seen


def check_nominees_have_victims_of_their_own(
    before: Snapshot, decisions: Decisions, after: Snapshot, own: dict[int, set[int]]
) -> None:
    for nomination in decisions.nominations:
        stopped_by_it = {
            p.job_id for p in decisions.preemptions if p.preemptor_job_id == nomination.job_id and p.graceful
        }
        assert stopped_by_it, f"job {nomination.job_id} nominated without a victim of its own"
        assert set(nomination.victim_ids) == stopped_by_it, (
            f"job {nomination.job_id} waits for {nomination.victim_ids}, its own victims are {stopped_by_it}"
        )
        own[nomination.job_id] = stopped_by_it
    stopping = {j.id for j in after.jobs if j.status == JobStatus.STOPPING}
    for job in after.jobs:
        if job.nomination is not None:
            assert job.nomination.victim_ids, f"job {job.id} nominated for no victim"
            assert set(job.nomination.victim_ids) <= own.get(job.id, set()), (
                f"job {job.id} waits for {set(job.nomination.victim_ids)}, not its own victims"
            )
            assert set(job.nomination.victim_ids) & stopping or job.id in {
                n.job_id for n in decisions.nominations
            }


def check_no_reclaim_within_limit(before: Snapshot, decisions: Decisions, own: dict[int, set[int]]) -> None:
    """A reclaim victim's share is over its limit on the type, counting its jobs placed before the pass and in
    it, and the entries of its nominees that wait for a victim of their own (nominated before the pass, with
    one still STOPPING, or in it): an upper bound on what the pass counted as the share's at the reclaim."""
    shares = {s.id: s for s in before.shares}
    jobs = {j.id: j for j in before.jobs}
    stopping = {j.id for j in before.jobs if j.status == JobStatus.STOPPING}
    for preemption in decisions.preemptions:
        if preemption.kind != PreemptionKind.RECLAIM:
            continue
        share_id, instance_type = preemption.share_id, preemption.instance_type
        held = sum(
            j.placement.instance_count
            for j in before.jobs
            if j.share_id == share_id
            and j.status in PLACED_STATUSES
            and (j.placement.instance_type, j.placement.training_plan) == (instance_type, None)
        )
        held += sum(
            a.instance_count
            for a in decisions.admissions
            if a.share_id == share_id and (a.instance_type, a.training_plan) == (instance_type, None)
        )
        held += sum(
            n.instance_count
            for n in decisions.nominations
            if n.share_id == share_id and n.instance_type == instance_type
        )
        for job in before.jobs:
            nomination = job.nomination
            if job.share_id != share_id or nomination is None or nomination.entry_index >= len(job.entries):
                continue
            entry = job.entries[nomination.entry_index]
            if (entry.instance_type, entry.training_plan) == (instance_type, None) and (
                own.get(job.id, set()) & stopping
            ):
                held += entry.instance_count
        assert held > limit(shares[share_id], instance_type), (
            f"job {preemption.job_id} of share {share_id} reclaimed though its share holds {held} of its "
            f"limit {limit(shares[share_id], instance_type)} ({jobs[preemption.job_id].placement})"
        )


def check_work_conservation_with_earmarks(before: Snapshot, decisions: Decisions, after: Snapshot) -> None:
    """No job left RUNNABLE has an entry that fits now (STOPPING jobs holding) and once settled (every STOPPING
    job gone, every other nominee on its entry), save this pass's victims and the jobs STRICT_FIFO holds."""
    if not before.queue_enabled:
        return
    victims = {p.job_id for p in decisions.preemptions}
    enabled = {share.id for share in after.shares if share.enabled}
    left: dict[int, list[Job]] = {}
    for job in sorted(after.jobs, key=queue_key):
        if job.status == JobStatus.RUNNABLE and job.id not in victims and job.share_id in enabled:
            left.setdefault(job.share_id, []).append(job)
    for share_jobs in left.values():
        checked = share_jobs[:1] if before.ordering == Ordering.STRICT_FIFO else share_jobs
        for job in checked:
            once_settled = settled(without_nomination(after, job.id))
            for entry in job.entries:
                if entry.training_plan is not None:
                    fits = fits_without_preemption(after, job, entry)
                else:
                    fits = fits_now(after, job, entry) and fits_without_preemption(once_settled, job, entry)
                assert not fits, f"job {job.id} fits {entry}"


def contended(queue: Snapshot, rng: random.Random) -> Snapshot:
    queue = replace(
        queue,
        shares=tuple(replace(share, in_share_preemption=rng.random() < 0.7) for share in queue.shares),
    )
    running = [replace(job, taken=rng.random() < 0.7) for job in placed_jobs(rng, queue, rng.randint(10, 40))]
    waiting = [replace(job, priority=rng.choice([1, 5, 9, 9])) for job in new_jobs(rng, queue, 100)]
    return replace(queue, jobs=tuple(running + waiting))


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(), rng=st.randoms(use_true_random=True))
def test_nominations_on_random_queues_keep_to_the_letter(queue: Snapshot, rng: random.Random):
    borrowers = tuple(s for s in queue.shares if s.strategy == Strategy.LEND_AND_BORROW)
    seen = run_and_check(replace(queue, jobs=tuple(new_jobs(rng, queue, 1, borrowers))), rng)
    for label in ["nominations", "stopping", "kept", "limit_reduced"]:
        target(float(seen[label]), label=label)


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(), rng=st.randoms(use_true_random=True))
def test_nominations_on_contended_queues_keep_to_the_letter(queue: Snapshot, rng: random.Random):
    seen = run_and_check(contended(queue, rng), rng)
    for label in ["nominations", "stopping", "kept", "reclaims"]:
        target(float(seen[label]), label=label)
