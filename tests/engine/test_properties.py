"""Properties of any sequence of passes: the capacity rules and the promises of the scheduling pass
(behaviour.md).

Random queues (1-4 types, 1-5 shares of random strategy, limits, borrow limits and in-share preemption,
the sum of limits within capacity, 0-2 training plans) receive random jobs; passes run one after another,
with jobs finishing, time passing and administrators lowering capacities, limits and plans in between. After
every pass the decisions are applied and checked against `oracle`, which computes the rules from scratch, and
every victim set and LIMIT_REDUCED stop against `reference`, a plain reading of behaviour.md#preemption and of
behaviour.md#capacity-what-a-share-may-hold's last rule. Runs are derandomized: the same examples on every run, so a
failure is reproducible.

With graceful stops (`graceful=True`) placed jobs are taken by their executor at random, so victims go
STOPPING and preemptors are nominated; STOPPING jobs finish at random between passes. Those passes are held
to `check_graceful_pass`: behaviour.md#capacity-what-a-share-may-hold counting STOPPING capacity wherever the pass
placed, every invariant once the STOPPING jobs are gone and every nominated job holds its entry (the earmarks are
sound), no over-preemption (a job whose nomination stands never preempts), and the same decisions on a second run.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from datetime import timedelta

from hypothesis import HealthCheck, given, settings, target
from hypothesis import strategies as st

from engine import (
    PLACED_STATUSES,
    Decisions,
    Entry,
    IdleCapacityAssignment,
    Job,
    JobStatus,
    Ordering,
    Placement,
    Plan,
    PreemptionKind,
    Share,
    Snapshot,
    Strategy,
    schedule,
    synthetic,
)
from engine.order import queue_key

from . import reference
from .builders import NOW, apply_decisions, finish_stopping
from .oracle import (
    fits_without_preemption,
    invariant_violations,
    makes_room,
    most_allowed,
    on_demand_usage,
    reserved,
    starts_no_new_job,
)

TYPES = ("t0", "t1", "t2", "t3")
PASSES = 5


@st.composite
def queues(draw, *, lenders_and_a_borrower: bool = False) -> Snapshot:
    """A queue; with `lenders_and_a_borrower`, share 1 borrows all it uses and the others own everything."""
    types = TYPES[: draw(st.integers(1, 4))]
    capacity = {t: draw(st.integers(2, 16)) for t in types}
    share_ids = list(range(1, draw(st.sampled_from([3, 2, 4, 5, 1])) + 1))
    if lenders_and_a_borrower:
        share_ids = list(range(1, draw(st.integers(2, 5)) + 1))
    limits: dict[int, dict[str, int]] = {share_id: {} for share_id in share_ids}
    for t in types:
        # Shares own most of each type, so that borrowing soon takes what others own and reclaim follows.
        owned = max(0, capacity[t] - (0 if lenders_and_a_borrower else draw(st.sampled_from([0, 1, 2, 4]))))
        owners = sorted(
            draw(st.sets(st.sampled_from(share_ids[1:] if lenders_and_a_borrower else share_ids)))
        )
        for i, share_id in enumerate(owners):
            after = len(owners) - i - 1
            if owned - after < 1:
                break
            n = owned if not after else draw(st.integers(1, owned - after))
            limits[share_id][t] = n
            owned -= n
    shares = []
    for share_id in share_ids:
        if lenders_and_a_borrower:
            strategy = draw(st.sampled_from([Strategy.LEND, Strategy.LEND_AND_BORROW, Strategy.RESERVE]))
        else:
            strategy = draw(st.sampled_from([Strategy.LEND_AND_BORROW, Strategy.LEND, Strategy.RESERVE]))
        borrow_limit = (
            draw(st.sampled_from([-1, 0, 50, 100, 200])) if strategy == Strategy.LEND_AND_BORROW else -1
        )
        if lenders_and_a_borrower and share_id == 1:
            strategy, borrow_limit = Strategy.LEND_AND_BORROW, -1
        # Some lending shares lend only part of a limit (a lending limit from 0 to the limit).
        lending_limits = {}
        if strategy != Strategy.RESERVE and draw(st.booleans()):
            lending_limits = {t: draw(st.integers(0, n)) for t, n in limits[share_id].items()}
        shares.append(
            Share(
                id=share_id,
                name=f"s{share_id}",
                strategy=strategy,
                limits=limits[share_id],
                borrow_limit=borrow_limit,
                in_share_preemption=draw(st.booleans()),
                enabled=draw(st.sampled_from([True] * 19 + [False])),
                lending_limits=lending_limits,
            )
        )
    plans = []
    for plan_id in range(1, draw(st.integers(0, 2)) + 1):
        starts = timedelta(minutes=draw(st.sampled_from([-30, -120, 0, 60, -600])))
        plans.append(
            Plan(
                id=plan_id,
                name=f"plan{plan_id}",
                instance_type=draw(st.sampled_from(types)),
                instance_count=draw(st.integers(1, 8)),
                start_time=NOW + starts,
                end_time=NOW + starts + timedelta(minutes=draw(st.sampled_from([90, 45, 240, 1200]))),
                share_ids=frozenset(draw(st.sets(st.sampled_from([s.id for s in shares])))),
            )
        )
    return Snapshot(
        now=NOW,
        capacity=capacity,
        shares=tuple(shares),
        jobs=(),
        plans=tuple(plans),
        ordering=draw(
            st.sampled_from([Ordering.BEST_EFFORT_FIFO, Ordering.BEST_EFFORT_FIFO, Ordering.STRICT_FIFO])
        ),
        idle_capacity_assignment=draw(st.sampled_from(list(IdleCapacityAssignment))),
        preemption_min_runtime_seconds=draw(st.sampled_from([0, 0, 600, 3600])),
    )


def new_jobs(rng: random.Random, snap: Snapshot, first_id: int, shares: tuple[Share, ...] = ()) -> list[Job]:
    """Jobs that mostly ask for types their share has a limit for (any type for a share that may borrow)."""
    jobs = []
    for job_id in range(first_id, first_id + rng.randint(2, 10)):
        share = rng.choice(shares or snap.shares)
        types = sorted(share.limits) if share.strategy != Strategy.LEND_AND_BORROW else []
        options = [Entry(t, n) for t in types or sorted(snap.capacity) for n in (1, 2, 2, 3, 4, 6)]
        options += [Entry(p.instance_type, n, p.name) for p in snap.plans for n in (1, 2, 4)]
        options += [Entry(t, 1) for t in sorted(snap.capacity)]
        jobs.append(
            Job(
                id=job_id,
                share_id=share.id,
                priority=rng.choice([0, 1, 5, 9]),
                submitted_at=snap.now - timedelta(seconds=rng.randint(0, 600)),
                entries=tuple(rng.sample(sorted(set(options), key=repr), rng.randint(1, 3))),
                max_pending_seconds=rng.choice([None, None, None, 1800, 7200]),
                preemption_retries_before_termination=rng.choice([None, None, 0, 1, 3]),
            )
        )
    return jobs


def between_passes(rng: random.Random, snap: Snapshot, first_id: int) -> Snapshot:
    """Some placed jobs finish, time passes, new jobs arrive, and sometimes an administrator lowers limits."""
    placed_ids = sorted(job.id for job in snap.jobs if job.status in PLACED_STATUSES)
    finished = set(rng.sample(placed_ids, min(len(placed_ids), rng.randint(0, 3))))
    snap = replace(
        snap,
        now=snap.now + timedelta(seconds=rng.choice([0, 600, 1800, 3600, 3 * 3600])),
        jobs=tuple(job for job in snap.jobs if job.id not in finished),
    )
    change = rng.choice(["none", "none", "capacity", "limit", "strategy", "plan"])
    if change == "capacity":
        instance_type = rng.choice(sorted(snap.capacity))
        owned = sum(s.limits.get(instance_type, 0) for s in snap.shares)
        lowered = rng.randint(max(owned, 1), max(owned, 1, snap.capacity[instance_type]))
        snap = replace(snap, capacity={**snap.capacity, instance_type: lowered})
    elif change == "limit":
        share = rng.choice(snap.shares)
        if share.limits:
            instance_type = rng.choice(sorted(share.limits))
            limits = {**share.limits, instance_type: rng.randint(1, share.limits[instance_type])}
            snap = replace(
                snap, shares=tuple(replace(s, limits=limits) if s is share else s for s in snap.shares)
            )
    elif change == "strategy":
        share = rng.choice(snap.shares)
        strategy = rng.choice(list(Strategy))
        borrow_limit = share.borrow_limit if strategy == Strategy.LEND_AND_BORROW else -1
        changed = replace(share, strategy=strategy, borrow_limit=borrow_limit)
        snap = replace(snap, shares=tuple(changed if s is share else s for s in snap.shares))
    elif change == "plan" and snap.plans:
        plan = rng.choice(snap.plans)
        if rng.random() < 0.8:
            changed = replace(plan, instance_count=rng.randint(1, plan.instance_count))
        else:  # moved to start later
            later = timedelta(minutes=rng.choice([10, 60]))
            changed = replace(plan, start_time=snap.now + later, end_time=plan.end_time + later)
        snap = replace(snap, plans=tuple(changed if p is plan else p for p in snap.plans))
    return replace(snap, jobs=snap.jobs + tuple(new_jobs(rng, snap, first_id)))


def run_passes(
    queue: Snapshot,
    rng: random.Random,
    first_jobs: list[Job],
    *,
    graceful: bool = False,
    passes: int = PASSES,
) -> Counter[str]:
    """Passes one after another, each checked; returns how often the rarer paths were taken."""
    snap = replace(queue, jobs=tuple(first_jobs))
    next_id = 1000
    seen: Counter[str] = Counter()
    for _ in range(passes):
        if graceful:
            snap = executors_at_work(rng, snap)
        decisions = schedule(snap)
        after = apply_decisions(snap, decisions)
        if graceful:
            check_graceful_pass(snap, decisions, after)
        else:
            check_pass(snap, decisions, after)
        seen.update(p.kind.value for p in decisions.preemptions)
        seen.update(drains=len(decisions.drains))
        seen.update(
            graceful=sum(p.graceful for p in decisions.preemptions),
            nominations=len(decisions.nominations),
            lapses=len(decisions.lapsed_nominations),
            kept=sum(job.nomination is not None for job in after.jobs),
        )
        snap = between_passes(rng, after, next_id)
        next_id += 100
    return seen


def cancelled(job: Job, now) -> Job:
    """A user cancels a taken job: STOPPING for nobody, and gone once it has stopped (`finish_stopping`)."""
    return replace(
        job,
        status=JobStatus.STOPPING,
        stop_deadline=now + timedelta(seconds=120),
        preemption_retries_before_termination=0,
        preemption_count=1,
    )


def executors_at_work(rng: random.Random, snap: Snapshot) -> Snapshot:
    """Executors take most placed jobs; some STOPPING jobs stop; users cancel a few taken jobs (STOPPING for
    nobody); now and then a share is disabled."""
    stopping = sorted(job.id for job in snap.jobs if job.status == JobStatus.STOPPING)
    snap = finish_stopping(snap, set(rng.sample(stopping, rng.randint(0, len(stopping)))))
    jobs = tuple(
        replace(job, taken=rng.random() < 0.7) if job.status in PLACED_STATUSES and not job.taken else job
        for job in snap.jobs
    )
    jobs = tuple(
        cancelled(job, snap.now)
        if job.status in PLACED_STATUSES and job.taken and rng.random() < 0.1
        else job
        for job in jobs
    )
    shares = snap.shares
    if rng.random() < 0.05:
        disabled = rng.choice(shares)
        shares = tuple(replace(share, enabled=share is not disabled) for share in shares)
    return replace(snap, jobs=jobs, shares=shares)


# The queue is drawn so that Hypothesis can shrink it; the job stream comes from a seeded Random, which keeps
# a run of 150 queues x 5 passes to seconds (drawing every job field through Hypothesis costs ten times more).
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(), rng=st.randoms(use_true_random=True))
def test_every_pass_keeps_the_rules(queue: Snapshot, rng: random.Random):
    # Borrowers submit first, so that the shares they borrow from have to reclaim.
    borrowers = tuple(s for s in queue.shares if s.strategy == Strategy.LEND_AND_BORROW)
    seen = run_passes(queue, rng, new_jobs(rng, queue, 1, borrowers))
    # Steer the search towards the rarer paths: reclaim, in-share preemption, LIMIT_REDUCED, drains.
    for label in [*(kind.value for kind in PreemptionKind), "drains"]:
        target(float(seen[label]), label=label)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(), rng=st.randoms(use_true_random=True))
def test_every_pass_keeps_the_rules_when_victims_stop_gracefully(queue: Snapshot, rng: random.Random):
    borrowers = tuple(s for s in queue.shares if s.strategy == Strategy.LEND_AND_BORROW)
    seen = run_passes(queue, rng, new_jobs(rng, queue, 1, borrowers), graceful=True, passes=8)
    for label in ["graceful", "nominations", "lapses", "kept", PreemptionKind.LIMIT_REDUCED.value, "drains"]:
        target(float(seen[label]), label=label)


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(), rng=st.randoms(use_true_random=True))
def test_contended_queues_with_graceful_stops_never_over_preempt(queue: Snapshot, rng: random.Random):
    queue = replace(
        queue,
        shares=tuple(replace(share, in_share_preemption=rng.random() < 0.7) for share in queue.shares),
    )
    running = [replace(job, taken=rng.random() < 0.7) for job in placed_jobs(rng, queue, rng.randint(10, 40))]
    waiting = [replace(job, priority=rng.choice([1, 5, 9, 9])) for job in new_jobs(rng, queue, 100)]
    seen = run_passes(queue, rng, running + waiting, graceful=True, passes=8)
    for label in ["graceful", "nominations", "lapses", "kept"]:
        target(float(seen[label]), label=label)


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(lenders_and_a_borrower=True), rng=st.randoms(use_true_random=True))
def test_every_pass_keeps_the_rules_when_lenders_take_back_what_a_borrower_holds(queue: Snapshot, rng):
    borrower = queue.shares[0]
    # The borrower first asks for all the lendable capacity of each type, in pieces.
    first_jobs = []
    for t in sorted(queue.capacity):
        lendable = queue.capacity[t] - sum(reserved(s, t) for s in queue.shares)
        while lendable > 0:
            n = min(lendable, rng.randint(1, 4))
            first_jobs.append(Job(len(first_jobs) + 1, borrower.id, rng.choice([0, 9]), NOW, (Entry(t, n),)))
            lendable -= n
    run_passes(queue, rng, first_jobs + new_jobs(rng, queue, len(first_jobs) + 1))


def placed_jobs(rng: random.Random, queue: Snapshot, count: int) -> list[Job]:
    """Jobs already running, placed at random wherever behaviour.md#capacity-what-a-share-may-hold allows: within every
    share's ceiling and invariant B, so that borrowers sit on lent capacity and shares sit at their limits. Borrowers
    place first, as they would while the lenders are idle."""
    usage: Counter[tuple[int, str]] = Counter()
    jobs: list[Job] = []
    borrowers = [share for share in queue.shares if share.strategy == Strategy.LEND_AND_BORROW]
    for job_id in range(1, count + 1):
        share = rng.choice(borrowers if borrowers and job_id <= count // 3 else queue.shares)
        may_borrow = share.strategy == Strategy.LEND_AND_BORROW
        types = sorted(t for t in (share.limits if share.limits and not may_borrow else queue.capacity))
        if not set(types) <= set(queue.capacity):
            continue
        instance_type = rng.choice(types)
        n = rng.choice([1, 1, 2, 3, 4])
        ceiling = most_allowed(share, instance_type)
        if ceiling is not None and usage[share.id, instance_type] + n > ceiling:
            continue
        usage[share.id, instance_type] += n
        committed = sum(max(usage[s.id, instance_type], reserved(s, instance_type)) for s in queue.shares)
        if committed > queue.capacity[instance_type]:
            usage[share.id, instance_type] -= n
            continue
        scheduled_at = NOW - timedelta(minutes=rng.randint(1, 600))
        jobs.append(
            Job(
                id=job_id,
                share_id=share.id,
                priority=rng.choice([0, 0, 1, 5, 9]),
                submitted_at=scheduled_at - timedelta(minutes=rng.randint(0, 60)),
                entries=(Entry(instance_type, n),),
                status=JobStatus.RUNNING,
                placement=Placement(instance_type, n, None, scheduled_at),
            )
        )
    return jobs


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(), rng=st.randoms(use_true_random=True))
def test_every_victim_set_is_the_references_in_contended_queues(queue: Snapshot, rng: random.Random):
    # The queue starts full of running jobs of every share, so that the first passes reclaim and preempt
    # in-share at once, with every victim set checked against the reference as it is chosen.
    queue = replace(
        queue,
        shares=tuple(replace(share, in_share_preemption=rng.random() < 0.7) for share in queue.shares),
    )
    running = placed_jobs(rng, queue, rng.randint(10, 40))
    # Mostly higher priorities than the running jobs', so that in-share candidates exist.
    waiting = [replace(job, priority=rng.choice([1, 5, 9, 9])) for job in new_jobs(rng, queue, 100)]
    seen = run_passes(queue, rng, running + waiting)
    for label in [*(kind.value for kind in PreemptionKind), "drains"]:
        target(float(seen[label]), label=label)


@st.composite
def contended_types(draw) -> Snapshot:
    """One type, 2-4 shares owning all or most of it, most with in-share preemption: a pass that preempts."""
    capacity = draw(st.integers(3, 10))
    shares = []
    owned = capacity - draw(st.sampled_from([0, 0, 1]))
    count = draw(st.integers(2, 4))
    for share_id in range(1, count + 1):
        strategy = draw(st.sampled_from([Strategy.LEND_AND_BORROW, Strategy.LEND, Strategy.RESERVE]))
        limit = draw(st.integers(0, owned)) if share_id < count else owned
        borrow_limit = -1 if strategy != Strategy.LEND_AND_BORROW else draw(st.sampled_from([-1, 50, 100]))
        owned -= limit
        shares.append(
            Share(
                id=share_id,
                name=f"s{share_id}",
                strategy=strategy,
                limits={"t0": limit} if limit else {"t1": 1},
                borrow_limit=borrow_limit,
                in_share_preemption=draw(st.sampled_from([True, True, False])),
            )
        )
    return Snapshot(now=NOW, capacity={"t0": capacity, "t1": len(shares)}, shares=tuple(shares), jobs=())


def waiting_on_t0(rng: random.Random, queue: Snapshot, *, most_jobs: int, most_entries: int) -> list[Job]:
    """1 to `most_jobs` RUNNABLE jobs of random shares of a `contended_types` queue, each with 1 to
    `most_entries` entries on t0 of 1 to 5 instances."""
    return [
        Job(
            id=100 + i,
            share_id=rng.choice(queue.shares).id,
            priority=rng.choice([1, 5, 9]),
            submitted_at=NOW - timedelta(seconds=i),
            entries=tuple(Entry("t0", rng.randint(1, 5)) for _ in range(rng.randint(1, most_entries))),
        )
        for i in range(rng.randint(1, most_jobs))
    ]


@settings(max_examples=1500, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(queue=contended_types(), rng=st.randoms(use_true_random=True))
def test_one_contended_pass_chooses_the_references_victims(queue: Snapshot, rng: random.Random):
    # Placed on t0 only (the shares that own none of it hold a limit on t1 only, which is not offered here).
    running = placed_jobs(rng, replace(queue, capacity={"t0": queue.capacity["t0"]}), rng.randint(6, 20))
    waiting = waiting_on_t0(rng, queue, most_jobs=3, most_entries=2)
    before = replace(queue, jobs=tuple(running + waiting))
    decisions = schedule(before)
    check_pass(before, decisions, apply_decisions(before, decisions))


def check_pass(before: Snapshot, decisions: Decisions, after: Snapshot) -> None:
    assert invariant_violations(after) == []
    check_decisions_are_consistent(before, decisions)
    check_share_rule_of_placements(decisions, after)
    check_preemptions_were_needed(before, decisions)
    check_victims_step_by_step(before, decisions)
    check_work_conservation(before, decisions, after)
    check_pending(decisions, after)


def check_decisions_are_consistent(before: Snapshot, decisions: Decisions) -> None:
    jobs = {job.id: job for job in before.jobs}
    placed = [a.job_id for a in decisions.admissions]
    preempted = {p.job_id for p in decisions.preemptions}
    drained = {d.job_id for d in decisions.drains}
    timed_out = {t.job_id for t in decisions.timeouts}
    moved = {r.job_id: r for r in decisions.relocations}
    moved_at_once = {job_id for job_id, r in moved.items() if not r.graceful}
    assert len(moved) == len(decisions.relocations) == decisions.stats.relocations
    assert not set(moved) & (preempted | drained | timed_out)
    assert set(placed) & set(moved) == moved_at_once, "a job moved at once is placed on its new entry"
    for job_id, move in moved.items():
        assert jobs[job_id].status == JobStatus.RUNNING and jobs[job_id].relocate
        assert move.entry_index < move.from_entry_index
        if job_id in moved_at_once:
            assert next(a for a in decisions.admissions if a.job_id == job_id).entry_index == move.entry_index
    assert len(placed) == len(set(placed))
    assert not set(placed) & preempted, "a job both placed and preempted"
    assert not set(placed) & timed_out
    assert not preempted & drained
    for admission in decisions.admissions:
        job = jobs[admission.job_id]
        assert job.status == JobStatus.RUNNABLE or job.id in drained | moved_at_once
        chosen = job.entries[admission.entry_index]
        assert (chosen.instance_type, chosen.instance_count, chosen.training_plan) == (
            admission.instance_type,
            admission.instance_count,
            admission.training_plan,
        )
        assert admission.borrowed >= 0
        assert admission.training_plan is None or admission.borrowed == 0
    for job_id in preempted | drained:
        assert jobs[job_id].status in PLACED_STATUSES
    for job_id in timed_out:
        assert jobs[job_id].status == JobStatus.RUNNABLE
    stats = decisions.stats
    assert stats.placed_within_quota + stats.placed_borrowing + stats.placed_on_plan == len(
        decisions.admissions
    )
    assert sum(stats.preemptions.values()) == len(decisions.preemptions)
    assert stats.fallbacks == sum(a.entry_index > 0 for a in decisions.admissions)
    assert (stats.plan_drains, stats.timeouts) == (len(decisions.drains), len(decisions.timeouts))


def check_share_rule_of_placements(decisions: Decisions, after: Snapshot) -> None:
    """Invariant C: a share that placed on-demand on a type in this pass ends within what it may hold."""
    shares = {share.id: share for share in after.shares}
    usage = on_demand_usage(after)
    for admission in decisions.admissions:
        if admission.training_plan is not None:
            continue
        share = shares[admission.share_id]
        ceiling = most_allowed(share, admission.instance_type)
        assert ceiling is None or usage[share.id, admission.instance_type] <= ceiling
        if share.strategy != Strategy.LEND_AND_BORROW:
            assert admission.borrowed == 0


def check_preemptions_were_needed(before: Snapshot, decisions: Decisions) -> None:
    """Every preemption but LIMIT_REDUCED made room for a job placed in the pass on the victim's type."""
    jobs = {job.id: job for job in before.jobs}
    admissions = {a.job_id: a for a in decisions.admissions}
    for preemption in decisions.preemptions:
        victim = jobs[preemption.job_id]
        assert preemption.instance_type == victim.placement.instance_type
        if preemption.kind == PreemptionKind.LIMIT_REDUCED:
            assert preemption.preemptor_job_id is None
            continue
        assert victim.placement.training_plan is None
        assert not reference.protected(before, victim), f"protected job {victim.id} was a victim"
        admission = admissions[preemption.preemptor_job_id]
        assert admission.training_plan is None
        assert admission.instance_type == victim.placement.instance_type
        other_share = victim.share_id != admission.share_id
        assert (preemption.kind == PreemptionKind.RECLAIM) == other_share
        if other_share:
            # A share never reclaims in order to borrow.
            assert admission.borrowed == 0
        else:
            assert victim.priority < jobs[admission.job_id].priority


