"""Exact shortcuts: cheaper passes that decide exactly what the engine decides on the whole queue.

The engine's pass costs time for every job in the snapshot: each placed job when it builds its working state,
each RUNNABLE job when it orders, tries and explains it. A two-week Philly replay makes some 20,000 passes
over hundreds of placed and up to thousands of waiting jobs, so the replay gives the unchanged engine a
smaller snapshot that provably leads to the same admissions, preemptions, drains and timeouts, and falls back
to the whole snapshot whenever it cannot prove it. `simulate(..., verify_shortcuts=True)` runs the whole
snapshot as well after every pass and raises on any difference; the tests do that on real trace slices.

1. **Placed jobs, one per share and type.** The on-demand jobs a share holds on a type are given to the engine
   as one placeholder job holding their sum, at their lowest priority. Fits read only the sums, so a pass that
   preempts nobody decides the same. A pass that preempts anybody (or names a placeholder) is run again on the
   real jobs: with placeholders a victim search can only find more room than with the real jobs (a placeholder
   frees its whole sum where the real jobs free part of it), so when it finds none, the real search finds
   none.
   Jobs on training plans stay real (drains name them). With `Reducer.real_in_share` (the estimator's
   replay) the holdings of shares with in-share preemption are given as their real jobs when a job of the
   share given ranks above the holding's lowest priority: the victim search then finds what the whole
   queue's finds among them (their priorities differ, and a placeholder at the lowest of them offers the
   whole sum to any waiting job above it), and the argument is the same, since the whole snapshot is the
   case where every holding is real. When none ranks above it, no job can be taken from it in-share, and
   the placeholder decides the same.
2. **Waiting jobs, the first few of each group.** RUNNABLE jobs of one share with the same preference list and
   priority form a group; the engine gets the first `k` of each group in queue order, plus every job due to
   time out. With no preemption in the pass, capacity only fills up while it runs and every fit rule is
   monotone in usage, so once a group's k-th job was tried and not placed, every later job of the group fails
   too, without side effects, unless it could preempt: that needs in-share victims of lower priority, or
   reclaim, which needs its share to have room under its own limit when it is tried while some share is over
   its limit with jobs placed before the pass. `k` is one more than the jobs of the group that can be placed
   at most: per entry, the room left under the share's ceiling and in lendable capacity (invariants B, C) or
   on the plan, divided by the entry's count. When the k-th job was placed anyway, or a later job could
   preempt, the pass is run again with more of that group (or on the whole snapshot). Under STRICT_FIFO a
   share's queue is one group: everything behind a job that was not placed is held anyway. It is judged by
   its first job not due to time out (`Reducer.head`), and never left out while the share has a job on a
   training plan: a plan that drains puts its job back in the queue, where a head that can do nothing still
   holds it (`Reducer.may_block_drained`).
   A group whose share is already over its ceiling on every entry (RESERVE or LEND at its limit, or
   LEND_AND_BORROW at its borrow limit), with no in-share preemption, is left out entirely: in a pass that
   preempts nobody its share's usage only grows, so none of its jobs can be placed, nor reclaim (which needs
   the share to end within its own limit). Jobs of a disabled share are never tried. Likewise, in that pass,
   a group is left out that is *stuck*: on every entry no room now (room only shrinks; a plan has none while
   it is not ACTIVE, drains, or is closed to the share, and nobody waits or preempts on a plan), and on every
   entry on demand its share's usage plus the entry's count above its own limit (so no reclaim either) and,
   with in-share preemption, no job of the share on the type of lower priority than the group's (a pass's
   victims are jobs placed before it, so none). With in-share preemption, groups that differ only in
   priority are judged each on its own.
3. **A pass that preempts** is run again with the real jobs of every holding a victim may come from: shares
   over their limit on the type (reclaim) and shares with in-share preemption; the other holdings stay summed
   (no victim is ever taken from a share within its limit without in-share preemption). All waiting jobs are
   given, but those of RESERVE and LEND shares held at their limit: such a share is never over its limit, so
   never loses a job to reclaim, and its usage only grows. The decisions are kept unless one of the proofs
   below fails; then the pass is run again without that shortcut (`Reducer.preemption_verdict`, and
   `ReplayStats.preempting_retries` counts why), and on the whole snapshot when a summed placeholder was
   named.
   - *Reclaim fronts.* Reclaim takes victims of the holdings over their limit on a type in one order
     (`victim_key` across all of them) and stops as soon as the preemptor fits. So a reclaimed holding is
     given as its real jobs at the front of that order, as many as the pass's would-be reclaimers can use
     (their room under their own limits, `reclaim_reach`), and one placeholder for the rest, after every real
     job in that order. A preemption takes candidates in order and keeps the last one taken, so while no
     placeholder is named the victims are those the real jobs give; a named one
     (RECLAIM_PAST_FRONT) reruns the pass with the holdings whole. Not with in-share preemption in the
     pass, whose victims come after reclaim's.
   - *Borrowing in the pass.* A summed holding that went over its limit in the pass has jobs reclaim could
     take: the pass is run again with it as a reclaimed holding (BORROWED_IN_PASS).
   - *Stuck groups* (as in point 2) are first left out, and the decisions kept if they provably stayed stuck
     through the preemptions (`Reducer.stayed_stuck`); else the pass is run again with them
     (STUCK_GROUP_FREED).
   - *Groups cut short.* A group none of whose jobs can preempt when the pass starts (`cannot_reclaim`) is
     given only as many jobs as point 2 gives; kept if its last job given was not placed and its room
     provably never grew in the pass (`Reducer.stayed_short`), else run again with the whole group
     (SHORT_GROUP_GREW).
   A pass that preempts starts from the retries the last one needed (`ShortcutDecider.preempting_start`),
   with the summed holdings that may borrow in it already given as reclaimable (`Reducer.may_borrow`: the
   share may borrow on the type and has a job waiting with an entry on it): each try gives more of the queue
   than the one before and is judged on its own, so a try less reduced than needed is as exact, and a busy
   queue's passes that preempt mostly need the same retries.
4. **Passes that cannot decide anything are skipped** (see `simulation`): after a pass that decided nothing,
   a new job whose group (share, preference list, priority) was waiting then fails just as that group did; a
   capacity release on a type matters only to groups with an entry on it that are not held at their share's
   own limit (a RESERVE or LEND share without in-share preemption at its limit can neither fit nor preempt).
5. **Shares with nothing to do are folded into capacity.** A share none of whose jobs the pass is given (no
   waiting job, no job on a plan) and that is within its limit on every type can neither place nor lose a job
   in the pass: it has nothing to place, so its usage stays within its limits and no reclaim takes from it,
   and in-share preemption needs its own waiting job. What it does to the others is its part of invariant
   B's sum, max(usage, reserved) per type, so the engine is given the other shares and, per type, capacity
   less that part: every fit and victim search sees the same room. (Invariant A cannot break by it: the
   other shares' usage plus the folded share's part is at most invariant B's sum, within capacity.)

6. **Graceful stops are not covered.** With a stop delay, while any job is STOPPING or nominated the pass
   runs on the whole queue (the proofs above read capacity as freed by a stop in the same pass, and know
   nothing of earmarks), and so does any pass that preempts (its victims may stop gracefully); skipped passes
   (point 4) need an event then too.

7. **Budgets** (`simulator.budgets`) only take room away within a period: a spent budget of scope ALL keeps
   its share's jobs out of the engine's order (as a disabled share's), one of scope BORROWED lowers the
   share's ceiling to its limit. Every bound above reads the configured ceilings, which are then upper
   bounds, so a group judged held, stuck or cut short is so with the budget too, and a pass given more jobs
   than it needs decides the same. Room comes back only when a spent budget resets, and the replay wakes then
   (`Simulation.with_budgets`), so no pass that could decide something new is skipped.

What a pass starts from is kept as jobs come and go, not recomputed per pass: the usage of each holding,
invariant B's sum per type, which shares are over a limit (`PlacedJobs`), and which groups are held at their
share's ceiling (recomputed for a share only when its usage or its groups change), how many jobs of a group
point 2 gives (`Reducer.bound`, kept while the share's usage and invariant B's sum on the group's types stay
as they were), and each holding's jobs in reclaim order. Not under STRICT_FIFO, the groups are also indexed by
their entries' type, plan and count (and, with in-share preemption, priority: `RunnableGroups.by_entry`), so a
pass over many more groups than there are entries in that index finds those not stuck from a few numbers per share
and type (`Reducer.unstuck_groups`) rather than judging thousands of groups one by one.
"""

