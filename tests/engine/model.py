"""A whole pass of behaviour.md#the-scheduling-pass read plainly, for small snapshots: what the engine's decisions are
fuzzed against.

Housekeeping (plan drains, pending timeouts, LIMIT_REDUCED), the order of heads (under-limit shares first,
then priority, then submission or, under FAIR_SHARE, the dominant borrowed share per weight), preference
evaluation (every entry without preemption, then every entry with it), BEST_EFFORT_FIFO and STRICT_FIFO, the
sweep after preemptions, and each share's queue positions. It is written from the rules' sentences and shares no
code with the engine but the dataclasses, `oracle` (behaviour.md#capacity-what-a-share-may-hold) and `reference`
(the victim choice of behaviour.md#preemption and the give-back of its capacity rules); every sum is recomputed
from the jobs at every step.

Graceful stops are modelled too, as behaviour.md#preemption reads them: a taken victim (or drained job) is STOPPING and
keeps its instances. A placement must fit now (every STOPPING job holding; while one holds, invariant B may stay over
a lowered capacity if the placement makes it no worse, on instances free now) and once settled (every STOPPING
job gone, every nominee on its earmarked entry). Only a job whose own preemption stopped someone is nominated,
and it waits for its own victims only; victims make room now and once settled, so STOPPING jobs that are not
its own victims hold their instances for it too. A job that would fit once the STOPPING jobs that are no
nominee's victims are gone preempts nobody for that entry or a later one: it waits, RUNNABLE. A nominee that
fits is placed at once; one that no longer fits once settled, or whose victims are gone, loses its earmark.

Budgets are modelled as the snapshot states them: a share whose ALL budget is spent starts nothing,
one whose BORROWED budget is spent places nothing above its limit (see `oracle.fits_without_preemption`).

Relocation (behaviour.md#moving-to-a-preferred-entry) is read from its sentence: after the heads are placed, RUNNING
jobs with `relocate`, oldest placement first and at most `max_relocations_per_pass`, move from their entry k to the
earliest entry j < k that fits the whole job without preemption, borrowing no more than on k, on capacity (the plan, or
the on-demand type) no RUNNABLE job asks for, once they have run `relocation_min_runtime_seconds` and are no
longer protected. A taken job goes STOPPING, nominated on j (with itself as its victim: j is earmarked, on
the plan too, until it is placed); one not taken is placed on j at once, and what it left is swept.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from fractions import Fraction

from engine import (
    PLACED_STATUSES,
    IdleCapacityAssignment,
    Job,
    JobStatus,
    Nomination,
    Ordering,
    Placement,
    PreemptionKind,
    Snapshot,
)

from . import reference
from .oracle import (
    all_types,
    fits_now,
    fits_without_preemption,
    limit,
    on_demand_usage,
    reserved,
    starts_no_new_job,
)


@dataclass
class ModelDecisions:
    """What the model decides, in the terms the engine's decisions are compared in."""

    # (job, entry index, instances borrowed), in the order placed.
    admissions: list[tuple[int, int, int]] = field(default_factory=list)
    # (victim, kind, preemptor or None, fails, graceful), in the order stopped.
    preemptions: list[tuple[int, PreemptionKind, int | None, bool, bool]] = field(default_factory=list)
    # job -> graceful
    drains: dict[int, bool] = field(default_factory=dict)
    timeouts: set[int] = field(default_factory=set)
    # job -> (entry index, the STOPPING jobs it waits for, sorted)
    nominations: dict[int, tuple[int, tuple[int, ...]]] = field(default_factory=dict)
    lapsed: list[int] = field(default_factory=list)
    # (job, from entry, to entry, graceful), in the order moved.
    relocations: list[tuple[int, int, int, bool]] = field(default_factory=list)
    # job -> its 1-based position in its share's queue of jobs left RUNNABLE.
    positions: dict[int, int] = field(default_factory=dict)


def queue_key(job: Job) -> tuple[int, datetime, int]:
    """behaviour.md#order: a share's queue by priority (high first), then submission time, then id."""
    return (-job.priority, job.submitted_at, job.id)


def share_under_limit(snap: Snapshot, share_id: int) -> bool:
    """Total instances in use, all types, below the sum of its limits (on-demand: plans count apart)."""
    share = next(s for s in snap.shares if s.id == share_id)
    usage = on_demand_usage(snap)
    in_use = sum(n for (owner, _), n in usage.items() if owner == share_id)
    return in_use < sum(share.limits.values())


