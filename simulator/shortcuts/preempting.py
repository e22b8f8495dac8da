"""A pass that preempts:

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
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from operator import itemgetter

from engine import (
    Decisions,
    Entry,
    Job,
    PreemptionKind,
    Share,
    Strategy,
)
from engine.ceilings import share_ceiling

from .groups import RunnableGroups
from .holdings import PlacedJobs
from .quiet import QuietPass
from .rooms import ReducedSnapshot


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
FULLY_REDUCED: tuple[bool, bool, frozenset[tuple[int, str]], bool] = (True, True, frozenset(), True)
_HELD, _STUCK, _SHORT = "held", "stuck", "short"  # how a pass that preempts is given a group
_job_id = itemgetter(1)  # of a group's member: (queue key, job id)


@dataclass
class PreemptingSnapshot(ReducedSnapshot):
    summed: set[tuple[int, str]]  # (share, type) holdings given as placeholders
    stuck: list[tuple[int, tuple[Entry, ...], tuple[int, ...]]]  # (share, entries, room per entry) left out
    usage: Mapping[tuple[int, str], int]  # on-demand instances per (share, type) before the pass is applied
    split_ids: set[int]  # placeholders for the rest of a reclaimed holding
    cut_short: list[
        tuple[int, tuple[Entry, ...], int]
    ]  # (share, entries, last job given) of groups cut short


class PreemptingPass(QuietPass):
    """Point 3: the jobs of a pass that preempts, and whether its decisions are the whole queue's."""

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
