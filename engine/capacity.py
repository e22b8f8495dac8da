"""The pass's working state: who holds what on each instance type, kept current as the pass decides.

Built once from the snapshot. Every placement and release updates the per-type aggregates of invariants A
and B (behaviour.md#capacity-what-a-share-may-hold) in O(1), so a fit check never sums over shares or jobs.

Graceful stops (behaviour.md#preemption) give a type two states: *now*, where STOPPING jobs still hold their
instances, and *once settled*, where every STOPPING job is gone and every nominated job holds its earmarked entry.
A type with neither (`TypeLedger.settling` false) has one state, and everything reads as before. A STOPPING job is
either a standing nominee's own victim (`WorkingState.claimed`) or stops for nobody (`WorkingState.freeing`).
"""

from __future__ import annotations

from datetime import datetime

from .budgets import stops_borrowing
from .candidates import Candidates
from .ceilings import reserved_capacity, share_ceiling
from .types import PLACED_STATUSES, Entry, Job, JobStatus, Placement, Plan, Share, Snapshot


def victim_key(job: Job, placement: Placement) -> tuple[int, float, int]:
    """Reclaim order: lowest priority, then most recently scheduled (least work lost), then highest id."""
    return (job.priority, -placement.scheduled_at.timestamp(), -job.id)


class Holding:
    """One share's on-demand use of one instance type, and the jobs a preemption may take from it.

    `victims` are the jobs placed before this pass, in reclaim order; a job placed in this pass is never a
    victim in it, so it never enters the list. Stopped jobs stay in the list and are skipped by readers.
    `usage` counts STOPPING jobs (`stopping` of it); `earmarked` is what nominated jobs of the share will hold.
    """

    __slots__ = (
        "share",
        "instance_type",
        "limit",
        "reserved",
        "ceiling",
        "usage",
        "victims",
        "victim_usage",
        "live_from",
        "stopping",
        "earmarked",
        "version",
    )

    def __init__(self, share: Share, instance_type: str):
        self.share = share
        self.instance_type = instance_type
        self.limit = share.limits.get(instance_type, 0)
        self.reserved = reserved_capacity(share.strategy, self.limit, share.lending_limits.get(instance_type))
        self.ceiling = share_ceiling(share.strategy, self.limit, share.borrow_limit)
        if stops_borrowing(share.budget):  # a spent BORROWED budget: no placement goes above the limit
            self.ceiling = self.limit
        self.usage = 0
        self.victims: list[Job] = []
        self.victim_usage = 0
        self.live_from = 0
        self.stopping = 0
        self.earmarked = 0
        # Bumped whenever the pass changes the holding's usage, stopping, earmarks or live victims.
        self.version = 0

    @property
    def borrowed(self) -> int:
        return max(0, self.usage - self.limit)

    @property
    def over_limit(self) -> bool:
        return self.usage > self.limit


class TypeLedger:
    """Sums over all shares for one instance type.

    used = sum of usage (invariant A), in_use_or_reserved = sum of max(usage, reserved) (invariant B),
    borrowed = sum of usage above limits, reclaimable = victim usage of shares over their limit (an upper
    bound on what reclaim can free); stopping = held by STOPPING jobs, earmarked = for nominated jobs.
    """

    __slots__ = (
        "instance_type",
        "capacity",
        "used",
        "in_use_or_reserved",
        "borrowed",
        "reclaimable",
        "stopping",
        "earmarked",
    )

    def __init__(self, instance_type: str, capacity: int):
        self.instance_type = instance_type
        self.capacity = capacity
        self.used = 0
        self.in_use_or_reserved = 0
        self.borrowed = 0
        self.reclaimable = 0
        self.stopping = 0
        self.earmarked = 0

    @property
    def settling(self) -> bool:
        """Instances of the type are stopping or earmarked: it is not yet as it will be once they settle."""
        return self.stopping > 0 or self.earmarked > 0

    @property
    def broken(self) -> bool:
        return self.in_use_or_reserved > self.capacity or self.used > self.capacity