def check_victims_step_by_step(before: Snapshot, decisions: Decisions) -> None:
    """Replays the pass's decisions in the order they were made, checking each victim set where it was chosen.

    LIMIT_REDUCED stops are those of `reference.give_back` and none of them could have been spared. A job
    preempts only when none of its entries fits without preemption; its victims make room (behaviour.md#preemption) and
    are minimal: none could be returned with the job still fitting; entry and victims are `reference`'s.
    """
    jobs = {job.id: job for job in before.jobs}
    current = reference.without(before, {d.job_id for d in decisions.drains})
    limit_reduced = [p.job_id for p in decisions.preemptions if p.kind == PreemptionKind.LIMIT_REDUCED]
    assert limit_reduced == reference.give_back(current)
    current = reference.without(current, set(limit_reduced))
    assert invariant_violations(current) == []
    for job_id in limit_reduced:
        assert invariant_violations(replace(current, jobs=(*current.jobs, jobs[job_id]))) != [], (
            f"job {job_id} was stopped though its return leaves every invariant holding"
        )
    victims_of: dict[int, list[int]] = {}
    for preemption in decisions.preemptions:
        if preemption.preemptor_job_id is not None:
            victims_of.setdefault(preemption.preemptor_job_id, []).append(preemption.job_id)
    placed_in_pass: set[int] = set()
    for admission in decisions.admissions:
        job = jobs[admission.job_id]
        victims = victims_of.get(job.id, [])
        if victims:
            for entry in job.entries:
                assert not fits_without_preemption(current, job, entry), f"{job.id} fits {entry}"
            entry = job.entries[admission.entry_index]
            gone = set(victims)
            assert makes_room(current, job, entry, gone)
            for victim in victims:
                assert not makes_room(current, job, entry, gone - {victim}), f"victim {victim} was not needed"
            assert reference.first_entry_with_victims(current, job, placed_in_pass) == (
                admission.entry_index,
                victims,
            )
            current = reference.without(current, gone)
        placement = Placement(
            admission.instance_type, admission.instance_count, admission.training_plan, before.now
        )
        placed_job = replace(job, status=JobStatus.SCHEDULED, placement=placement)
        current = replace(current, jobs=(*reference.without(current, {job.id}).jobs, placed_job))
        placed_in_pass.add(job.id)


