"""Preemption (SPEC 3.4): choose the fewest victims that make room for an on-demand entry, then stop them.

As in Kueue's preemptor, candidates are taken in victim order until the entry fits, then every victim whose
return still lets it fit is put back, newest first, so a large low-priority job is not evicted when a smaller
one suffices. Also as in Kueue, a victim set is chosen in one of two stages whose share rule is fixed:

- reclaim (and in-share) ending within the share's own limit: borrowers' jobs first, then its own;
- in-share only, ending within what the share may borrow (a share never reclaims in order to borrow).

A share whose entry fits its own quota tries the first stage; one that would otherwise be borrowing tries the
second first, so a share borrowing far above its limit gives up one lower-priority job to place a small one,
rather than as many as it takes to come back within its limit.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from itertools import chain

from . import messages
from .capacity import Holding, WorkingState, victim_key
from .fit import Fit, within_lendable_capacity, within_own_quota, within_share_ceiling
from .types import Decisions, Entry, Job, Preemption, PreemptionKind


class VictimSet:
    """The entry's instance type as it would be once the victims chosen so far are gone."""

    __slots__ = ("state", "holding", "ledger", "count", "usage", "in_use_or_reserved")

    def __init__(self, state: WorkingState, holding: Holding, count: int):
        self.state = state
        self.holding = holding
        self.ledger = state.ledgers[holding.instance_type]
        self.count = count
        self.usage: dict[int, int] = {}
        self.in_use_or_reserved = self.ledger.in_use_or_reserved

    def usage_of(self, holding: Holding) -> int:
        return self.usage.get(holding.share.id, holding.usage)

    def still_over_limit(self, holding: Holding) -> bool:
        return self.usage_of(holding) > holding.limit

    def take(self, victim: Job) -> None:
        self._move(victim, -victim.placement.instance_count)

    def put_back(self, victim: Job) -> None:
        self._move(victim, victim.placement.instance_count)

    def _move(self, victim: Job, change: int) -> None:
        holding = self.state.holding(victim.share_id, self.holding.instance_type)
        before = self.usage_of(holding)
        after = self.usage[victim.share_id] = before + change
        self.in_use_or_reserved += max(after, holding.reserved) - max(before, holding.reserved)

    def makes_room(self, *, may_borrow: bool) -> bool:
        """Room: invariant B holds once placed, and the share ends within its limit (or its borrow limit)."""
        usage = self.usage_of(self.holding)
        usage_after = usage + self.count
        share_rule_holds = within_own_quota(self.holding, usage_after) or (
            may_borrow and within_share_ceiling(self.holding, usage_after)
        )
        return share_rule_holds and within_lendable_capacity(
            self.ledger, self.holding, self.in_use_or_reserved, usage, usage_after
        )


def reclaim_candidates(state: WorkingState, victims: VictimSet) -> Iterator[Job]:
    """Reclaim: jobs of other shares over their limit for the type, whatever their priority, in victim order.

    Each is offered only while its share is still over its limit once the victims already taken are gone.
    """
    cursors: list[tuple[tuple[int, float, int], int, int]] = []
    borrowers: dict[int, Holding] = {}
    for holding in state.holdings_of_type(victims.holding.instance_type):
        if holding is not victims.holding and holding.over_limit:
            index = state.next_live_victim(holding)
            if index is not None:
                borrowers[holding.share.id] = holding
                job = holding.victims[index]
                cursors.append((victim_key(job, job.placement), holding.share.id, index))
    heapq.heapify(cursors)
    while cursors:
        _, share_id, index = heapq.heappop(cursors)
        holding = borrowers[share_id]
        if not victims.still_over_limit(holding):
            continue
        yield holding.victims[index]
        following = state.next_live_victim(holding, index + 1)
        if following is not None:
            job = holding.victims[following]
            heapq.heappush(cursors, (victim_key(job, job.placement), share_id, following))


def in_share_candidates(state: WorkingState, holding: Holding, priority: int) -> Iterator[Job]:
    """In-share: when the share has in_share_preemption, its own jobs of strictly lower priority."""
    if not holding.share.in_share_preemption:
        return
    index = state.next_live_victim(holding)
    while index is not None and holding.victims[index].priority < priority:
        yield holding.victims[index]
        index = state.next_live_victim(holding, index + 1)


def in_share_usage(state: WorkingState, holding: Holding, priority: int) -> int:
    return sum(job.placement.instance_count for job in in_share_candidates(state, holding, priority))


def can_end_within_own_quota(state: WorkingState, holding: Holding, count: int, priority: int) -> bool:
    """A share never reclaims in order to borrow: reclaim only if it can end within its own limit."""
    return within_own_quota(holding, holding.usage + count) or within_own_quota(
        holding, holding.usage - in_share_usage(state, holding, priority) + count
    )