class FailureMemo:
    """Per instance type and key, the smallest count known to fail a check that only gets harder with the
    count and with usage of the type; `forget` a type whenever a change of its usage could make it pass.
    """

    __slots__ = ("_by_type",)

    def __init__(self) -> None:
        self._by_type: dict[str, dict[tuple[int, object], int]] = {}

    def known_to_fail(self, instance_type: str, key: tuple[int, object], count: int) -> bool:
        failed = self._by_type.get(instance_type)
        return failed is not None and key in failed and count >= failed[key]

    def record(self, instance_type: str, key: tuple[int, object], count: int) -> None:
        failed = self._by_type.setdefault(instance_type, {})
        failed[key] = min(count, failed.get(key, count))

    def forget(self, instance_type: str) -> None:
        self._by_type.pop(instance_type, None)


class WorkingState:
    """The mutable state of one pass: live placements, usage per (share, type) and per plan, aggregates."""

    def __init__(self, snapshot: Snapshot):
        self.snapshot = snapshot
        self.now: datetime = snapshot.now
        self.shares: dict[int, Share] = {share.id: share for share in sorted(snapshot.shares, key=_by_id)}
        self.plans: dict[str, Plan] = {plan.name: plan for plan in sorted(snapshot.plans, key=_by_id)}
        self.jobs: list[Job] = sorted(snapshot.jobs, key=_by_id)
        self._jobs_by_id: dict[int, Job] | None = None
        # Gathered in the one walk over the jobs below, each in id order, so that the pass's steps that ask
        # about a few of the jobs do not each walk all of them again: the RUNNABLE jobs, those of them that
        # may time out, the placed jobs (SCHEDULED, STARTING, RUNNING), the jobs with a nomination (any
        # status) and the RUNNING jobs that may be relocated.
        self.runnable_jobs: list[Job] = []
        self.may_time_out: list[Job] = []
        self.placed_jobs: list[Job] = []
        self.nominated_jobs: list[Job] = []
        self.relocatable_jobs: list[Job] = []
        self.ledgers: dict[str, TypeLedger] = {}
        self.holdings: dict[tuple[int, str], Holding] = {}
        self.share_usage: dict[int, int] = {share_id: 0 for share_id in self.shares}
        self.share_limit: dict[int, int] = {
            share.id: sum(share.limits.values()) for share in self.shares.values()
        }
        self.plan_in_use: dict[str, int] = {}
        # Per plan, instances earmarked for jobs nominated on a plan entry (relocations,
        # behaviour.md#moving-to-a-preferred-entry).
        self.plan_earmarked: dict[str, int] = {}
        self.plan_jobs: dict[str, list[Job]] = {}
        self.placements: dict[int, Placement] = {}
        self.placed_in_pass: set[int] = set()
        self.stopped: set[int] = set()
        # On-demand STOPPING jobs per type (from the snapshot and from this pass), by id; and per plan, the
        # instances STOPPING jobs hold on it.
        self.stopping_jobs: dict[str, dict[int, Job]] = {}
        self.plan_stopping: dict[str, int] = {}
        # STOPPING job -> the nominee whose victim it is (behaviour.md#preemption: a nominee waits only for its own
        # victims); the others (cancelled, drained, stopped for a lowered limit, victims of no standing nominee) are
        # "freeing": per type, the instances each share's such jobs hold, worked out again after a change.
        self.claimed: dict[int, int] = {}
        self._freeing: dict[str, tuple[int, dict[int, int]]] = {}
        # Set only while a pending reason asks what preemption would take if no job were protected.
        self.protections_lifted = False
        # (share, plan) -> smallest count known not to fit without preemption (see fit.py).
        self.no_fit = FailureMemo()
        # (share, priority) -> smallest count preemption is known not to make room for (see preemption.py).
        self.no_preemption = FailureMemo()
        # (share, type) -> (holding version, protections lifted, usage and victim count once reclaimed down to
        # its limit): see preemption.reclaimed_down.
        self.reclaim_floor: dict[tuple[int, str], tuple[int, bool, int, int]] = {}
        # (share, type, protections lifted) -> the holding's candidates: see preemption.candidates_of.
        self.candidates: dict[tuple[int, str, bool], Candidates] = {}
        # A count of the pass's changes, and per type (for plans, all plans) the count at its last change:
        # what a check of one type read is still true while its count stays (see refusals.py); and per type
        # the count at its last change that may make room (a release, a stop, an earmark), not an admission.
        self.changes = 0
        self.type_changed: dict[str, int] = {}
        self.type_eased: dict[str, int] = {}
        self.plans_changed = 0
        for instance_type in sorted(snapshot.capacity):
            self.ledger(instance_type)
        for share in self.shares.values():
            for instance_type in sorted(share.limits):
                self.holding(share.id, instance_type)
        shares, runnable, running = self.shares, JobStatus.RUNNABLE, JobStatus.RUNNING
        runnable_jobs, may_time_out, placed_jobs = self.runnable_jobs, self.may_time_out, self.placed_jobs
        for job in self.jobs:
            if job.share_id not in shares:
                raise ValueError(
                    f"job {job.id} belongs to share {job.share_id}, which is not in the snapshot"
                )
            if job.nomination is not None:
                self.nominated_jobs.append(job)
            if job.status is runnable or job.status == runnable:
                runnable_jobs.append(job)
                if job.max_pending_seconds is not None:
                    may_time_out.append(job)
                continue
            if job.status in PLACED_STATUSES:
                if job.placement is None:
                    raise ValueError(f"job {job.id} is {job.status} but has no placement")
                placed_jobs.append(job)
                if job.relocate and job.status == running:
                    self.relocatable_jobs.append(job)
                holding = self._hold(job, job.placement)
                if holding is not None:  # its type's sums are counted once all jobs are in
                    holding.victims.append(job)
                    holding.usage += job.placement.instance_count
            elif job.status == JobStatus.STOPPING:
                if job.placement is None:
                    raise ValueError(f"job {job.id} is STOPPING but has no placement")
                self._hold_while_stopping(job, job.placement)
            elif job.status != JobStatus.RUNNABLE:
                raise ValueError(f"job {job.id} has status {job.status}, not RUNNABLE, placed or STOPPING")
        for holding in self.holdings.values():
            if holding.usage:
                holding.victims.sort(key=lambda job: victim_key(job, job.placement))
                self._count_before_pass(holding)

    # --- lookups -----------------------------------------------------------------------------------------

    def job_by_id(self, job_id: int) -> Job | None:
        """The snapshot's job `job_id`, for the words that name it (built on first use: most passes never ask)."""
        if self._jobs_by_id is None:
            self._jobs_by_id = {job.id: job for job in self.jobs}
        return self._jobs_by_id.get(job_id)

    def ledger(self, instance_type: str) -> TypeLedger:
        ledger = self.ledgers.get(instance_type)
        if ledger is None:
            ledger = self.ledgers[instance_type] = TypeLedger(
                instance_type, self.snapshot.capacity.get(instance_type, 0)
            )
        return ledger

    def holding(self, share_id: int, instance_type: str) -> Holding:
        holding = self.holdings.get((share_id, instance_type))
        if holding is None:
            holding = self.holdings[share_id, instance_type] = Holding(self.shares[share_id], instance_type)
            # An idle RESERVE share still commits its limit (invariant B).
            self.ledger(instance_type).in_use_or_reserved += holding.reserved
        return holding

    def holdings_of_type(self, instance_type: str) -> list[Holding]:
        """Every share's holding of `instance_type`, by share id."""
        return [self.holding(share_id, instance_type) for share_id in self.shares]

    def live_victims(self, holding: Holding) -> list[Job]:
        """The jobs of `holding` still placed that a preemption in this pass may take, in reclaim order."""
        return [job for job in holding.victims if job.id not in self.stopped]

    def next_live_victim(self, holding: Holding, start: int = 0) -> int | None:
        """Index of the first victim at or after `start` that is still placed, None when there is none."""
        victims = holding.victims
        index = max(start, holding.live_from)
        while index < len(victims) and victims[index].id in self.stopped:
            index += 1
        # Victims are mostly taken from the front of the list: remember where the live ones begin.
        if start <= holding.live_from:
            holding.live_from = index
        return index if index < len(victims) else None

    def share_under_limit(self, share_id: int) -> bool:
        """A share is under its limit while its on-demand instances (all types) are below its limits' sum."""
        return self.share_usage[share_id] < self.share_limit[share_id]

    def plan_free(self, plan: Plan) -> int:
        return (
            plan.instance_count - self.plan_in_use.get(plan.name, 0) - self.plan_earmarked.get(plan.name, 0)
        )

    def settled_usage(self, holding: Holding) -> int:
        """The share's usage of the type once STOPPING jobs are gone and its nominated jobs are placed."""
        return holding.usage - holding.stopping + holding.earmarked

    def settled_in_use_or_reserved(self, instance_type: str) -> int:
        """Invariant B's sum for the type once STOPPING jobs are gone and nominated jobs are placed."""
        if not self.ledgers[instance_type].settling:
            return self.ledgers[instance_type].in_use_or_reserved
        return sum(
            max(self.settled_usage(holding), holding.reserved)
            for holding in self.holdings_of_type(instance_type)
        )

    def freeing(self, instance_type: str) -> dict[int, int]:
        """Per share, the on-demand instances of the type held by STOPPING jobs that are no nominee's victims."""
        known = self._freeing.get(instance_type)
        changed = self.type_changed.get(instance_type, 0)
        if known is not None and known[0] == changed:
            return known[1]
        by_share: dict[int, int] = {}
        claimed = self.claimed
        for job_id, job in self.stopping_jobs.get(instance_type, {}).items():
            if job_id not in claimed:
                by_share[job.share_id] = by_share.get(job.share_id, 0) + job.placement.instance_count
        self._freeing[instance_type] = (changed, by_share)
        return by_share

    def freeing_jobs(self, instance_type: str) -> list[Job]:
        """The STOPPING jobs of the type that are no nominee's victims, by id."""
        stopping = self.stopping_jobs.get(instance_type, {})
        return [stopping[job_id] for job_id in sorted(stopping) if job_id not in self.claimed]

    # --- changes -----------------------------------------------------------------------------------------

    def claim(self, nominee_id: int, instance_type: str, victim_ids) -> None:
        """The STOPPING jobs `victim_ids` are the nominee's own victims: their instances are on their way to it."""
        for job_id in victim_ids:
            self.claimed[job_id] = nominee_id
        self._claims_changed(instance_type)

    def unclaim(self, nominee_id: int, instance_type: str, victim_ids) -> None:
        """The nominee is placed or its nomination lapses: its victims stop for nobody."""
        for job_id in victim_ids:
            if self.claimed.get(job_id) == nominee_id:
                del self.claimed[job_id]
        self._claims_changed(instance_type)

    def _claims_changed(self, instance_type: str) -> None:
        self._touch(instance_type, eased=True)
        self.no_fit.forget(instance_type)
        self.no_preemption.forget(instance_type)

    def place(self, job: Job, instance_type: str, count: int, training_plan: str | None) -> Placement:
        """Hold capacity for `job`, placed in this pass (so never a victim in it)."""
        placement = Placement(instance_type, count, training_plan, self.now)
        self.placed_in_pass.add(job.id)
        holding = self._hold(job, placement)
        if holding is not None:
            self._adjust(holding, count, 0)
        return placement

    def begin_stopping(self, job: Job) -> Placement:
        """`job` stops gracefully: no longer a victim or placed, but it holds its capacity until it is gone."""
        placement = self.placements.pop(job.id)
        self.stopped.add(job.id)
        if placement.training_plan is not None:
            name = placement.training_plan
            self.plan_stopping[name] = self.plan_stopping.get(name, 0) + placement.instance_count
            self._touch_plans()
        else:
            holding = self.holding(job.share_id, placement.instance_type)
            holding.stopping += placement.instance_count
            self.ledgers[placement.instance_type].stopping += placement.instance_count
            self.stopping_jobs.setdefault(placement.instance_type, {})[job.id] = job
            # Not a victim any more; and the type once settled has room it did not have before.
            self._adjust(holding, 0, -placement.instance_count)
            self.no_fit.forget(placement.instance_type)
        return placement

    def earmark(self, share_id: int, instance_type: str, count: int) -> None:
        """Hold back (`count` > 0) or give up (< 0) instances of the type for a nominated job of the share."""
        holding = self.holding(share_id, instance_type)
        holding.earmarked += count
        holding.version += 1
        self._touch(instance_type, eased=True)
        self.ledgers[instance_type].earmarked += count
        self.no_fit.forget(instance_type)
        self.no_preemption.forget(instance_type)

    def earmark_entry(self, share_id: int, entry: Entry, count: int) -> None:
        """`earmark` for an entry: on a training plan, `count` of the plan's instances are held back (or given
        up) for the nominated job; on-demand, as `earmark`."""
        if entry.training_plan is None:
            self.earmark(share_id, entry.instance_type, count)
            return
        name = entry.training_plan
        self.plan_earmarked[name] = self.plan_earmarked.get(name, 0) + count
        self._touch_plans()

    def release(self, job: Job) -> Placement:
        """Free the capacity `job` holds; it is stopped for the rest of the pass."""
        placement = self.placements.pop(job.id)
        self.stopped.add(job.id)
        self.no_fit.forget(placement.instance_type)
        if placement.training_plan is not None:
            self.plan_in_use[placement.training_plan] -= placement.instance_count
            self._touch_plans()
        else:
            victim = job.id not in self.placed_in_pass
            self._adjust(
                self.holding(job.share_id, placement.instance_type),
                -placement.instance_count,
                -placement.instance_count if victim else 0,
            )
        return placement

    def _count_before_pass(self, holding: Holding) -> None:
        """Add a holding of jobs placed before the pass to its type's sums, as `_adjust` would one by one."""
        ledger = self.ledgers[holding.instance_type]
        holding.victim_usage = holding.usage - holding.stopping
        ledger.stopping += holding.stopping
        ledger.used += holding.usage
        ledger.in_use_or_reserved += max(holding.usage, holding.reserved) - holding.reserved
        ledger.borrowed += holding.borrowed
        if holding.over_limit:
            ledger.reclaimable += holding.victim_usage
        self.share_usage[holding.share.id] += holding.usage

    def _hold_while_stopping(self, job: Job, placement: Placement) -> None:
        """A STOPPING job of the snapshot: its instances count as held, but it is never a victim nor drained."""
        if placement.training_plan is not None:
            name = placement.training_plan
            self.plan_in_use[name] = self.plan_in_use.get(name, 0) + placement.instance_count
            self.plan_stopping[name] = self.plan_stopping.get(name, 0) + placement.instance_count
            return
        holding = self.holding(job.share_id, placement.instance_type)
        holding.usage += placement.instance_count
        holding.stopping += placement.instance_count
        self.stopping_jobs.setdefault(placement.instance_type, {})[job.id] = job

    def _hold(self, job: Job, placement: Placement) -> Holding | None:
        """Record where `job` is placed; returns the on-demand holding it joins (None on a plan)."""
        self.placements[job.id] = placement
        if placement.training_plan is not None:
            name = placement.training_plan
            self.plan_in_use[name] = self.plan_in_use.get(name, 0) + placement.instance_count
            self.plan_jobs.setdefault(name, []).append(job)
            self._touch_plans()
            return None
        return self.holding(job.share_id, placement.instance_type)

    def _touch(self, instance_type: str, *, eased: bool) -> None:
        self.changes += 1
        self.type_changed[instance_type] = self.changes
        if eased:
            self.type_eased[instance_type] = self.changes

    def _touch_plans(self) -> None:
        self.changes += 1
        self.plans_changed = self.changes

    def _adjust(self, holding: Holding, usage_delta: int, victim_delta: int) -> None:
        ledger = self.ledgers[holding.instance_type]
        self._touch(holding.instance_type, eased=usage_delta < 0 or victim_delta < 0)
        # A placement can put a share over its limit and so make its jobs reclaimable.
        self.no_preemption.forget(holding.instance_type)
        in_use_or_reserved = max(holding.usage, holding.reserved)
        borrowed = holding.borrowed
        reclaimable = holding.victim_usage if holding.over_limit else 0
        holding.version += 1
        holding.usage += usage_delta
        holding.victim_usage += victim_delta
        ledger.used += usage_delta
        ledger.in_use_or_reserved += max(holding.usage, holding.reserved) - in_use_or_reserved
        ledger.borrowed += holding.borrowed - borrowed
        ledger.reclaimable += (holding.victim_usage if holding.over_limit else 0) - reclaimable
        self.share_usage[holding.share.id] += usage_delta


def _by_id(item: Share | Plan | Job) -> int:
    return item.id