def check_work_conservation(before: Snapshot, decisions: Decisions, after: Snapshot) -> None:
    """No job left RUNNABLE has an entry that fits without preemption, save this pass's victims and the jobs
    STRICT_FIFO holds behind a head that does not fit."""
    if not before.queue_enabled:
        return
    victims = {p.job_id for p in decisions.preemptions}
    # A share whose budget of scope ALL is spent starts nothing: its jobs wait with nothing to conserve.
    enabled = {share.id for share in after.shares if share.enabled and not starts_no_new_job(share)}
    left: dict[int, list[Job]] = {}
    for job in sorted(after.jobs, key=queue_key):
        if job.status == JobStatus.RUNNABLE and job.id not in victims and job.share_id in enabled:
            left.setdefault(job.share_id, []).append(job)
    for share_jobs in left.values():
        checked = share_jobs[:1] if before.ordering == Ordering.STRICT_FIFO else share_jobs
        for job in checked:
            for entry in job.entries:
                assert not fits_without_preemption(after, job, entry), f"job {job.id} fits {entry}"


def check_pending(decisions: Decisions, after: Snapshot) -> None:
    """Every job left RUNNABLE has one reason, and positions number each share's queue from 1."""
    runnable = {job.id: job for job in after.jobs if job.status == JobStatus.RUNNABLE}
    pending = Counter(p.job_id for p in decisions.pending)
    assert set(pending) == set(runnable) and set(pending.values()) <= {1}
    assert all(p.reason.strip() for p in decisions.pending)
    by_share: dict[int, list] = {}
    for p in decisions.pending:
        by_share.setdefault(p.share_id, []).append(p)
    for share_pending in by_share.values():
        in_order = sorted(share_pending, key=lambda p: queue_key(runnable[p.job_id]))
        assert [p.queue_position for p in in_order] == list(range(1, len(in_order) + 1))