def dominant_borrowed_share(snap: Snapshot, share_id: int) -> Fraction:
    """For each type, borrowed / (capacity - what the shares reserve); the largest, divided by the weight."""
    share = next(s for s in snap.shares if s.id == share_id)
    usage = on_demand_usage(snap)
    largest = Fraction(0)
    for instance_type in all_types(snap):
        borrowed = max(0, usage[share_id, instance_type] - limit(share, instance_type))
        if not borrowed:
            continue
        lendable = snap.capacity.get(instance_type, 0) - sum(reserved(s, instance_type) for s in snap.shares)
        largest = max(largest, Fraction(borrowed, max(1, lendable)))
    return largest / Fraction(share.fair_share_weight)


def head_key(snap: Snapshot, job: Job) -> tuple:
    under = share_under_limit(snap, job.share_id)
    fair = Fraction(0)
    if snap.idle_capacity_assignment == IdleCapacityAssignment.FAIR_SHARE and not under:
        fair = dominant_borrowed_share(snap, job.share_id)
    return (not under, -job.priority, fair, job.submitted_at, job.id)


def with_job(snap: Snapshot, job: Job) -> Snapshot:
    return replace(snap, jobs=tuple(job if j.id == job.id else j for j in snap.jobs))


def pending_too_long(job: Job, now: datetime) -> bool:
    """RUNNABLE longer than `max_pending_seconds`, counted from when it last became RUNNABLE."""
    if job.max_pending_seconds is None:
        return False
    return now - (job.runnable_since or job.submitted_at) > timedelta(seconds=job.max_pending_seconds)


def plan_expiring(snap: Snapshot, name: str) -> bool:
    """The plan ends within the drain window (or has ended, or is gone)."""
    plan = next((p for p in snap.plans if p.name == name), None)
    return plan is None or plan.end_time - snap.now <= timedelta(seconds=snap.plan_drain_seconds)


def stopping_ids(snap: Snapshot, instance_type: str | None = None) -> set[int]:
    """STOPPING jobs (on the type's on-demand capacity, when it is given)."""
    return {
        j.id
        for j in snap.jobs
        if j.status == JobStatus.STOPPING
        and (
            instance_type is None
            or (j.placement.instance_type, j.placement.training_plan) == (instance_type, None)
        )
    }


