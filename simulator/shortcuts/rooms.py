"""What room a share has in a pass that preempts nobody, which groups can do nothing in it (stuck, or held
at their share's ceiling: point 2 of `simulator.shortcuts`), and the shares folded into capacity:

5. **Shares with nothing to do are folded into capacity.** A share none of whose jobs the pass is given (no
   waiting job, no job on a plan) and that is within its limit on every type can neither place nor lose a job
   in the pass: it has nothing to place, so its usage stays within its limits and no reclaim takes from it,
   and in-share preemption needs its own waiting job. What it does to the others is its part of invariant
   B's sum, max(usage, reserved) per type, so the engine is given the other shares and, per type, capacity
   less that part: every fit and victim search sees the same room. (Invariant A cannot break by it: the
   other shares' usage plus the folded share's part is at most invariant B's sum, within capacity.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from datetime import datetime

from engine import (
    Entry,
    Job,
    JobStatus,
    Placement,
    Plan,
    Share,
)
from engine.ceilings import reserved_capacity, share_ceiling
from engine.fit import plan_is_active, plan_is_draining, plan_open_to_share

from .groups import Group, RunnableGroups
from .holdings import PlacedJobs


@dataclass
class ReducedSnapshot:
    """What the engine is given instead of the whole queue: jobs, and the shares and capacity left after
    folding (point 5)."""

    jobs: list[Job]
    shares: tuple[Share, ...]
    capacity: dict[str, int]


class Rooms:
    """The configuration a reducer judges by (shares, their ceilings, capacity, plans) and what it reads of a
    pass's room from it."""

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
            # No entry fits a plan that is not ACTIVE, drains, or is closed to the share
            # (behaviour.md#preference-evaluation).
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

    def most_placed(self, first: Job, room, *, strict_fifo: bool) -> int:
        """How many jobs of `first`'s group a pass that preempts nobody can place at most. A group is one
        preference list, so per entry its room over its count; under STRICT_FIFO it is a whole share queue of
        any lists, and each placement takes at least one instance of the room on some type or plan."""
        if not strict_fifo:
            return sum(room(first.share_id, entry) // entry.instance_count for entry in first.entries)
        on_demand = sum(room(first.share_id, Entry(instance_type, 1)) for instance_type in self.capacity)
        on_plans = sum(room(first.share_id, Entry("", 1, plan)) for plan in self.plans)
        return on_demand + on_plans

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