# --- graceful stops ---------------------------------------------------------------------------------------


def settled(snap: Snapshot) -> Snapshot:
    """The queue once every STOPPING job is gone and every nominated job holds its nominated entry."""
    jobs = []
    for job in snap.jobs:
        relocating = job.nomination is not None and job.id in job.nomination.victim_ids
        if job.status == JobStatus.STOPPING and not relocating:
            continue
        # a nominee, or a job moving to the entry (behaviour.md#moving-to-a-preferred-entry)
        if job.nomination is not None:
            entry = job.entries[job.nomination.entry_index]
            if entry.training_plan is not None and not plan_takes_jobs(snap, entry.training_plan):
                # Its earmark lapses: nobody is placed on a plan that is gone, not active or draining.
                jobs.append(replace(job, status=JobStatus.RUNNABLE, placement=None, nomination=None))
                continue
            placement = Placement(entry.instance_type, entry.instance_count, entry.training_plan, snap.now)
            job = replace(job, status=JobStatus.SCHEDULED, placement=placement, nomination=None)
        jobs.append(job)
    return replace(snap, jobs=tuple(jobs))


def plan_takes_jobs(snap: Snapshot, name: str) -> bool:
    plan = next((p for p in snap.plans if p.name == name), None)
    return (
        plan is not None
        and plan.start_time <= snap.now
        and plan.end_time - snap.now > timedelta(seconds=snap.plan_drain_seconds)
    )