from __future__ import annotations

import enum
import heapq
from bisect import bisect_left, insort
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Set
from dataclasses import dataclass
from datetime import datetime
from operator import itemgetter
from typing import Any, Protocol

from engine import (
    Decisions,
    Entry,
    IdleCapacityAssignment,
    Job,
    JobStatus,
    Placement,
    Plan,
    PreemptionKind,
    Share,
    Snapshot,
    Strategy,
)
from engine.capacity import victim_key
from engine.ceilings import reserved_capacity, share_ceiling
from engine.fit import plan_is_active, plan_is_draining, plan_open_to_share
from engine.housekeeping import pending_too_long
from engine.order import queue_key

from .config import Configuration, to_datetime

GROWTH = 4
MAX_ATTEMPTS = 4
# A pass finds the groups not stuck from their index when they outnumber its entries this many times over:
# each entry costs about as much to read again as a group to judge (their results are kept alike).
INDEX_FROM = 4


class Verdict(enum.StrEnum):
    """What `Reducer.preemption_verdict` says of a reduced pass that preempts (values: its JSON names)."""

    # The decisions are those of the whole queue.
    EXACT = "exact"
    # Reclaim reached past the real jobs at the front of a holding: give the reclaimed holdings whole.
    RECLAIM_PAST_FRONT = "cut"
    # A summed holding borrowed in the pass, so reclaim may take from it: give its real jobs.
    BORROWED_IN_PASS = "borrowed"
    # A group left out as stuck may have found room through the preemptions: give the stuck groups.
    STUCK_GROUP_FREED = "stuck"
    # A group given only its first jobs may have had room for more: give the groups whole.
    SHORT_GROUP_GREW = "groups"
    # Only the whole queue proves the decisions.
    WHOLE_QUEUE = "whole"


# How a pass that preempts is first given the queue: stuck groups left out, reclaimed holdings split, no
# summed holding given as reclaimed, groups cut short (`Reducer.jobs_for_preemption`).
_FULLY_REDUCED: tuple[bool, bool, frozenset[tuple[int, str]], bool] = (True, True, frozenset(), True)
_HELD, _STUCK, _SHORT = "held", "stuck", "short"  # how a pass that preempts is given a group
_job_id = itemgetter(1)  # of a group's member: (queue key, job id)

GroupKey = tuple[int, Hashable]  # (share id, key within the share)


def saturation_key(job: Job) -> tuple[int, tuple[Entry, ...], int]:
    """Jobs that fit, fail and preempt alike: same share, preference list and priority."""
    return (job.share_id, job.entries, job.priority)


class Group:
    """One group's jobs in queue order, and the room they compete for (`room_class`)."""

    __slots__ = ("key", "members", "room_class")

    def __init__(self, key: GroupKey, room_class: int):
        self.key = key
        self.members: list[tuple[tuple, int]] = []
        # Groups that differ only in priority see the same room, so they are bounded and stuck alike: one
        # number names them (under STRICT_FIFO a share's queue is one group, its own class; with in-share
        # preemption a group is its own class, since its priority says whom it could preempt).
        self.room_class = room_class


class Buckets:
    """Room classes by a number (an entry's count, or a class's priority), and a count of the changes."""

    __slots__ = ("by_number", "version")

    def __init__(self) -> None:
        self.by_number: dict[int, dict[int, None]] = {}
        self.version = 0


class RunnableGroups:
    """The RUNNABLE jobs of each share, grouped, each group in queue order (SPEC 3.2)."""

    def __init__(self, *, strict_fifo: bool, by_priority: Set[int] = frozenset()):
        self.strict_fifo = strict_fifo
        # Shares whose groups of one list are bounded and stuck by priority too (in-share preemption)
        self.by_priority = by_priority
        self.groups: dict[GroupKey, list[tuple[tuple, int]]] = {}
        self.of_share: dict[int, dict[GroupKey, Group]] = {}  # share -> its groups
        # share -> bumped whenever the groups of the share, or under STRICT_FIFO its head, change
        self.generation: dict[int, int] = {}
        self._room_classes: dict[Hashable, int] = {}
        # The room classes with groups, by what could let them do something (`Reducer.unstuck_groups`; not
        # under STRICT_FIFO): share -> (type, plan) of an entry -> classes by its count, and for shares with
        # in-share preemption, share -> type of an entry on demand -> classes by their priority
        self.class_groups: dict[int, dict[GroupKey, Group]] = {}
        self.by_entry: dict[int, dict[tuple[str, str | None], Buckets]] = {}
        self.by_priority_on: dict[int, dict[str, Buckets]] = {}
        # room class -> where it is in the index
        self._places: dict[int, list[tuple[Buckets, dict[int, None]]]] = {}
        self.index_size = 0  # entries (`Buckets`) of the index

    def key(self, job: Job) -> GroupKey:
        return (job.share_id, None) if self.strict_fifo else (job.share_id, (job.entries, job.priority))

    def add(self, job: Job) -> None:
        key = self.key(job)
        members = self.groups.get(key)
        if members is None:
            # Under STRICT_FIFO a share's queue is its one group, whatever the preference lists; with in-share
            # preemption a group's priority says which of its share's jobs it could preempt.
            if self.strict_fifo or job.share_id in self.by_priority:
                class_key: Hashable = key
            else:
                class_key = (job.share_id, job.entries)
            room_class = self._room_classes.setdefault(class_key, len(self._room_classes))
            group = Group(key, room_class)
            members = self.groups[key] = group.members
            self.of_share.setdefault(job.share_id, {})[key] = group
            self._changed(job.share_id)
            if not self.strict_fifo:
                in_class = self.class_groups.get(room_class)
                if in_class is None:
                    in_class = self.class_groups[room_class] = {}
                    self._index(job, room_class, add=True)
                in_class[key] = group
        elif self.strict_fifo:
            self._changed(job.share_id)
        insort(members, (queue_key(job), job.id))

    def remove(self, job: Job) -> None:
        key = self.key(job)
        members = self.groups[key]
        del members[bisect_left(members, (queue_key(job), job.id))]
        if not members:
            del self.groups[key]
            keys = self.of_share[job.share_id]
            room_class = keys.pop(key).room_class
            if not keys:
                del self.of_share[job.share_id]
            self._changed(job.share_id)
            if not self.strict_fifo:
                in_class = self.class_groups[room_class]
                del in_class[key]
                if not in_class:
                    del self.class_groups[room_class]
                    self._index(job, room_class, add=False)
        elif self.strict_fifo:
            self._changed(job.share_id)

    def all(self) -> Iterator[Group]:
        for groups in self.of_share.values():
            yield from groups.values()

    def _index(self, job: Job, room_class: int, *, add: bool) -> None:
        """Enter a room class that got its first group in `by_entry` (and `by_priority_on`), or take out one
        that lost its last."""
        places = self._places.get(room_class)
        if places is None:
            places = self._places[room_class] = self._places_of(job)
        for buckets, classes in places:
            buckets.version += 1
            if add:
                classes[room_class] = None
            else:
                del classes[room_class]

    def _places_of(self, job: Job) -> list[tuple[Buckets, dict[int, None]]]:
        """Where in the index a class of `job`'s belongs (made as needed, kept even when empty)."""
        share_id = job.share_id
        keys = [
            (self.by_entry, (entry.instance_type, entry.training_plan), entry.instance_count)
            for entry in job.entries
        ]
        if share_id in self.by_priority:
            keys.extend(
                (self.by_priority_on, entry.instance_type, job.priority)
                for entry in job.entries
                if entry.training_plan is None
            )
        places = []
        for index, outer, inner in keys:
            of_share = index.setdefault(share_id, {})
            buckets = of_share.get(outer)
            if buckets is None:
                buckets = of_share[outer] = Buckets()
                self.index_size += 1
            places.append((buckets, buckets.by_number.setdefault(inner, {})))
        return places

    def _changed(self, share_id: int) -> None:
        self.generation[share_id] = self.generation.get(share_id, 0) + 1


