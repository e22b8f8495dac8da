"""A pass that preempts nobody, given a smaller snapshot than the whole queue:

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
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Set
from dataclasses import dataclass

from engine import (
    Decisions,
    Entry,
    Job,
)
from engine.order import queue_key

from .groups import Group, GroupKey, RunnableGroups
from .holdings import PlacedJobs
from .rooms import ReducedSnapshot, Rooms

GROWTH = 4
# A pass finds the groups not stuck from their index when they outnumber its entries this many times over:
# each entry costs about as much to read again as a group to judge (their results are kept alike).
INDEX_FROM = 4


@dataclass
class ReducedSnapshotJobs(ReducedSnapshot):
    last_taken: dict[GroupKey, int]  # groups cut short -> id of the last job given to the engine
    usage: Mapping[tuple[int, str], int]  # on-demand instances per (share, type) before the pass is applied
    lowest_priority: dict[tuple[int, str], int]  # of the jobs placed on demand per (share, type)


class QuietPass(Rooms):
    """Points 1 and 2: the jobs of a pass that preempts nobody, and whether its decisions are the whole
    queue's."""

    # Point 1 with the real jobs of the holdings of shares with in-share preemption (the estimator's replay
    # sets it on its reducer)
    real_in_share = False

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