def without_nomination(snap: Snapshot, job_id: int) -> Snapshot:
    return replace(snap, jobs=tuple(replace(j, nomination=None) if j.id == job_id else j for j in snap.jobs))


def fits_now_and_settled(snap: Snapshot, job: Job, entry: Entry) -> bool:
    """The engine's "fits without preemption" with graceful stops: now, and once settled (its own earmark
    left out)."""
    if entry.training_plan is not None:  # a plan has one reading: what is held on it and earmarked for others
        return fits_without_preemption(with_plan_earmarks(snap, job.id), job, entry)
    if not fits_without_preemption(snap, job, entry):
        return False
    return fits_without_preemption(settled(without_nomination(snap, job.id)), job, entry)


def with_plan_earmarks(snap: Snapshot, except_job: int) -> Snapshot:
    """The queue with the plan entries nominated jobs (other than `except_job`) will hold, held already."""
    held = []
    for job in snap.jobs:
        if job.nomination is not None and job.id != except_job:
            entry = job.entries[job.nomination.entry_index]
            if entry.training_plan is not None:
                placement = Placement(
                    entry.instance_type, entry.instance_count, entry.training_plan, snap.now
                )
                held.append(replace(job, id=-job.id, status=JobStatus.SCHEDULED, placement=placement))
    return replace(snap, jobs=snap.jobs + tuple(held))