class PlacedJobs:
    """The placed jobs: on-demand ones by (share, type) with their sum, so a pass can see them summed, and the
    sums over shares a pass starts from, kept as jobs come and go."""

    def __init__(self, shares: Mapping[int, Share]):
        self.shares = shares
        self.on_demand: dict[tuple[int, str], dict[int, int]] = {}  # (share, type) -> job id -> priority
        # (share, type) -> (the engine's victim key, job id, instances) of its jobs, in reclaim order
        self.in_victim_order: dict[tuple[int, str], list[tuple[tuple[int, float, int], int, int]]] = {}
        self.usage: dict[tuple[int, str], int] = {}  # (share, type) -> instances
        self.types_of: dict[int, dict[str, None]] = {}  # share -> the types it holds on demand
        self.on_plans: dict[int, None] = {}
        self.plan_usage: dict[str, int] = {}  # plan -> instances
        # Invariant B's sum per type: max(usage, reserved) over shares (reserved 0 where a share has no limit)
        self.in_use_or_reserved: dict[str, int] = {}
        self.over_limit: dict[int, int] = {}  # share -> how many of its holdings are over their limit
        self.generation: dict[int, int] = {}  # share -> bumped at every change of its on-demand usage
        # A count of changes, and per type (per plan) the count at the last change of a holding on it
        self.changes = 0
        self.type_changed: dict[str, int] = {}
        self.plan_changed: dict[str, int] = {}
        for share in shares.values():
            for instance_type, limit in share.limits.items():
                reserved = reserved_capacity(share.strategy, limit, share.lending_limits.get(instance_type))
                sums = self.in_use_or_reserved
                sums[instance_type] = sums.get(instance_type, 0) + reserved

    def add(self, job: Job) -> None:
        placement = job.placement
        if placement.training_plan is not None:
            self.on_plans[job.id] = None
            plan = placement.training_plan
            self.plan_usage[plan] = self.plan_usage.get(plan, 0) + placement.instance_count
            self.changes += 1
            self.plan_changed[plan] = self.changes
            return
        key = (job.share_id, placement.instance_type)
        holding = self.on_demand.get(key)
        if holding is None:
            holding = self.on_demand[key] = {}
            self.in_victim_order[key] = []
            self.types_of.setdefault(job.share_id, {})[placement.instance_type] = None
        holding[job.id] = job.priority
        insort(self.in_victim_order[key], (victim_key(job, placement), job.id, placement.instance_count))
        self._change(key, placement.instance_count)

    def lowest_priority(self, share_id: int, instance_type: str) -> int | None:
        """The lowest priority of the share's jobs placed on demand on the type (first in reclaim order)."""
        in_order = self.in_victim_order.get((share_id, instance_type))
        return in_order[0][0][0] if in_order else None

    def touch_plan(self, plan: str) -> None:
        """Count a change of what the plan offers (it started or stopped taking entries)."""
        self.changes += 1
        self.plan_changed[plan] = self.changes

    def remove(self, job: Job) -> None:
        placement = job.placement
        if placement.training_plan is not None:
            del self.on_plans[job.id]
            self.plan_usage[placement.training_plan] -= placement.instance_count
            self.changes += 1
            self.plan_changed[placement.training_plan] = self.changes
            return
        key = (job.share_id, placement.instance_type)
        holding = self.on_demand[key]
        del holding[job.id]
        in_order = self.in_victim_order[key]
        del in_order[bisect_left(in_order, (victim_key(job, placement), job.id))]
        self._change(key, -placement.instance_count)
        if not holding:
            del self.on_demand[key]
            del self.in_victim_order[key]
            del self.usage[key]
            types = self.types_of[job.share_id]
            del types[placement.instance_type]
            if not types:
                del self.types_of[job.share_id]

    def contribution(self, share_id: int, instance_type: str) -> int:
        """What the share's holding adds to invariant B's sum for the type: max(usage, reserved)."""
        share = self.shares[share_id]
        reserved = reserved_capacity(
            share.strategy, share.limits.get(instance_type, 0), share.lending_limits.get(instance_type)
        )
        return max(self.usage.get((share_id, instance_type), 0), reserved)

    def _change(self, key: tuple[int, str], count: int) -> None:
        share_id, instance_type = key
        before = self.usage.get(key, 0)
        contributed = self.contribution(share_id, instance_type)
        self.usage[key] = after = before + count
        self.in_use_or_reserved[instance_type] = (
            self.in_use_or_reserved.get(instance_type, 0)
            + self.contribution(share_id, instance_type)
            - contributed
        )
        limit = self.shares[share_id].limits.get(instance_type, 0)
        over = (after > limit) - (before > limit)
        if over:
            self.over_limit[share_id] = self.over_limit.get(share_id, 0) + over
        self.generation[share_id] = self.generation.get(share_id, 0) + 1
        self.changes += 1
        self.type_changed[instance_type] = self.changes


@dataclass
class ReducedSnapshot:
    """What the engine is given instead of the whole queue: jobs, and the shares and capacity left after
    folding (point 5)."""

    jobs: list[Job]
    shares: tuple[Share, ...]
    capacity: dict[str, int]


@dataclass
class ReducedSnapshotJobs(ReducedSnapshot):
    last_taken: dict[GroupKey, int]  # groups cut short -> id of the last job given to the engine
    usage: Mapping[tuple[int, str], int]  # on-demand instances per (share, type) before the pass is applied
    lowest_priority: dict[tuple[int, str], int]  # of the jobs placed on demand per (share, type)


@dataclass
class PreemptingSnapshot(ReducedSnapshot):
    summed: set[tuple[int, str]]  # (share, type) holdings given as placeholders
    stuck: list[tuple[int, tuple[Entry, ...], tuple[int, ...]]]  # (share, entries, room per entry) left out
    usage: Mapping[tuple[int, str], int]  # on-demand instances per (share, type) before the pass is applied
    split_ids: set[int]  # placeholders for the rest of a reclaimed holding
    cut_short: list[
        tuple[int, tuple[Entry, ...], int]
    ]  # (share, entries, last job given) of groups cut short