def preemption_may_make_room(state: WorkingState, job: Job, entry: Entry) -> bool:
    """Cheap upper bound: other shares' reclaimable over-limit usage plus the share's lower-priority usage."""
    holding = state.holding(job.share_id, entry.instance_type)
    ledger = state.ledgers[entry.instance_type]
    in_share = 0
    if holding.share.in_share_preemption:
        index = state.next_live_victim(holding)
        if index is not None and holding.victims[index].priority < job.priority:
            in_share = holding.victim_usage
    reclaim = ledger.reclaimable - (holding.victim_usage if holding.over_limit else 0)
    if not in_share and not reclaim:
        return False
    usage_after = holding.usage - in_share + entry.instance_count
    if not within_own_quota(holding, usage_after):
        if not in_share or not within_share_ceiling(holding, usage_after):
            return False
        reclaim = 0
    return within_lendable_capacity(
        ledger, holding, ledger.in_use_or_reserved - reclaim, holding.usage, usage_after
    )


def minimal_victims(
    victims: VictimSet, candidates: Iterable[Job], *, may_borrow: bool
) -> tuple[Job, ...] | None:
    """Take candidates in order until the entry fits, then put back, newest first, every one it does not need.

    None when the entry does not fit even without every candidate: no partial preemption.
    """
    taken: list[Job] = []
    for candidate in candidates:
        victims.take(candidate)
        taken.append(candidate)
        if victims.makes_room(may_borrow=may_borrow):
            break
    else:
        return None
    needed: list[Job] = []
    for candidate in reversed(taken):
        victims.put_back(candidate)
        if not victims.makes_room(may_borrow=may_borrow):
            victims.take(candidate)
            needed.append(candidate)
    return tuple(reversed(needed))


def reclaim_within_own_quota(state: WorkingState, job: Job, entry: Entry) -> tuple[Job, ...] | None:
    """Reclaim from over-limit shares first, then in-share, so that the share ends within its own limit."""
    holding = state.holding(job.share_id, entry.instance_type)
    if not can_end_within_own_quota(state, holding, entry.instance_count, job.priority):
        return None
    victims = VictimSet(state, holding, entry.instance_count)
    candidates = chain(reclaim_candidates(state, victims), in_share_candidates(state, holding, job.priority))
    return minimal_victims(victims, candidates, may_borrow=False)


def in_share_while_borrowing(state: WorkingState, job: Job, entry: Entry) -> tuple[Job, ...] | None:
    """Preempt only the share's own lower-priority jobs, ending within what the share may borrow."""
    holding = state.holding(job.share_id, entry.instance_type)
    victims = VictimSet(state, holding, entry.instance_count)
    return minimal_victims(victims, in_share_candidates(state, holding, job.priority), may_borrow=True)


def select_victims(state: WorkingState, job: Job, entry: Entry) -> tuple[Job, ...] | None:
    """Within its own quota a share reclaims first; a share that would be borrowing looks in-share first."""
    holding = state.holding(job.share_id, entry.instance_type)
    if within_own_quota(holding, holding.usage + entry.instance_count):
        return reclaim_within_own_quota(state, job, entry)
    return in_share_while_borrowing(state, job, entry) or reclaim_within_own_quota(state, job, entry)


def first_fit_with_preemption(state: WorkingState, job: Job) -> Fit | None:
    """The job's first on-demand entry, in preference order, that preemption can make room for.

    Until usage of the type changes, preemption that cannot make room for n instances for a share and priority
    cannot for more either: `state.no_preemption` remembers the smallest such count.
    """
    for index, entry in enumerate(job.entries):
        if entry.training_plan is not None:
            continue
        key = (job.share_id, job.priority)
        if state.no_preemption.known_to_fail(entry.instance_type, key, entry.instance_count):
            continue
        victims = select_victims(state, job, entry) if preemption_may_make_room(state, job, entry) else None
        if victims is not None:
            return Fit(index, entry, victims)
        state.no_preemption.record(entry.instance_type, key, entry.instance_count)
    return None


def preemption_kind(victim: Job, preemptor: Job) -> PreemptionKind:
    """Reclaim when the victim belongs to another share, in-share preemption otherwise."""
    return PreemptionKind.RECLAIM if victim.share_id != preemptor.share_id else PreemptionKind.IN_SHARE


def preemption_fails(victim: Job) -> bool:
    """A preempted job fails once preemption_count + 1 exceeds its preemption_retries_before_termination."""
    retries = victim.preemption_retries_before_termination
    return retries is not None and victim.preemption_count + 1 > retries


def preempt(
    state: WorkingState, decisions: Decisions, victim: Job, *, kind: PreemptionKind, preemptor: Job | None
) -> Preemption:
    """Stop `victim` now: its capacity is free at once, and it is not placed again in this pass."""
    placement = state.placements[victim.id]
    message = messages.preemption_message(state, victim, placement, kind=kind, preemptor=preemptor)
    state.release(victim)
    preemption = Preemption(
        job_id=victim.id,
        share_id=victim.share_id,
        kind=kind,
        instance_type=placement.instance_type,
        instances=placement.instance_count,
        preemptor_job_id=preemptor.id if preemptor is not None else None,
        preemptor_share_id=preemptor.share_id if preemptor is not None else None,
        fails=preemption_fails(victim),
        message=message,
    )
    decisions.preemptions.append(preemption)
    return preemption