def check_graceful_pass(before: Snapshot, decisions: Decisions, after: Snapshot) -> None:
    assert schedule(before) == decisions, "same snapshot in, same decisions out"
    check_decisions_are_consistent(before, decisions)
    check_stops_and_nominations(before, decisions, after)
    check_invariants_counting_stopping_capacity(before, decisions, after)
    check_no_over_preemption(before, decisions)
    check_graceful_work_conservation(before, decisions, after)
    check_pending(decisions, after)


def check_stops_and_nominations(before: Snapshot, decisions: Decisions, after: Snapshot) -> None:
    """Taken victims stop gracefully, others at once; STOPPING jobs are left alone; nominees are not placed."""
    jobs = {job.id: job for job in before.jobs}
    for preemption in decisions.preemptions:
        assert preemption.graceful == jobs[preemption.job_id].taken
    for drain in decisions.drains:
        assert drain.graceful == jobs[drain.job_id].taken
    stopping = {job.id for job in before.jobs if job.status == JobStatus.STOPPING}
    touched = {p.job_id for p in decisions.preemptions} | {d.job_id for d in decisions.drains}
    assert not stopping & touched, "a STOPPING job was stopped again"
    assert not stopping & {t.job_id for t in decisions.timeouts}
    nominated = [n.job_id for n in decisions.nominations]
    assert len(nominated) == len(set(nominated))
    assert not set(nominated) & {a.job_id for a in decisions.admissions}
    assert not set(nominated) & set(decisions.lapsed_nominations)
    for job_id in decisions.lapsed_nominations:
        assert jobs[job_id].nomination is not None
    for nomination in decisions.nominations:
        job = jobs[nomination.job_id]
        assert job.status == JobStatus.RUNNABLE or job.id in {d.job_id for d in decisions.drains}
        chosen = job.entries[nomination.entry_index]
        assert (chosen.instance_type, chosen.instance_count, chosen.training_plan) == (
            nomination.instance_type,
            nomination.instance_count,
            None,
        )
        waiting_for = set(nomination.victim_ids)
        assert waiting_for and all(
            j.status == JobStatus.STOPPING and j.placement.instance_type == chosen.instance_type
            for j in after.jobs
            if j.id in waiting_for
        )
        # Its own victims are among those it waits for.
        own = {p.job_id for p in decisions.preemptions if p.preemptor_job_id == job.id and p.graceful}
        assert own <= waiting_for
    for job in after.jobs:
        if job.status == JobStatus.STOPPING:
            assert job.placement is not None