class Reducer:
    """Builds the reduced job list of a pass and judges whether the engine's decisions on it are exact."""

    # Point 1 with the real jobs of the holdings of shares with in-share preemption (the estimator's replay
    # sets it on its reducer)
    real_in_share = False

    def __init__(
        self,
        *,
        shares: Mapping[int, Share],
        capacity: Mapping[str, int],
        plans: Iterable[Plan],
        epoch: datetime,
        plan_drain_seconds: int,
    ):
        self.shares = shares
        self.capacity = capacity
        # Point 5: a share can be folded into capacity only when every type it has a limit on is offered.
        self.foldable = {
            share.id: all(instance_type in capacity for instance_type in share.limits)
            for share in shares.values()
        }
        self.in_id_order = tuple(sorted(shares.values(), key=lambda share: share.id))
        # share -> (enabled, in-share preemption, type -> its ceiling, the ceiling of a type it has no limit
        # on; None: no ceiling), for `held_at_ceiling`
        self._ceilings = {
            share.id: (
                share.enabled,
                share.in_share_preemption,
                {
                    instance_type: share_ceiling(share.strategy, limit, share.borrow_limit)
                    for instance_type, limit in share.limits.items()
                },
                share_ceiling(share.strategy, 0, share.borrow_limit),
            )
            for share in shares.values()
        }
        # share -> type offered that it has a limit on -> its reserved capacity (see `fold_idle_shares`)
        self._reserved = {
            share.id: {
                instance_type: reserved_capacity(
                    share.strategy, limit, share.lending_limits.get(instance_type)
                )
                for instance_type, limit in share.limits.items()
                if instance_type in capacity
            }
            for share in shares.values()
        }
        self.plans = {plan.name: plan for plan in plans}
        self.plan_drain_seconds = plan_drain_seconds
        # The plans an entry may be placed on in this pass (ACTIVE, not draining), set by `begin_pass`
        self.usable_plans: frozenset[str] = frozenset(self.plans)
        self.epoch = epoch
        self._placeholders: dict[tuple[int, str, int, int], Job] = {}
        self._ids: dict[tuple[int, str], int] = {}
        # share -> ((its usage generation, its groups' generation), its groups not held at its ceiling)
        self._live: dict[int, tuple[tuple[int, int], list[Group]]] = {}
        # room_class -> (`PlacedJobs.changes` when worked out, `bound`, where to look for later changes)
        self._bounds: dict[int, tuple[int, int | None, tuple]] = {}
        # (share, entry's (type, plan) or a type, by priority) -> (stamp, the classes it lets through)
        self._unstuck: dict[tuple, tuple[tuple[int, int], dict[int, None]]] = {}

    def begin_pass(self, now: datetime, placed: PlacedJobs) -> None:
        """Which plans take entries in the pass at `now` (`_room`); a plan that starts taking them or stops
        counts as a change of its holding, so bounds worked out before are worked out again."""
        usable = frozenset(
            name
            for name, plan in self.plans.items()
            if plan_is_active(plan, now) and not plan_is_draining(plan, now, self.plan_drain_seconds)
        )
        for name in usable ^ self.usable_plans:
            placed.touch_plan(name)
        self.usable_plans = usable

    def placeholder(self, share_id: int, instance_type: str, count: int, priority: int) -> Job:
        key = (share_id, instance_type, count, priority)
        job = self._placeholders.get(key)
        if job is None:
            job_id = self._ids.setdefault((share_id, instance_type), -1 - len(self._ids))
            job = self._placeholders[key] = Job(
                id=job_id,
                share_id=share_id,
                priority=priority,
                submitted_at=self.epoch,
                entries=(Entry(instance_type, count),),
                status=JobStatus.RUNNING,
                placement=Placement(instance_type, count, None, self.epoch),
            )
        return job

    def jobs(
        self,
        *,
        unfinished: Mapping[int, Job],
        placed: PlacedJobs,
        groups: RunnableGroups,
        due: set[int],
        given_per_group: Mapping[GroupKey, int],
    ) -> ReducedSnapshotJobs:
        """A pass that preempts nobody (points 1, 2 and 5): placed jobs summed, of each group the first jobs
        (as many as `bound` says, or as `given_per_group` says for groups an earlier try gave too few)."""
        jobs: list[Job] = [unfinished[job_id] for job_id in placed.on_plans]
        waiting_from = len(jobs)
        last_taken: dict[GroupKey, int] = {}
        room = self.room_in(placed)
        bounds: dict[int, int | None] = {}  # room_class -> how many of such a group to give (None: stuck)
        blocking = self.may_block_drained(unfinished=unfinished, placed=placed, groups=groups)
        # A group of one is given whole unless it is stuck: how many more could be placed is moot. The groups
        # not held at their ceiling are each judged; or, not under STRICT_FIFO and with many more groups than
        # entries in their index (`INDEX_FROM`), only the groups not stuck are found, from the index.
        ones = not groups.strict_fifo
        by_index = ones and len(groups.groups) > INDEX_FROM * groups.index_size
        if by_index:
            candidates = self.unstuck_groups(placed=placed, groups=groups, room=room)
        else:
            candidates = self.live_groups(
                unfinished=unfinished, placed=placed, groups=groups, due=due, blocking=blocking
            )
        stuck, append = self.stuck, jobs.append
        for group in candidates:
            members = group.members
            take = given_per_group.get(group.key) if given_per_group else None
            if take is None and ones and len(members) == 1:
                job_id = members[0][1]
                if job_id not in due:  # else given below, as a job that times out
                    job = unfinished[job_id]
                    if by_index or not stuck(job, room, placed):
                        append(job)
                continue
            if take is None:
                room_class = group.room_class
                if room_class in bounds:
                    take = bounds[room_class]
                else:
                    head = self.head(members, due, groups)
                    if head is None:
                        continue  # every job of it times out (given below)
                    take = bounds[room_class] = self.bound(unfinished[head], room_class, room, placed, groups)
                if take is None:
                    if group.key[0] not in blocking:
                        continue
                    take = 1  # stuck, but its head keeps a drained job of the share waiting behind it
            key = group.key
            if not due:
                jobs.extend(unfinished[job_id] for _, job_id in members[:take])
                if len(members) > take:
                    last_taken[key] = members[take - 1][1]
                continue
            taken: list[int] = []
            for index, (_, job_id) in enumerate(members):
                if job_id in due:
                    continue  # added below; it times out instead of being tried
                if len(taken) == take:
                    if any(other not in due for _, other in members[index:]):
                        last_taken[key] = taken[-1]
                    break
                jobs.append(unfinished[job_id])
                taken.append(job_id)
        jobs.extend(unfinished[job_id] for job_id in due)
        shares, capacity = self.fold_idle_shares({job.share_id for job in jobs}, placed)
        highest: dict[int, int] = {}  # share -> the highest priority of its waiting jobs given
        if self.real_in_share:
            for job in jobs[waiting_from:]:
                top = highest.get(job.share_id)
                if top is None or job.priority > top:
                    highest[job.share_id] = job.priority
        lowest_priority: dict[tuple[int, str], int] = {}
        for share in shares:
            for instance_type in placed.types_of.get(share.id, ()):
                key = (share.id, instance_type)
                lowest = 0
                # Only in-share preemption reads a victim's priority without also reading the real jobs. A
                # holding none of whose jobs ranks below a job of its share given can lose none in-share: one
                # placeholder at its lowest priority decides the same.
                if share.in_share_preemption:
                    lowest = lowest_priority[key] = placed.lowest_priority(share.id, instance_type)
                    top = highest.get(share.id)
                    if top is not None and top > lowest:
                        jobs.extend(unfinished[job_id] for job_id in placed.on_demand[key])
                        continue
                jobs.append(self.placeholder(share.id, instance_type, placed.usage[key], lowest))
        return ReducedSnapshotJobs(
            jobs=jobs,
            shares=shares,
            capacity=capacity,
            last_taken=last_taken,
            usage=placed.usage,
            lowest_priority=lowest_priority,
        )

    def bound(
        self, first: Job, room_class: int, room, placed: PlacedJobs, groups: RunnableGroups
    ) -> int | None:
        """How many jobs of groups like `first`'s a pass that preempts nobody is given (None: stuck). It
        depends only on the share's usage and invariant B's sum on the entries' types (or a plan's usage),
        so it is kept while no holding on those types (plans) changed (under STRICT_FIFO, when a share's
        queue is one group of any lists, it is worked out every pass)."""
        if not groups.strict_fifo:
            known = self._bounds.get(room_class)
            if known is not None:
                at, take, watched = known
                for changed, name in watched:
                    if changed.get(name, 0) > at:
                        break
                else:
                    return take
        take = (
            None
            if self.stuck(first, room, placed)
            else 1 + self.most_placed(first, room, strict_fifo=groups.strict_fifo)
        )
        if not groups.strict_fifo:
            watched = known[2] if known is not None else self._watched(first, placed)
            self._bounds[room_class] = (placed.changes, take, watched)
        return take

    @staticmethod
    def _watched(first: Job, placed: PlacedJobs) -> tuple:
        """Where a change of a holding (a plan) shows that a bound of groups like `first`'s may differ."""
        return tuple(
            (placed.plan_changed, entry.training_plan)
            if entry.training_plan is not None
            else (placed.type_changed, entry.instance_type)
            for entry in first.entries
        )

    def unstuck_groups(self, *, placed: PlacedJobs, groups: RunnableGroups, room) -> Iterator[Group]:
        """Not under STRICT_FIFO: the groups of enabled shares that are not `stuck`, found from what could let
        a class of them do something (`RunnableGroups.by_entry`) rather than class by class: an entry whose
        count is within its share's room on it, or, on demand, within its room under its own limit (reclaim),
        and with in-share preemption a priority above that of a job the share holds on the entry's type. A
        group held at its share's ceiling (`held_at_ceiling`) is stuck too. What each entry of the index
        lets through is kept until a holding on its type (its plan) or the classes in it change."""
        alive: dict[int, None] = {}
        known = self._unstuck
        type_changed, plan_changed = placed.type_changed, placed.plan_changed
        for share_id, by_entry in groups.by_entry.items():
            if not self.shares[share_id].enabled:
                continue
            for key, buckets in by_entry.items():
                instance_type, plan_name = key
                changed = (
                    type_changed.get(instance_type, 0)
                    if plan_name is None
                    else plan_changed.get(plan_name, 0)
                )
                stamp = (changed, buckets.version)
                found = known.get((share_id, key, False))
                if found is None or found[0] != stamp:
                    most = self.most_unstuck(share_id, Entry(instance_type, 1, plan_name), room, placed)
                    through: dict[int, None] = {}
                    for count, classes in buckets.by_number.items():
                        if count <= most:
                            through.update(classes)
                    found = known[share_id, key, False] = (stamp, through)
                alive.update(found[1])
            by_priority = groups.by_priority_on.get(share_id)
            if by_priority:
                for instance_type, buckets in by_priority.items():
                    stamp = (type_changed.get(instance_type, 0), buckets.version)
                    found = known.get((share_id, instance_type, True))
                    if found is None or found[0] != stamp:
                        through = {}
                        lowest = placed.lowest_priority(share_id, instance_type)
                        if lowest is not None:
                            for priority, classes in buckets.by_number.items():
                                if priority > lowest:
                                    through.update(classes)
                        found = known[share_id, instance_type, True] = (stamp, through)
                    alive.update(found[1])
        class_groups = groups.class_groups
        for room_class in alive:
            yield from class_groups[room_class].values()

    def most_unstuck(self, share_id: int, entry: Entry, room, placed: PlacedJobs) -> int:
        """The largest count an entry of the share on the entry's type (plan) may have and still be placed or
        reclaim in a pass that preempts nobody (`stuck`): its room, or on demand its room under its own limit,
        whichever is more. Its own count plays no part."""
        most = room(share_id, entry)
        if entry.training_plan is not None:
            return most
        instance_type = entry.instance_type
        limit = self.shares[share_id].limits.get(instance_type, 0)
        return max(most, limit - placed.usage.get((share_id, instance_type), 0))

    def live_groups(
        self,
        *,
        unfinished: Mapping[int, Job],
        placed: PlacedJobs,
        groups: RunnableGroups,
        due: Set[int] = frozenset(),
        blocking: Set[int] = frozenset(),
    ) -> Iterator[Group]:
        """The groups not held at their share's ceiling (point 2), judged by their head (`head`). Whether a
        group is held changes only with its share's usage, so each share's answer is kept until its usage or
        its groups change (under STRICT_FIFO, or its head: the first of its queue not due to time out). Shares in
        `blocking` (`may_block_drained`) have every group live."""
        usage = placed.usage
        strict = groups.strict_fifo
        for share_id, of_share in groups.of_share.items():
            if share_id in blocking:
                yield from of_share.values()
                continue
            stamp = (placed.generation.get(share_id, 0), groups.generation[share_id])
            heads = None
            if strict and due:
                heads = tuple(self.head(group.members, due, groups) for group in of_share.values())
                stamp += heads
            known = self._live.get(share_id)
            if known is None or known[0] != stamp:
                if heads is None:
                    heads = tuple(group.members[0][1] for group in of_share.values())
                live = [
                    group
                    for group, head in zip(of_share.values(), heads, strict=True)
                    if head is not None and not self.held_at_ceiling(unfinished[head], usage)
                ]
                known = self._live[share_id] = (stamp, live)
            yield from known[1]

    @staticmethod
    def head(members: list[tuple[tuple, int]], due: Set[int], groups: RunnableGroups) -> int | None:
        """The id of the job a group is judged by: any job of it (they share their share, preference list and
        priority), but under STRICT_FIFO, where a share's queue of any lists is one group, its first job not
        due to time out, the one the pass will take first. None: every job of it times out."""
        if not groups.strict_fifo or not due:
            return members[0][1]
        return next((job_id for _, job_id in members if job_id not in due), None)

    def may_block_drained(
        self, *, unfinished: Mapping[int, Job], placed: PlacedJobs, groups: RunnableGroups
    ) -> set[int]:
        """Under STRICT_FIFO, the shares with jobs on training plans: a plan that drains in the pass puts its
        job back in its share's queue, behind the share's head when that comes first, so the head must be
        given even when it can neither be placed nor preempt (it holds the drained job where it is)."""
        if not groups.strict_fifo:
            return set()
        return {unfinished[job_id].share_id for job_id in placed.on_plans}

    def may_borrow(
        self, *, unfinished: Mapping[int, Job], placed: PlacedJobs, groups: RunnableGroups
    ) -> frozenset[tuple[int, str]]:
        """The summed holdings that may go over their limit in a pass: the share may borrow on the type and
        has a waiting job with an entry on it."""
        found = set()
        for share_id, of_share in groups.of_share.items():
            share = self.shares[share_id]
            if share.in_share_preemption or not share.enabled:
                continue
            ceilings, unlisted = self._ceilings[share_id][2:]
            for instance_type in placed.types_of.get(share_id, ()):
                limit = share.limits.get(instance_type, 0)
                ceiling = ceilings.get(instance_type, unlisted)
                if placed.usage[share_id, instance_type] > limit or (
                    ceiling is not None and ceiling <= limit
                ):
                    continue
                if any(
                    entry.instance_type == instance_type and entry.training_plan is None
                    for group in of_share.values()
                    for entry in unfinished[group.members[0][1]].entries
                ):
                    found.add((share_id, instance_type))
        return frozenset(found)

    def fold_idle_shares(
        self, active: set[int], placed: PlacedJobs
    ) -> tuple[tuple[Share, ...], dict[str, int]]:
        """Point 5: the shares the engine is given, and each type's capacity once the others are folded."""
        kept = tuple(
            share
            for share in self.in_id_order
            if share.id in active or placed.over_limit.get(share.id) or not self.foldable[share.id]
        )
        capacity = {
            instance_type: total - placed.in_use_or_reserved.get(instance_type, 0)
            for instance_type, total in self.capacity.items()
        }
        usage = placed.usage
        for share in kept:
            share_id = share.id
            reserved = self._reserved[share_id]
            for instance_type, kept_back in reserved.items():
                capacity[instance_type] += max(usage.get((share_id, instance_type), 0), kept_back)
            for instance_type in placed.types_of.get(share_id, ()):
                if instance_type not in reserved and instance_type in capacity:
                    capacity[instance_type] += usage[share_id, instance_type]
        return kept, capacity

    def most_placed(self, first: Job, room, *, strict_fifo: bool) -> int:
        """How many jobs of `first`'s group a pass that preempts nobody can place at most. A group is one
        preference list, so per entry its room over its count; under STRICT_FIFO it is a whole share queue of
        any lists, and each placement takes at least one instance of the room on some type or plan."""
        if not strict_fifo:
            return sum(room(first.share_id, entry) // entry.instance_count for entry in first.entries)
        on_demand = sum(room(first.share_id, Entry(instance_type, 1)) for instance_type in self.capacity)
        on_plans = sum(room(first.share_id, Entry("", 1, plan)) for plan in self.plans)
        return on_demand + on_plans

    def room_in(self, placed: PlacedJobs):
        """room(share, entry): at most the instances the share can still place on the entry in a pass that
        preempts nobody; each placement on the entry takes at least its count from it."""
        rooms: dict[tuple[int, str, str | None], int] = {}

        def room(share_id: int, entry: Entry) -> int:
            key = (share_id, entry.instance_type, entry.training_plan)
            found = rooms.get(key)
            if found is None:
                found = rooms[key] = max(0, self._room(share_id, entry, placed))
            return found

        return room

    def _room(self, share_id: int, entry: Entry, placed: PlacedJobs) -> int:
        plan_name = entry.training_plan
        if plan_name is not None:
            # No entry fits a plan that is not ACTIVE, drains, or is closed to the share (SPEC 3.3).
            plan = self.plans.get(plan_name)
            if plan is None or plan_name not in self.usable_plans or not plan_open_to_share(plan, share_id):
                return 0
            return plan.instance_count - placed.plan_usage.get(plan_name, 0)
        share = self.shares[share_id]
        instance_type = entry.instance_type
        used = placed.usage.get((share_id, instance_type), 0)
        limit = share.limits.get(instance_type, 0)
        reserved = reserved_capacity(share.strategy, limit, share.lending_limits.get(instance_type))
        # Invariant B: placing within what a share reserves commits nothing more.
        lendable = (
            self.capacity.get(instance_type, 0)
            - placed.in_use_or_reserved.get(instance_type, 0)
            + max(0, reserved - used)
        )
        ceiling = share_ceiling(share.strategy, limit, share.borrow_limit)
        return lendable if ceiling is None else min(lendable, ceiling - used)

    def jobs_for_preemption(
        self,
        *,
        unfinished: Mapping[int, Job],
        placed: PlacedJobs,
        groups: RunnableGroups,
        due: set[int],
        leave_out_stuck: bool,
        split: bool = True,
        borrowing: frozenset[tuple[int, str]] = frozenset(),
        cut_groups: bool = True,
    ) -> PreemptingSnapshot:
        """A pass that preempts (point 3): the jobs, the (share, type) holdings given as placeholders, and
        the groups left out as stuck, with what `preemption_verdict` needs to know that they stayed stuck."""
        included = set(due)
        room = self.room_in(placed)
        stuck: list[tuple[int, tuple[Entry, ...], tuple[int, ...]]] = []
        # (room_class, a group of one) -> whether such a group is held, stuck, or cut short (with how many to
        # give), or None; a group of one needs no bound, only whether it is stuck
        kinds: dict[tuple[int, bool], tuple[str, int] | None] = {}
        stuck_classes: set[int] = set()
        cut_short: list[tuple[int, tuple[Entry, ...], int]] = []
        strict_due = groups.strict_fifo and bool(due)
        blocking = self.may_block_drained(unfinished=unfinished, placed=placed, groups=groups)
        for group in groups.all():
            members = group.members
            room_class = group.room_class
            if group.key[0] in blocking:
                included.update(map(_job_id, members))  # as the whole queue gives it: see may_block_drained
                continue
            kind_key = (room_class, len(members) == 1 and not groups.strict_fifo)
            head = self.head(members, due, groups) if strict_due else members[0][1]
            if head is None:
                continue  # every job of it times out (given above)
            if kind_key in kinds:
                kind = kinds[kind_key]
            else:
                first = unfinished[head]
                kind = kinds[kind_key] = self._preempting_kind(
                    first,
                    room_class,
                    room,
                    placed,
                    groups,
                    leave_out_stuck=leave_out_stuck,
                    cut_groups=cut_groups,
                    one=kind_key[1],
                )
                if kind is not None and kind[0] == _STUCK and room_class not in stuck_classes:
                    stuck_classes.add(room_class)
                    rooms = tuple(room(first.share_id, entry) for entry in first.entries)
                    stuck.append((first.share_id, first.entries, rooms))
            if kind is None:
                included.update(map(_job_id, members))
            elif kind[0] == _SHORT:
                last = self._take_first(members, kind[1], due, included)
                if last is not None:
                    first = unfinished[head]
                    cut_short.append((first.share_id, first.entries, last))
        jobs = [unfinished[job_id] for job_id in included]
        jobs.extend(unfinished[job_id] for job_id in placed.on_plans)
        shares, capacity = self.fold_idle_shares({job.share_id for job in jobs}, placed)
        # Point 3: reclaimed holdings are cut to the front of their type's reclaim order, unless an in-share
        # victim could be looked for after reclaim (which would come after the placeholders).
        cut = split and not any(share.in_share_preemption for share in shares)
        summed: set[tuple[int, str]] = set()
        reclaimed: dict[str, list[tuple[int, str]]] = {}  # type -> holdings over their limit
        for share in shares:
            for instance_type in placed.types_of.get(share.id, ()):
                key = (share.id, instance_type)
                over = placed.usage[key] > share.limits.get(instance_type, 0) or key in borrowing
                if share.in_share_preemption or (over and not cut):
                    jobs.extend(unfinished[job_id] for job_id in placed.on_demand[key])
                elif over:
                    reclaimed.setdefault(instance_type, []).append(key)
                else:
                    summed.add(key)
                    jobs.append(self.placeholder(share.id, instance_type, placed.usage[key], 0))
        split_ids: set[int] = set()
        if reclaimed:
            reach = self.reclaim_reach(jobs, shares, placed, reclaimed)
            for instance_type, keys in reclaimed.items():
                front = self.reclaim_front(
                    instance_type, keys, reach.get(instance_type, 0), unfinished, placed, split_ids
                )
                jobs.extend(front)
        return PreemptingSnapshot(
            jobs=jobs,
            shares=shares,
            capacity=capacity,
            summed=summed,
            stuck=stuck,
            usage=placed.usage,
            split_ids=split_ids,
            cut_short=cut_short,
        )

    def _preempting_kind(
        self,
        first: Job,
        room_class: int,
        room,
        placed: PlacedJobs,
        groups: RunnableGroups,
        *,
        leave_out_stuck: bool,
        cut_groups: bool,
        one: bool = False,
    ) -> tuple[str, int] | None:
        """How a pass that preempts is given the groups like `first`'s: left out as held at their ceiling
        (RESERVE or LEND) or stuck, cut short to their first jobs, or (None) whole. `one`: for groups of one
        job, whose bound is moot (given one, the group is given whole)."""
        if self.shares[first.share_id].strategy != Strategy.LEND_AND_BORROW and self.held_at_ceiling(
            first, placed.usage
        ):
            return (_HELD, 0)
        if not leave_out_stuck and not cut_groups:
            return None  # given whole whatever its bound
        # None: stuck, and then at most 0 placed
        if one:
            take = None if self.stuck(first, room, placed) else 1
        else:
            take = self.bound(first, room_class, room, placed, groups)
        if take is None and leave_out_stuck:
            return (_STUCK, 0)
        if cut_groups and not groups.strict_fifo and self.cannot_reclaim(first, placed.usage):
            return (_SHORT, 1 if take is None else take)
        return None

    @staticmethod
    def _take_first(members, take: int, due: set[int], included: set[int]) -> int | None:
        """Add the first `take` members not due to time out; the id of the last one when some are left."""
        taken = 0
        last = None
        for _, job_id in members:
            if job_id in due:
                continue
            if taken == take:
                return last
            included.add(job_id)
            taken += 1
            last = job_id
        return None

    def cannot_reclaim(self, job: Job, usage: Mapping[tuple[int, str], int]) -> bool:
        """No job of this group can preempt at the start of the pass: every entry is on demand and would leave
        its share above its own limit, and the share has no in-share preemption."""
        share = self.shares[job.share_id]
        if share.in_share_preemption:
            return False
        for entry in job.entries:
            if entry.training_plan is not None:
                return False
            used = usage.get((share.id, entry.instance_type), 0)
            if used + entry.instance_count <= share.limits.get(entry.instance_type, 0):
                return False
        return True

    def reclaim_reach(
        self,
        jobs: list[Job],
        shares: tuple[Share, ...],
        placed: PlacedJobs,
        reclaimed: Mapping[str, list[tuple[int, str]]],
    ) -> dict[str, int]:
        """Per reclaimed type, how many instances the pass's reclaim is expected to need at most: a share
        reclaims only to end within its own limit, so at most its room under that limit, and at most what
        its jobs of the pass ask for on the type."""
        asked: dict[tuple[int, str], int] = {}
        for job in jobs:
            for entry in job.entries:
                if entry.training_plan is None and entry.instance_type in reclaimed:
                    key = (job.share_id, entry.instance_type)
                    asked[key] = asked.get(key, 0) + entry.instance_count
        reach: dict[str, int] = {}
        for (share_id, instance_type), count in asked.items():
            room = self.shares[share_id].limits.get(instance_type, 0) - placed.usage.get(
                (share_id, instance_type), 0
            )
            if room > 0:
                reach[instance_type] = reach.get(instance_type, 0) + min(room, count)
        return reach

    def reclaim_front(
        self,
        instance_type: str,
        keys: list[tuple[int, str]],
        reach: int,
        unfinished: Mapping[int, Job],
        placed: PlacedJobs,
        split_ids: set[int],
    ) -> list[Job]:
        """The real jobs of the holdings over their limit on the type that come first in the engine's reclaim
        order, until they offer `reach` instances to reclaim (a share's jobs count while what is taken from it
        leaves it over its limit), and per holding one placeholder for the rest, after all of them in that
        order (point 3)."""
        front: list[Job] = []
        taken: dict[tuple[int, str], int] = {key: 0 for key in keys}
        over = {key: placed.usage[key] - self.shares[key[0]].limits.get(instance_type, 0) for key in keys}
        offered = 0
        if reach > 0:
            orders = [self._in_order(placed.in_victim_order[key], key) for key in keys]
            for _, job_id, count, key in heapq.merge(*orders):
                front.append(unfinished[job_id])
                if taken[key] < over[key]:
                    offered += count
                taken[key] += count
                if offered >= reach:
                    break
        # After every real job of the type's reclaimed holdings in reclaim order: a higher priority.
        last = 1 + max(placed.in_victim_order[key][-1][0][0] for key in keys)
        for key in keys:
            rest = placed.usage[key] - taken[key]
            if rest:
                placeholder = self.placeholder(key[0], instance_type, rest, last)
                split_ids.add(placeholder.id)
                front.append(placeholder)
        return front

    @staticmethod
    def _in_order(in_order, key):
        for victim, job_id, count in in_order:
            yield victim, job_id, count, key

    def preemption_verdict(
        self, decisions: Decisions, preempting: PreemptingSnapshot
    ) -> tuple[Verdict, set[tuple[int, str]]]:
        """EXACT unless a placeholder was named (RECLAIM_PAST_FRONT when it stood for a reclaimed holding's
        rest: the pass is run again with its real jobs; else WHOLE_QUEUE), a summed holding went over its
        limit, so reclaimable (BORROWED_IN_PASS, with those holdings: the pass is run again with them as
        reclaimed holdings), a group left out as stuck may have come unstuck (STUCK_GROUP_FREED), or a group
        cut short may have grown (SHORT_GROUP_GREW)."""
        named = [p.job_id for p in decisions.preemptions if p.job_id < 0]
        if preempting.split_ids and (
            any(job_id in preempting.split_ids for job_id in named)
            or any(p.kind == PreemptionKind.LIMIT_REDUCED for p in decisions.preemptions)
        ):
            return Verdict.RECLAIM_PAST_FRONT, set()
        borrowed = {
            (admission.share_id, admission.instance_type)
            for admission in decisions.admissions
            if admission.training_plan is None
            and admission.borrowed
            and (admission.share_id, admission.instance_type) in preempting.summed
        }
        if borrowed:
            return Verdict.BORROWED_IN_PASS, borrowed
        if named or any(d.job_id < 0 for d in decisions.drains):
            return Verdict.WHOLE_QUEUE, set()
        if not preempting.stuck and not preempting.cut_short:
            return Verdict.EXACT, set()
        freed, taken = self.released(decisions)
        if preempting.stuck and not self.stayed_stuck(preempting, freed, taken):
            return Verdict.STUCK_GROUP_FREED, set()
        if preempting.cut_short and not self.stayed_short(decisions, preempting, freed, taken):
            return Verdict.SHORT_GROUP_GREW, set()
        return Verdict.EXACT, set()

    def released(self, decisions: Decisions) -> tuple[dict[str, int], dict[tuple[int, str], int]]:
        """What a pass that preempts freed per type beyond its preemptors' placements (see `stayed_stuck`),
        and the instances it took from each (share, type)."""
        placed = {admission.job_id: admission for admission in decisions.admissions}
        released: dict[int | None, dict[str, int]] = {}  # preemptor -> type -> instances of its victims
        taken: dict[tuple[int, str], int] = {}
        for preemption in decisions.preemptions:
            instance_type = preemption.instance_type
            by_type = released.setdefault(preemption.preemptor_job_id, {})
            by_type[instance_type] = by_type.get(instance_type, 0) + preemption.instances
            key = (preemption.share_id, instance_type)
            taken[key] = taken.get(key, 0) + preemption.instances
        freed: dict[str, int] = {}
        for preemptor, by_type in released.items():
            admission = placed.get(preemptor) if preemptor is not None else None
            for instance_type, instances in by_type.items():
                if (
                    admission is not None
                    and admission.training_plan is None
                    and admission.instance_type == instance_type
                    and self.shares[admission.share_id].strategy != Strategy.RESERVE
                ):
                    instances -= admission.instance_count
                freed[instance_type] = freed.get(instance_type, 0) + max(0, instances)
        for drain in decisions.drains:
            freed[drain.instance_type] = freed.get(drain.instance_type, 0) + drain.instances
        return freed, taken

    def stayed_stuck(
        self,
        preempting: PreemptingSnapshot,
        freed: Mapping[str, int],
        taken: Mapping[tuple[int, str], int],
    ) -> bool:
        """Point 3: a group stuck when the pass starts (see `stuck`) stays stuck through a pass that preempts
        when, on each of its entries, its room then plus what the pass freed on the type (plus, under a borrow
        limit, what it took from the share) is still less than the entry's count, and its share's usage less
        what the pass took from it still leaves no room under its own limit (reclaim stays out of reach). A
        release of n instances adds at most n to anybody's room, and a preemptor is placed as soon as its
        victims are gone, taking its count back unless its share is RESERVE (which may have held that room
        already), so the lendable room of any moment is at most the room at the start plus, over the
        preemptions made so far, what their victims freed beyond their preemptor's placement; room under a
        borrow limit grows only by what is taken from the share. A plan's room never grows in a pass (nobody
        preempts on a plan, and a plan that drains takes no entries), and in-share preemption needs a job of
        lower priority placed before the pass, which no preemption adds. Then no job of the group is placed
        or preempts at any point of the pass, with or without it in the snapshot, and leaving the group out
        changes nothing."""
        for share_id, entries, rooms in preempting.stuck:
            share = self.shares[share_id]
            for entry, room in zip(entries, rooms, strict=True):
                if entry.training_plan is not None:
                    continue
                instance_type, count = entry.instance_type, entry.instance_count
                took = taken.get((share_id, instance_type), 0)
                limit = share.limits.get(instance_type, 0)
                capped = share_ceiling(share.strategy, limit, share.borrow_limit) is not None
                under_ceiling = took if capped else 0
                if room + freed.get(instance_type, 0) + under_ceiling >= count:
                    return False
                if preempting.usage.get((share_id, instance_type), 0) - took + count <= limit:
                    return False
        return True

    def stayed_short(
        self,
        decisions: Decisions,
        preempting: PreemptingSnapshot,
        freed: Mapping[str, int],
        taken: Mapping[tuple[int, str], int],
    ) -> bool:
        """Point 3: a group none of whose jobs can preempt when the pass starts (`cannot_reclaim`) was given
        only its first jobs, as many as can be placed at most plus one (`most_placed`). It decides what the
        whole group decides when its last job given was not placed, none of its jobs could preempt through
        the pass (its share's usage less what the pass took from it still above its own limit on every
        entry), and its room never grew: nothing was freed on its types beyond what the preemptors took back
        (see `stayed_stuck`), nor, under a borrow limit, taken from its share. Room then only shrinks while
        the pass runs, so the jobs after the last one given, tried later, fail as it did, without side
        effects, and the sweep after the preemptions finds no room for them either."""
        placed = {admission.job_id for admission in decisions.admissions}
        for share_id, entries, last in preempting.cut_short:
            if last in placed:
                return False
            share = self.shares[share_id]
            for entry in entries:
                instance_type, count = entry.instance_type, entry.instance_count
                took = taken.get((share_id, instance_type), 0)
                limit = share.limits.get(instance_type, 0)
                capped = share_ceiling(share.strategy, limit, share.borrow_limit) is not None
                if freed.get(instance_type, 0) or (took and capped):
                    return False
                if preempting.usage.get((share_id, instance_type), 0) - took + count <= limit:
                    return False
        return True

    def held_at_ceiling(self, job: Job, usage: Mapping[tuple[int, str], int]) -> bool:
        """No job of this group can be placed or preempt in a pass that preempts nobody: every entry is on
        demand, over the share's ceiling already (usage only grows), and the share has no in-share preemption.
        Such a job could not reclaim either: reclaim needs the share to end within its own limit."""
        share_id = job.share_id
        enabled, in_share, ceilings, unlisted = self._ceilings[share_id]
        if not enabled:
            return True
        if in_share:
            return False
        for entry in job.entries:
            if entry.training_plan is not None:
                return False
            ceiling = ceilings.get(entry.instance_type, unlisted)
            if (
                ceiling is None
                or usage.get((share_id, entry.instance_type), 0) + entry.instance_count <= ceiling
            ):
                return False
        return True

    def stuck(self, job: Job, room, placed: PlacedJobs) -> bool:
        """No job of this group can be placed or preempt in a pass that preempts nobody: no entry has room
        now (room only shrinks, a plan's too: nobody preempts on a plan), and each entry on demand would leave
        the share above its own limit (its usage only grows), so reclaim cannot help, nor in-share preemption:
        the share holds no job of lower priority on the type (a pass's victims are jobs placed before it).
        `held_at_ceiling` is the case that depends on the share's usage alone."""
        share_id = job.share_id
        in_share = self.shares[share_id].in_share_preemption
        for entry in job.entries:
            if entry.instance_count <= self.most_unstuck(share_id, entry, room, placed):
                return False
            if in_share and entry.training_plan is None:
                lowest = placed.lowest_priority(share_id, entry.instance_type)
                if lowest is not None and lowest < job.priority:
                    return False
        return True

    def verdict(
        self,
        decisions: Decisions,
        reduced: ReducedSnapshotJobs,
        *,
        unfinished: Mapping[int, Job],
        groups: RunnableGroups,
    ) -> tuple[bool, dict[GroupKey, int] | None]:
        """(exact, give_more): exact when the decisions are those of the whole snapshot; else the groups cut
        too short with how many of their jobs to give next time, or None to run the whole snapshot."""
        if decisions.preemptions or any(drain.job_id < 0 for drain in decisions.drains):
            return False, None
        if not reduced.last_taken:
            return True, {}
        placed_now = {admission.job_id for admission in decisions.admissions}
        usage_after = dict(reduced.usage)
        admitted_by_share: dict[int, list[tuple[tuple, str, int]]] = {}
        for admission in decisions.admissions:
            if admission.training_plan is None:
                key = (admission.share_id, admission.instance_type)
                usage_after[key] = usage_after.get(key, 0) + admission.instance_count
                admitted_by_share.setdefault(admission.share_id, []).append(
                    (
                        queue_key(unfinished[admission.job_id]),
                        admission.instance_type,
                        admission.instance_count,
                    )
                )
        reclaimable_types = {
            instance_type
            for (share_id, instance_type), used in usage_after.items()
            if used > self.shares[share_id].limits.get(instance_type, 0)
            and reduced.usage.get((share_id, instance_type), 0) > 0
        }
        give_more: dict[GroupKey, int] = {}
        for key, last_id in reduced.last_taken.items():
            share_id = key[0]
            share = self.shares[share_id]
            if not share.enabled:
                continue
            members = groups.groups[key]
            if last_id in placed_now:
                taken = 1 + next(i for i, (_, job_id) in enumerate(members) if job_id == last_id)
                give_more[key] = taken * GROWTH
                continue
            if groups.strict_fifo:
                continue
            last = unfinished[last_id]
            if self._later_could_preempt(
                last,
                share,
                reclaimable_types,
                reduced.usage,
                admitted_by_share.get(share_id, ()),
                reduced.lowest_priority,
            ):
                give_more[key] = len(members)
        return (not give_more), give_more

    @staticmethod
    def _later_could_preempt(
        last, share, reclaimable_types, usage_before, admitted, in_share_priorities
    ) -> bool:
        """Could a job of `last`'s group tried after it preempt anyone (see the module docstring, point 2)?"""
        position = queue_key(last)
        for entry in last.entries:
            if entry.training_plan is not None:
                continue
            instance_type = entry.instance_type
            lowest = in_share_priorities.get((share.id, instance_type))
            if share.in_share_preemption and lowest is not None and lowest < last.priority:
                return True
            if instance_type in reclaimable_types:
                used = usage_before.get((share.id, instance_type), 0) + sum(
                    count for key, type_, count in admitted if type_ == instance_type and key < position
                )
                if used + entry.instance_count <= share.limits.get(instance_type, 0):
                    return True
        return False


def shortcuts_cover(config: Configuration) -> bool:
    """Whether the proofs above hold for a configuration. Lending limits only change reserved(S,T), which
    every proof reads through invariant B's sum. FAIR_SHARE orders over-limit heads by borrowing against
    the queue's lendable capacity, which folding shares into capacity (point 5) changes; a protection from
    early preemption lets a pass preempt once time alone has passed, which skipping passes (point 4) and
    placeholders at their lowest priority (points 1 and 3) do not see. With either, the replay runs whole."""
    return (
        config.idle_capacity_assignment == IdleCapacityAssignment.FIFO
        and config.preemption_min_runtime_seconds == 0
    )


class WholeQueue(Protocol):
    """The plain replay the shortcuts fall back to (`simulation.WholeQueueDecider`), named by what it offers:
    the simulation imports this module, not the other way round."""

    schedule: Callable[[Snapshot], Decisions]
    snapshots: Any  # `simulation.Snapshots`: `whole(now)` and `of(now, jobs, reduced)`
    stats: Any  # `simulation.ReplayStats`

    def decide(self, index: int, now: float) -> Decisions: ...


class ShortcutDecider:
    """A pass decided on the smallest snapshot that provably decides what the whole queue decides (points 1-3
    and 5), and on the whole queue (`whole`, the plain replay) where no proof holds."""

    # A pass that preempts starts from the retries the last one needed and with the holdings that may borrow
    # given as reclaimable (off: from the most reduced, to test each retry on every pass)
    carry_preempting_start = True

    def __init__(
        self,
        whole: WholeQueue,
        reducer: Reducer,
        *,
        unfinished: Mapping[int, Job],
        placed: PlacedJobs,
        groups: RunnableGroups,
        timeout_watch: set[int],
        verify: bool,
        settling: Set[int] = frozenset(),
        relocatable: Set[int] = frozenset(),
        graceful_stops: bool = False,
    ):
        self.whole = whole
        self.settling = settling
        # Running jobs that may be relocated (SPEC 3.6): no proof above covers a move, so while there are
        # any, every pass is the whole queue's.
        self.relocatable = relocatable
        self.graceful_stops = graceful_stops
        self.reducer = reducer
        self.unfinished = unfinished
        self.placed = placed
        self.groups = groups
        self.timeout_watch = timeout_watch
        self.verify = verify
        self.stats = whole.stats
        # What the last pass that preempted needed (`decide_reduced`): the next one starts from it.
        self.preempting_start: tuple[bool, bool, frozenset[tuple[int, str]], bool] = _FULLY_REDUCED

    def decide(self, index: int, now: float) -> Decisions:
        decisions = None if self.settling or self.relocatable else self.decide_reduced(now)
        if decisions is None:
            return self.whole.decide(index, now)
        if self.verify:
            difference = same_decisions(decisions, self.whole.schedule(self.whole.snapshots.whole(now)))
            if difference is not None:
                raise AssertionError(f"shortcut changed pass {index} at {now}: {difference}")
        return decisions

    def decide_reduced(self, now: float) -> Decisions | None:
        """Points 1, 2 and 5, then for a pass that preempts point 3; None when only the whole queue does."""
        moment = to_datetime(now)
        self.reducer.begin_pass(moment, self.placed)
        due = {job_id for job_id in self.timeout_watch if pending_too_long(self.unfinished[job_id], moment)}
        snapshot_of, schedule, stats = self.whole.snapshots.of, self.whole.schedule, self.stats
        given_per_group: dict[GroupKey, int] = {}
        for _ in range(MAX_ATTEMPTS):
            reduced = self.reducer.jobs(
                unfinished=self.unfinished,
                placed=self.placed,
                groups=self.groups,
                due=due,
                given_per_group=given_per_group,
            )
            decisions = schedule(snapshot_of(now, reduced.jobs, reduced))
            exact, give_more = self.reducer.verdict(
                decisions, reduced, unfinished=self.unfinished, groups=self.groups
            )
            if exact:
                stats.passes_reduced += 1
                return decisions
            stats.reduced_retries += 1
            if give_more is None:
                break
            given_per_group.update(give_more)
        else:
            return None
        if self.graceful_stops:  # point 6: a pass that preempts, with victims that may stop gracefully
            return None
        # Each retry below gives more of the queue than the try before it, and each try's decisions are
        # judged on their own; so a pass may as well start where the last pass that preempted ended: a busy
        # queue's passes that preempt mostly need the same retries, each a run of the engine on most of it.
        leave_out_stuck, split, borrowing, cut_groups = (
            self.preempting_start if self.carry_preempting_start else _FULLY_REDUCED
        )
        if self.carry_preempting_start:
            borrowing = borrowing | self.reducer.may_borrow(
                unfinished=self.unfinished, placed=self.placed, groups=self.groups
            )
        while True:
            preempting = self.reducer.jobs_for_preemption(
                unfinished=self.unfinished,
                placed=self.placed,
                groups=self.groups,
                due=due,
                leave_out_stuck=leave_out_stuck,
                split=split,
                borrowing=borrowing,
                cut_groups=cut_groups,
            )
            decisions = schedule(snapshot_of(now, preempting.jobs, preempting))
            verdict, borrowed = self.reducer.preemption_verdict(decisions, preempting)
            if verdict == Verdict.EXACT:
                stats.passes_preempting += 1
                self.preempting_start = (leave_out_stuck, split, borrowing, cut_groups)
                return decisions
            retries = stats.preempting_retries
            retries[verdict.value] = retries.get(verdict.value, 0) + 1
            if verdict == Verdict.RECLAIM_PAST_FRONT:
                split = False
            elif verdict == Verdict.BORROWED_IN_PASS:
                borrowing |= borrowed
            elif verdict == Verdict.SHORT_GROUP_GREW:
                cut_groups = False
            elif preempting.stuck:  # STUCK_GROUP_FREED, or WHOLE_QUEUE with stuck groups left out: them first
                leave_out_stuck = False
            else:
                return None
            stats.reduced_retries += 1


def same_decisions(left: Decisions, right: Decisions) -> str | None:
    """None when two passes decided the same; else what differs (for `verify_shortcuts`)."""
    views = (
        (
            "admissions",
            lambda d: [
                (a.job_id, a.entry_index, a.instance_type, a.instance_count, a.training_plan, a.borrowed)
                for a in d.admissions
            ],
        ),
        ("preemptions", lambda d: [(p.job_id, p.kind, p.preemptor_job_id, p.fails) for p in d.preemptions]),
        ("drains", lambda d: [d_.job_id for d_ in d.drains]),
        ("timeouts", lambda d: sorted(t.job_id for t in d.timeouts)),
    )
    for name, view in views:
        if view(left) != view(right):
            return f"{name}: {view(left)} != {view(right)}"
    return None