class ModelPass:
    def __init__(self, snap: Snapshot):
        self.snap = snap
        self.decisions = ModelDecisions()
        self.placed_in_pass: set[int] = set()
        self.victims: set[int] = set()
        # Nominations standing in the pass: job -> (entry index, its own victims still STOPPING).
        self.standing: dict[int, tuple[int, frozenset[int]]] = {}
        self.placed_at_once = 0
        # STOPPING jobs being relocated: their new entry is earmarked for them.
        self.relocating: set[int] = {
            j.id for j in snap.jobs if j.status == JobStatus.STOPPING and moving(j) and valid_entry(j)
        }

    # --- graceful stops: the queue now, and once settled ---------------------------------------------------

    def settled(self, except_job: int) -> Snapshot:
        """Every STOPPING job gone and every other standing nominated job on its earmarked entry."""
        jobs = []
        for job in self.snap.jobs:
            if job.status == JobStatus.STOPPING and job.id not in self.relocating:
                continue
            earmarked = self.earmarked_entry(job, except_job)
            if earmarked is not None:
                placement = Placement(
                    earmarked.instance_type, earmarked.instance_count, earmarked.training_plan, self.snap.now
                )
                job = replace(job, status=JobStatus.SCHEDULED, placement=placement)
            jobs.append(job)
        return replace(self.snap, jobs=tuple(jobs))

    def earmarked_entry(self, job: Job, except_job: int):
        """The entry earmarked for the job (a standing nominee, or a job relocating), None when none is."""
        if job.id == except_job:
            return None
        if job.id in self.standing:
            return job.entries[self.standing[job.id][0]]
        if job.id in self.relocating:
            return job.entries[job.nomination.entry_index]
        return None

    def with_plan_earmarks(self, except_job: int) -> Snapshot:
        """The queue now, with the plan entries earmarked for others held on their plans."""
        held = []
        for job in self.snap.jobs:
            earmarked = self.earmarked_entry(job, except_job)
            if earmarked is not None and earmarked.training_plan is not None:
                placement = Placement(
                    earmarked.instance_type, earmarked.instance_count, earmarked.training_plan, self.snap.now
                )
                held.append(replace(job, id=-job.id, status=JobStatus.SCHEDULED, placement=placement))
        return replace(self.snap, jobs=self.snap.jobs + tuple(held))

    def fits(self, job: Job, index: int) -> bool:
        """Without preemption: now (STOPPING jobs hold their instances) and once settled (earmarks held)."""
        entry = job.entries[index]
        if entry.training_plan is not None:
            return fits_without_preemption(self.with_plan_earmarks(job.id), job, entry)
        return fits_now(self.snap, job, entry) and fits_without_preemption(self.settled(job.id), job, entry)

    def first_fit(self, job: Job) -> int | None:
        return next((i for i in range(len(job.entries)) if self.fits(job, i)), None)

    def claimed(self) -> set[int]:
        """The STOPPING jobs that are a standing nominee's own victims."""
        return {victim for _, victims in self.standing.values() for victim in victims}

    def fits_once_freed(self, job: Job, entry) -> bool:
        """The entry would fit, now and once settled, once the STOPPING jobs of its type that are no nominee's
        victims are gone (there being such jobs)."""
        freeing = stopping_ids(self.snap, entry.instance_type) - self.claimed()
        if not freeing:
            return False
        freed = reference.without(self.snap, freeing)
        return fits_now(freed, job, entry) and fits_without_preemption(self.settled(job.id), job, entry)

    def nominate(self, job: Job, index: int, victims: set[int]) -> None:
        self.standing[job.id] = (index, frozenset(victims))
        self.decisions.nominations[job.id] = (index, tuple(sorted(victims)))

    # --- housekeeping (behaviour.md#housekeeping, and behaviour.md#capacity-what-a-share-may-hold's last rule)
    # --------------------------------------------------

    def drain(self) -> None:
        """Jobs on a plan in its drain window go back to RUNNABLE, and may be placed elsewhere at once; a job
        its executor has taken is STOPPING first."""
        for job in self.snap.jobs:
            plan = job.placement.training_plan if job.placement else None
            if job.status in PLACED_STATUSES and plan is not None and plan_expiring(self.snap, plan):
                self.decisions.drains[job.id] = job.taken
                self.snap = with_job(self.snap, self.stopped(job))

    def time_out(self) -> None:
        for job in self.snap.jobs:
            if job.status == JobStatus.RUNNABLE and pending_too_long(job, self.snap.now):
                self.decisions.timeouts.add(job.id)
        self.snap = reference.without(self.snap, self.decisions.timeouts)

    def give_back(self) -> None:
        """STOPPING jobs leave whatever happens: the give-back stops only what is needed besides them."""
        for job_id in reference.give_back(reference.without(self.snap, stopping_ids(self.snap))):
            self.stop(job_id, PreemptionKind.LIMIT_REDUCED, None)

    def stopped(self, job: Job) -> Job:
        """A taken job is STOPPING and keeps its instances; one not yet taken is RUNNABLE at once."""
        if job.taken:
            return replace(job, status=JobStatus.STOPPING)
        return replace(job, status=JobStatus.RUNNABLE, placement=None, runnable_since=self.snap.now)

    def stop(self, job_id: int, kind: PreemptionKind, preemptor: int | None) -> None:
        job = next(j for j in self.snap.jobs if j.id == job_id)
        retries = job.preemption_retries_before_termination
        fails = retries is not None and job.preemption_count + 1 > retries
        self.decisions.preemptions.append((job_id, kind, preemptor, fails, job.taken))
        self.victims.add(job_id)
        if fails and not job.taken:
            self.snap = reference.without(self.snap, {job_id})
        else:
            self.snap = with_job(self.snap, self.stopped(job))

    # --- order and placement (behaviour.md#order-3.4) -----------------------------------------------------------------

    def place(self, job: Job, index: int) -> None:
        entry = job.entries[index]
        borrowed = 0
        if entry.training_plan is None:
            share = next(s for s in self.snap.shares if s.id == job.share_id)
            before = on_demand_usage(self.snap)[job.share_id, entry.instance_type]
            cap = limit(share, entry.instance_type)
            borrowed = max(0, before + entry.instance_count - cap) - max(0, before - cap)
        placement = Placement(entry.instance_type, entry.instance_count, entry.training_plan, self.snap.now)
        self.snap = with_job(self.snap, replace(job, status=JobStatus.SCHEDULED, placement=placement))
        self.placed_in_pass.add(job.id)
        self.decisions.admissions.append((job.id, index, borrowed))

    def place_nominated_first(self, jobs: list[Job]) -> None:
        """Nominated jobs before any other head: placed where they fit, else waiting while one of their own
        victims stops and their entry fits once settled, else their nomination lapses and they are ordinary
        heads."""
        jobs = list(jobs)
        while jobs:
            # The order of behaviour.md#order among them, read afresh after each.
            job = min(jobs, key=lambda j: head_key(self.snap, j))
            jobs.remove(job)
            index = self.first_fit(job)
            if index is not None:
                del self.standing[job.id]
                self.place(job, index)
                continue
            entry_index, victims = self.standing[job.id]
            entry = job.entries[entry_index]
            still_stopping = victims & stopping_ids(self.snap, entry.instance_type)
            if still_stopping and fits_without_preemption(self.settled(job.id), job, entry):
                self.standing[job.id] = (entry_index, frozenset(still_stopping))
            else:
                del self.standing[job.id]

    def try_place(self, job: Job, *, allow_preemption: bool) -> bool:
        """The first entry that fits without preemption; else the first that preemption can make room for,
        unless an entry before it would fit once instances being freed are free. A waiting nominee is placed
        if it fits (its victims still stop)."""
        if job.id in self.standing:
            index = self.first_fit(job)
            if index is None:
                return False
            del self.standing[job.id]
            self.decisions.nominations.pop(job.id, None)
            self.placed_at_once += 1
            self.place(job, index)
            return True
        index = self.first_fit(job)
        if index is not None:
            self.place(job, index)
            return True
        if not allow_preemption:
            return False
        for index, entry in enumerate(job.entries):  # noqa: B007 (the entry found is used after the loop)
            if entry.training_plan is not None:
                continue
            if self.fits_once_freed(job, entry):
                return False  # room is on its way: no victim for it or a later entry, and no nomination
            # Nominated jobs, placed in the settled view, are no victims; the victims make room now too.
            settled = self.settled(job.id)
            excluded = self.placed_in_pass | set(self.standing) | self.relocating
            victims = reference.victims_for(settled, job, entry, excluded, now=self.snap)
            if victims is not None:
                break
        else:
            return False
        own: set[int] = set()
        for victim_id in victims:
            victim = next(j for j in self.snap.jobs if j.id == victim_id)
            kind = PreemptionKind.RECLAIM if victim.share_id != job.share_id else PreemptionKind.IN_SHARE
            if victim.taken:
                own.add(victim_id)
            self.stop(victim_id, kind, job.id)
        if self.fits(job, index):
            self.place(job, index)
            return True
        if own:
            self.nominate(job, index, own)
        return False

    def take_heads(self, queues: dict[int, list[Job]], *, allow_preemption: bool) -> dict[int, list[Job]]:
        """Repeatedly the best head across shares; returns each share's jobs left unplaced, in queue order."""
        queues = {share_id: list(jobs) for share_id, jobs in queues.items()}
        left: dict[int, list[Job]] = {share_id: [] for share_id in queues}
        while any(queues.values()):
            job = min((jobs[0] for jobs in queues.values() if jobs), key=lambda j: head_key(self.snap, j))
            share_queue = queues[job.share_id]
            if self.try_place(job, allow_preemption=allow_preemption):
                share_queue.pop(0)
            elif self.snap.ordering == Ordering.STRICT_FIFO:
                left[job.share_id] += share_queue
                share_queue.clear()
            else:
                left[job.share_id].append(share_queue.pop(0))
        return left

    # --- relocation (behaviour.md#moving-to-a-preferred-entry)
    # --------------------------------------------------------------------------------

    def borrowed_if_on(self, job: Job, entry) -> int:
        """Instances above the share's limit the job would account for on `entry`, were it there alone."""
        if entry.training_plan is not None:
            return 0
        share = next(s for s in self.snap.shares if s.id == job.share_id)
        usage = on_demand_usage(reference.without(self.snap, {job.id}))[job.share_id, entry.instance_type]
        cap = limit(share, entry.instance_type)
        return max(0, usage + entry.instance_count - cap) - max(0, usage - cap)

    def relocate(self) -> bool:
        """Moves after the heads are placed; True when a job was moved at once."""
        snap = self.snap
        if snap.max_relocations_per_pass <= 0:
            return False
        enabled = {s.id for s in snap.shares if s.enabled}
        asked = {
            pool_of(entry)
            for j in snap.jobs
            if j.status == JobStatus.RUNNABLE and j.share_id in enabled
            for entry in j.entries
        }
        protection = timedelta(seconds=snap.preemption_min_runtime_seconds)
        min_runtime = timedelta(seconds=snap.relocation_min_runtime_seconds)
        candidates = sorted(
            (
                j
                for j in snap.jobs
                if j.relocate
                and j.status == JobStatus.RUNNING
                and j.share_id in enabled
                and snap.now - j.placement.scheduled_at >= min_runtime
                and (not protection or j.placement.scheduled_at + protection <= snap.now)
            ),
            key=lambda j: (j.placement.scheduled_at, j.id),
        )
        at_once = False
        for job in candidates:
            if len(self.decisions.relocations) >= snap.max_relocations_per_pass:
                break
            where = (job.placement.instance_type, job.placement.instance_count, job.placement.training_plan)
            k = next(
                (
                    i
                    for i, e in enumerate(job.entries)
                    if (e.instance_type, e.instance_count, e.training_plan) == where
                ),
                0,
            )
            here = self.borrowed_if_on(job, job.entries[k]) if k else 0
            target = next(
                (
                    j
                    for j in range(k)
                    if pool_of(job.entries[j]) not in asked
                    and self.borrowed_if_on(job, job.entries[j]) <= here
                    and self.fits(job, j)
                ),
                None,
            )
            if target is None:
                continue
            self.decisions.relocations.append((job.id, k, target, job.taken))
            if job.taken:
                moved = replace(
                    job, status=JobStatus.STOPPING, nomination=Nomination(target, frozenset({job.id}))
                )
                self.snap = with_job(self.snap, moved)
                self.relocating.add(job.id)
            else:
                stopped = replace(job, status=JobStatus.RUNNABLE, placement=None)
                self.snap = with_job(self.snap, stopped)
                self.place(stopped, target)
                at_once = True
        return at_once

    def run(self) -> ModelDecisions:
        nominated = {j.id for j in self.snap.jobs if j.nomination is not None}
        self.drain()
        self.time_out()
        self.give_back()
        # This pass's victims are not placed again before the next pass; drained jobs may be at once.
        runnable = [j for j in self.snap.jobs if j.status == JobStatus.RUNNABLE and j.id not in self.victims]
        # A disabled share places nothing, nor does one whose budget of scope ALL is spent.
        enabled = {s.id for s in self.snap.shares if s.enabled and not starts_no_new_job(s)}
        if self.snap.queue_enabled:
            runnable = [j for j in runnable if j.share_id in enabled]
            # A nomination stands while its entry is an on-demand entry of the job (any entry: a relocation).
            for job in runnable:
                nomination = job.nomination
                if nomination is not None and valid_entry(job):
                    if job.entries[nomination.entry_index].training_plan is None or moving(job):
                        self.standing[job.id] = (nomination.entry_index, nomination.victim_ids)
            self.place_nominated_first([j for j in runnable if j.id in self.standing])
            queues = by_share(j for j in runnable if j.id not in self.placed_in_pass)
            left = self.take_heads(queues, allow_preemption=True)
            preempted = any(preemptor is not None for _, _, preemptor, _, _ in self.decisions.preemptions)
            if preempted or self.placed_at_once:
                # Work conservation: what the preemptions freed beyond their preemptors' needs, and the
                # earmarks given back by nominees placed at once (again after each round that placed one).
                while True:
                    placed_at_once = self.placed_at_once
                    left = self.take_heads(left, allow_preemption=False)
                    if self.placed_at_once == placed_at_once:
                        break
            if self.relocate():
                while True:  # what a job moved at once left is free for the jobs left
                    placed_at_once = self.placed_at_once
                    left = self.take_heads(left, allow_preemption=False)
                    if self.placed_at_once == placed_at_once:
                        break
        kept = set(self.standing) | self.placed_in_pass | self.relocating
        self.decisions.lapsed = sorted(
            job_id for job_id in nominated - kept if job_id not in self.decisions.nominations
        )
        waiting = by_share(j for j in self.snap.jobs if j.status == JobStatus.RUNNABLE)
        for jobs in waiting.values():
            for position, job in enumerate(jobs, start=1):
                self.decisions.positions[job.id] = position
        return self.decisions


def moving(job: Job) -> bool:
    """A relocation's nomination: the job waits for its own stop."""
    return job.nomination is not None and job.id in job.nomination.victim_ids


def valid_entry(job: Job) -> bool:
    return 0 <= job.nomination.entry_index < len(job.entries)


def pool_of(entry) -> tuple[str, str]:
    return ("plan", entry.training_plan) if entry.training_plan is not None else ("type", entry.instance_type)


def by_share(jobs: Iterable[Job]) -> dict[int, list[Job]]:
    queues: dict[int, list[Job]] = {}
    for job in sorted(jobs, key=queue_key):
        queues.setdefault(job.share_id, []).append(job)
    return queues


def model_pass(snap: Snapshot) -> ModelDecisions:
    """One pass over the snapshot, as behaviour.md#the-scheduling-pass reads."""
    return ModelPass(snap).run()