def in_use_and_committed(snap: Snapshot, instance_type: str) -> tuple[int, int]:
    """Invariant A's and B's sums for the type, STOPPING jobs holding."""
    usage = on_demand_usage(snap)
    used = sum(usage[s.id, instance_type] for s in snap.shares)
    committed = sum(max(usage[s.id, instance_type], reserved(s, instance_type)) for s in snap.shares)
    return used, committed


def check_invariants_counting_stopping_capacity(
    before: Snapshot, decisions: Decisions, after: Snapshot
) -> None:
    """behaviour.md#capacity-what-a-share-may-hold counting STOPPING capacity on every type and plan the pass placed on:
    each holds, or (while jobs
    stopped for a lowered capacity still stop) B is no worse than before the pass and A holds; and every
    invariant once STOPPING jobs are gone and the nominated jobs hold their entries."""
    problems = invariant_violations(after)
    for admission in decisions.admissions:
        if admission.training_plan is None:
            instance_type = admission.instance_type
            used, committed = in_use_and_committed(after, instance_type)
            capacity = after.capacity.get(instance_type, 0)
            assert used <= capacity, f"job {admission.job_id} placed on {instance_type}: {used} of {capacity}"
            if committed > capacity:
                assert any(j.status == JobStatus.STOPPING for j in after.jobs)
                assert committed <= in_use_and_committed(before, instance_type)[1], (
                    f"job {admission.job_id} placed on {instance_type} made B worse: {committed} of {capacity}"
                )
            where = []
        else:
            where = [p for p in problems if f"plan {admission.training_plan} " in p]
        assert where == [], f"job {admission.job_id} placed where {where}"
    future = settled(after)
    assert invariant_violations(future) == []
    shares = {share.id: share for share in future.shares}
    usage = on_demand_usage(future)
    for job in future.jobs:
        if job.id in {n.job_id for n in decisions.nominations} | {
            j.id for j in after.jobs if j.nomination is not None
        }:
            if job.placement is None or job.placement.training_plan is not None:
                continue
            ceiling = most_allowed(shares[job.share_id], job.placement.instance_type)
            assert ceiling is None or usage[job.share_id, job.placement.instance_type] <= ceiling


def check_no_over_preemption(before: Snapshot, decisions: Decisions) -> None:
    """A job whose nomination stands never preempts: only one whose nomination lapsed (or lapsed and was
    renewed in the pass) may, when it no longer fits once settled or its victims are gone."""
    jobs = {job.id: job for job in before.jobs}
    lapsed = set(decisions.lapsed_nominations)
    stopping = {job.id for job in before.jobs if job.status == JobStatus.STOPPING}
    for preemption in decisions.preemptions:
        preemptor = jobs.get(preemption.preemptor_job_id)
        if preemptor is None or preemptor.nomination is None:
            continue
        renewed = preemptor.id in {n.job_id for n in decisions.nominations}
        assert preemptor.id in lapsed or renewed, f"job {preemptor.id} preempted again while nominated"
        entry = preemptor.entries[preemptor.nomination.entry_index]
        still_stopping = preemptor.nomination.victim_ids & stopping
        assert not still_stopping or not fits_without_preemption(
            settled(without_nomination(before, preemptor.id)), preemptor, entry
        )


def check_graceful_work_conservation(before: Snapshot, decisions: Decisions, after: Snapshot) -> None:
    """No job left RUNNABLE and not nominated has an entry that fits now and once settled, save this pass's
    victims and the jobs STRICT_FIFO holds."""
    if not before.queue_enabled:
        return
    victims = {p.job_id for p in decisions.preemptions}
    # A share whose budget of scope ALL is spent starts nothing: its jobs wait with nothing to conserve.
    enabled = {share.id for share in after.shares if share.enabled and not starts_no_new_job(share)}
    left: dict[int, list[Job]] = {}
    for job in sorted(after.jobs, key=queue_key):
        if job.status == JobStatus.RUNNABLE and job.id not in victims and job.share_id in enabled:
            left.setdefault(job.share_id, []).append(job)
    for share_jobs in left.values():
        checked = share_jobs[:1] if before.ordering == Ordering.STRICT_FIFO else share_jobs
        for job in checked:
            if job.nomination is not None:
                continue
            for entry in job.entries:
                assert not fits_now_and_settled(after, job, entry), f"job {job.id} fits {entry}"


@st.composite
def borrowers_of_one_idle_lender(draw) -> Snapshot:
    """One type lent whole by an idle LEND share; 2-4 LEND_AND_BORROW shares of equal weight borrow it,
    some already holding some; every waiting job asks for one instance at the same priority."""
    capacity = draw(st.integers(4, 16))
    owner = Share(id=1, name="owner", strategy=Strategy.LEND, limits={"t0": capacity})
    borrowers = [
        Share(id=i, name=f"b{i}", strategy=Strategy.LEND_AND_BORROW, limits={})
        for i in range(2, draw(st.integers(3, 5)) + 1)
    ]
    jobs: list[Job] = []
    held = 0
    for share in borrowers:
        for _ in range(draw(st.integers(0, 3))):
            if held < capacity:
                jobs.append(Job(len(jobs) + 1, share.id, 0, NOW - timedelta(hours=2), (Entry("t0", 1),)))
                jobs[-1] = replace(
                    jobs[-1],
                    status=JobStatus.RUNNING,
                    placement=Placement("t0", 1, None, NOW - timedelta(hours=1)),
                )
                held += 1
    for i in range(draw(st.integers(2, 20))):
        share = draw(st.sampled_from(borrowers))
        submitted = NOW - timedelta(seconds=draw(st.integers(0, 600)))
        jobs.append(Job(100 + i, share.id, 0, submitted, (Entry("t0", 1),)))
    return Snapshot(
        now=NOW,
        capacity={"t0": capacity},
        shares=(owner, *borrowers),
        jobs=tuple(jobs),
        idle_capacity_assignment=IdleCapacityAssignment.FAIR_SHARE,
    )


@settings(max_examples=200, deadline=None, derandomize=True)
@given(queue=borrowers_of_one_idle_lender())
def test_fair_share_never_hands_idle_capacity_to_a_borrower_that_already_borrows_more(queue: Snapshot):
    borrowed = on_demand_usage(queue)
    waiting = Counter(job.share_id for job in queue.jobs if job.status == JobStatus.RUNNABLE)
    decisions = schedule(queue)
    for admission in decisions.admissions:
        rivals = [share_id for share_id, left in waiting.items() if left]
        assert all(borrowed[admission.share_id, "t0"] <= borrowed[s, "t0"] for s in rivals)
        borrowed[admission.share_id, "t0"] += 1
        waiting[admission.share_id] -= 1
    check_pass(queue, decisions, apply_decisions(queue, decisions))


def decisions_without_reasons(snap: Snapshot) -> Decisions:
    """The pass run twice, with and without its pending reasons: everything but the reasons is the same."""
    explained = schedule(snap)
    quiet = schedule(snap, explain=False)
    assert quiet.pending == []
    assert replace(explained, pending=[]) == quiet
    return explained


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(queue=queues(), rng=st.randoms(use_true_random=True), graceful=st.booleans())
def test_a_pass_without_reasons_decides_exactly_what_it_decides_with_them(
    queue: Snapshot, rng: random.Random, graceful: bool
):
    queue = replace(
        queue,
        shares=tuple(replace(share, in_share_preemption=rng.random() < 0.5) for share in queue.shares),
    )
    running = placed_jobs(rng, queue, rng.randint(0, 30))
    snap = replace(queue, jobs=tuple(running + new_jobs(rng, queue, 100)))
    next_id = 1000
    for _ in range(PASSES):
        if graceful:
            snap = executors_at_work(rng, snap)
        after = apply_decisions(snap, decisions_without_reasons(snap))
        snap = between_passes(rng, after, next_id)
        next_id += 100


def test_a_busy_synthetic_pass_without_reasons_decides_what_it_decides_with_them():
    snap = synthetic.build_synthetic_snapshot(runnable=600, placed=200, shares=8, types=4, seed=3)
    decisions = decisions_without_reasons(snap)
    assert decisions.admissions and decisions.preemptions and decisions.pending  # the busy paths were taken
