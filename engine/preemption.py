"""Preemption (behaviour.md#preemption): choose the fewest victims that make room for an on-demand entry, then stop
them.

Victims are searched in the spec's steps, one function each:

- `reclaim_first_search`: reclaim candidates (jobs of other shares over their limit, each while its share is
  still over it), then the share's own lower-priority jobs, in victim order, until the job fits with its
  share ending within its own limit;
- `in_share_alone_fallback`: only if that never happens, and the share has in_share_preemption, its
  lower-priority jobs alone until the job fits within what the share may borrow;
- `put_back_until_minimal`: then every victim whose return still lets the job fit is put back, last taken
  first (as in Kueue's preemptor), round after round until none can be, so a large low-priority job is not
  evicted when a smaller one suffices.

"Fits" is the rules' "makes room": the environment has the room (invariant B) and the share ends within its own
limit or, for a set with no reclaim victim left, within what it may borrow (a share never reclaims in order to
borrow). That rule is not monotone (putting back the last reclaim victim lets the share borrow again), which
is why the put-back repeats until no victim can be returned.

With graceful stops a set of victims must make room twice (`VictimSet`): *now*, every STOPPING job still
holding (the instances of STOPPING jobs that are not the job's own victims are nobody's to win), and *once
settled* (`capacity.WorkingState`), STOPPING jobs gone and nominated jobs on their earmarked entries, so a
victim is never taken for room that a nominated job will hold. Whether a share is over its limit is read
once settled. An entry that would fit once the STOPPING jobs that are no nominee's victims are gone is not
searched at all: the job waits for them (`fit.fits_once_freed`), and searches no later entry either.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from itertools import chain
from typing import Protocol

from . import messages
from .candidates import Candidates
from .capacity import Holding, WorkingState, victim_key
from .fit import (
    Fit,
    fits_once_freed,
    no_worse_now,
    within_lendable_capacity,
    within_own_quota,
    within_share_ceiling,
)
from .types import Decisions, Entry, Job, Preemption, PreemptionKind


class Trial(Protocol):
    """Capacity as it would be once the jobs taken so far are gone: what a take and a put-back work on."""

    def take(self, victim: Job) -> None: ...

    def put_back(self, victim: Job) -> None: ...


class VictimSet:
    """The entry's instance type as it would be once the victims chosen so far are gone, read twice when the
    type is settling: *now* (every other STOPPING job still holding: its instances are nobody's to win) and
    *once settled* (every STOPPING job gone, every nominated job on its earmarked entry). A placement must
    fit in both (behaviour.md#preemption); a type with no STOPPING job and no earmark has one state."""

    __slots__ = (
        "state",
        "holding",
        "ledger",
        "count",
        "change",
        "in_use_or_reserved",
        "both",
        "now_in_use_or_reserved",
        "now_used",
        "reclaimed",
    )

    def __init__(self, state: WorkingState, holding: Holding, count: int):
        self.state = state
        self.holding = holding
        self.ledger = ledger = state.ledgers[holding.instance_type]
        self.count = count
        self.change: dict[int, int] = {}  # per share, the instances its victims taken so far hold (<= 0)
        self.in_use_or_reserved = state.settled_in_use_or_reserved(holding.instance_type)
        self.both = ledger.settling
        self.now_in_use_or_reserved = ledger.in_use_or_reserved
        self.now_used = ledger.used
        self.reclaimed = 0  # victims of other shares in the set

    def usage_of(self, holding: Holding) -> int:
        """The share's usage once settled, less its victims taken so far."""
        return self.state.settled_usage(holding) + self.change.get(holding.share.id, 0)

    def now_usage_of(self, holding: Holding) -> int:
        """The share's usage now (its STOPPING jobs holding), less its victims taken so far."""
        return holding.usage + self.change.get(holding.share.id, 0)

    def still_over_limit(self, holding: Holding) -> bool:
        return self.usage_of(holding) > holding.limit

    def take(self, victim: Job) -> None:
        self._move(victim, -victim.placement.instance_count)
        self.reclaimed += victim.share_id != self.holding.share.id

    def put_back(self, victim: Job) -> None:
        self._move(victim, victim.placement.instance_count)
        self.reclaimed -= victim.share_id != self.holding.share.id

    def put_back_own(self, fits: Callable[[], bool], run: list[Job]) -> list[Job]:
        """Put back, last taken first, every job of `run` (the share's own victims) whose return still lets
        the job fit; the jobs needed, last taken first.

        While it runs only the share's own usage grows, and the job fits with d more instances of it exactly
        while d is at most the slack (`own_slack`), so a victim goes back exactly when its instances are within
        what is left of it. The run begins with the first of the holding's candidates (all of it, as a search
        takes them; all but the few kept by an earlier round, after one): there the jobs going back from its
        end, until one holds more than is left, are read off the candidates' running sums
        (`Candidates.tail_within`) instead of walked.
        """
        candidates, first = self.own_prefix(run)
        held = candidates.instances(first)
        for job in run[first:]:
            held += job.placement.instance_count
        slack = self.own_slack(fits, held)
        returned = 0
        position = len(run)
        needed: list[Job] = []
        while slack and position:  # once the slack is spent, every victim left is needed
            if position == first:
                position = candidates.tail_within(first, slack)
                back = candidates.instances(first) - candidates.instances(position)
                slack -= back
                returned += back
                first = -1
                continue
            position -= 1
            job = run[position]
            count = job.placement.instance_count
            if count <= slack:
                slack -= count
                returned += count
            else:
                needed.append(job)
        needed.extend(reversed(run[:position]))
        self.move_own(returned)
        return needed

    def own_prefix(self, run: list[Job]) -> tuple[Candidates, int]:
        """The holding's candidates, and how many of the first jobs of `run` are their first ones.

        A run is always some of the candidates in their order, so once one of its jobs is not where it would
        be in the list, none after it is: a bisection finds the first such job.
        """
        candidates = candidates_of(self.state, self.holding)
        jobs, start = candidates.jobs, candidates.start
        first = bisect_left(range(len(run)), True, key=lambda index: run[index] is not jobs[start + index])
        return candidates, first

    def own_slack(self, fits: Callable[[], bool], held: int) -> int:
        """The most instances, up to `held` (what the victims that could go back hold), the share's own usage
        can grow by with `fits` still true.

        `fits` holds now, and only depends on the share's own usage as it grows (fewer instances within its
        limits, more held in the environment), so it holds up to some slack and not beyond. The search first
        tries where the rules stop holding (`turns`: the slack is most often the lowest), then steps that
        double from there and a bisection: the cost follows the slack's distance from those.
        """
        low, high = 0, None
        for turn in self.turns():
            for target in (turn, turn + 1):
                if target <= low:
                    continue
                probe = min(target, held)
                if probe == low:
                    return low  # every instance the victims hold
                if not self._holds_with(fits, probe):
                    high = probe - 1
                    break
                low = probe
            if high is not None:
                break
        step = 1
        while high is None:
            probe = min(low + step, held)
            if probe == low:
                return low
            if not self._holds_with(fits, probe):
                high = probe - 1
            else:
                low, step = probe, step * 2
        while low < high:
            middle = (low + high + 1) // 2
            if self._holds_with(fits, middle):
                low = middle
            else:
                high = middle - 1
        return low

    def turns(self) -> list[int]:
        """How many more instances the share's usage could take, the job placed, before a rule stops holding,
        lowest first (negative: by how many it must fall): its own limit and its borrow ceiling, now and once
        settled, and the room in the environment (invariant B) as it would be for a share at or above what it
        keeps. A search over the share's own usage tries them first: its answer is most often the lowest."""
        holding, count = self.holding, self.count
        usage = self.usage_of(holding)
        room = self.ledger.capacity - self.in_use_or_reserved
        if self.both:
            usage = max(usage, self.now_usage_of(holding))
            room = min(room, self.ledger.capacity - self.now_in_use_or_reserved)
        turns = [holding.limit - count - usage, room - count]
        if holding.ceiling is not None:
            turns.append(holding.ceiling - count - usage)
        turns.sort()
        return turns

    def _holds_with(self, fits: Callable[[], bool], more: int) -> bool:
        self._change_usage(self.holding, more)
        holds = fits()
        self._change_usage(self.holding, -more)
        return holds

    def move_own(self, change: int) -> None:
        """Take (`change` < 0) or put back (> 0) jobs of the share's own holding, `change` instances in all."""
        self._change_usage(self.holding, change)

    def move_share(self, holding: Holding, change: int, victims: int) -> None:
        """Take (`change` < 0) or put back (> 0) `victims` jobs of another share holding `change` instances."""
        self._change_usage(holding, change)
        self.reclaimed -= victims if change > 0 else -victims

    def _move(self, victim: Job, change: int) -> None:
        self._change_usage(self.state.holding(victim.share_id, self.holding.instance_type), change)

    def _change_usage(self, holding: Holding, change: int) -> None:
        share_id = holding.share.id
        taken = self.change.get(share_id, 0)
        self.change[share_id] = taken + change
        reserved = holding.reserved
        before = self.state.settled_usage(holding) + taken
        self.in_use_or_reserved += max(before + change, reserved) - max(before, reserved)
        if self.both:
            before = holding.usage + taken
            self.now_in_use_or_reserved += max(before + change, reserved) - max(before, reserved)
            self.now_used += change

    def own_within_limit(self) -> bool:
        """The share ends within its own limit, now and once settled, whatever room the environment has."""
        holding = self.holding
        if not within_own_quota(holding, self.usage_of(holding) + self.count):
            return False
        return not self.both or within_own_quota(holding, self.now_usage_of(holding) + self.count)

    def fits_within_own_limit(self) -> bool:
        """Room in the environment (invariant B) once placed, with the share ending within its own limit."""
        return self._fits(within_own_quota)

    def fits_within_borrow_limit(self) -> bool:
        """Room in the environment (invariant B) once placed, with the share within what it may borrow."""
        return self._fits(within_share_ceiling)

    def makes_room(self) -> bool:
        """behaviour.md#preemption: within the share's own limit, or, for a set with no reclaim victim, its borrow
        limit."""
        return self.fits_within_own_limit() if self.reclaimed else self.fits_within_borrow_limit()

    def _fits(self, share_rule: Callable[[Holding, int], bool]) -> bool:
        holding, count = self.holding, self.count
        usage = self.usage_of(holding)
        if not share_rule(holding, usage + count) or not within_lendable_capacity(
            self.ledger, holding, self.in_use_or_reserved, usage, usage + count
        ):
            return False
        if not self.both:
            return True
        usage = self.now_usage_of(holding)
        return share_rule(holding, usage + count) and no_worse_now(
            self.ledger,
            holding,
            self.now_in_use_or_reserved,
            self.now_used,
            usage,
            usage + count,
            self.ledger.stopping > 0,
        )


def protection_end(
    *, scheduled_at: datetime | None, min_runtime_seconds: int, now: datetime
) -> datetime | None:
    """A job is no reclaim or in-share victim until it has run `min_runtime_seconds` since it was scheduled;
    when that is still ahead of `now`, the moment it ends (None: not protected)."""
    if min_runtime_seconds <= 0 or scheduled_at is None:
        return None
    until = scheduled_at + timedelta(seconds=min_runtime_seconds)
    return until if until > now else None


def protected_until(state: WorkingState, job: Job) -> datetime | None:
    """`protection_end` of a placed job in this pass (None while protections are lifted for a reason)."""
    if state.protections_lifted:
        return None
    return protection_end(
        scheduled_at=job.placement.scheduled_at,
        min_runtime_seconds=state.snapshot.preemption_min_runtime_seconds,
        now=state.now,
    )


@contextmanager
def protections_lifted(state: WorkingState) -> Iterator[None]:
    """What preemption could take if no job were protected (for the pending reason, never for a decision)."""
    state.protections_lifted = True
    try:
        yield
    finally:
        state.protections_lifted = False


def next_candidate(state: WorkingState, holding: Holding, start: int = 0) -> int | None:
    """The one candidate test: index of the holding's next victim at or after `start` that a preemption may
    take, still placed and not protected (None when there is none)."""
    index = state.next_live_victim(holding, start)
    while index is not None and protected_until(state, holding.victims[index]) is not None:
        index = state.next_live_victim(holding, index + 1)
    return index


def reclaim_candidates(state: WorkingState, victims: VictimSet) -> Iterator[Job]:
    """Reclaim: jobs of other shares over their limit for the type, whatever their priority, in victim order.

    Each is offered only while its share is still over its limit once the victims already taken are gone.
    """
    cursors: list[tuple[tuple[int, float, int], int, int]] = []
    borrowers: dict[int, Holding] = {}
    for holding in state.holdings_of_type(victims.holding.instance_type):
        if holding is not victims.holding and victims.still_over_limit(holding):
            index = next_candidate(state, holding)
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
        following = next_candidate(state, holding, index + 1)
        if following is not None:
            job = holding.victims[following]
            heapq.heappush(cursors, (victim_key(job, job.placement), share_id, following))


def reclaimed_down(state: WorkingState, holding: Holding) -> tuple[int, int]:
    """What `reclaim_candidates` takes from another share's holding when it takes all it offers: the share's
    settled usage once its victims are taken in order while it is over its limit, and how many it takes.

    Remembered per holding until the pass changes it (`Holding.version`), so the searches of a pass walk a
    share's victims once per change of the share instead of once per search.
    """
    key = (holding.share.id, holding.instance_type)
    known = state.reclaim_floor.get(key)
    if known is not None and known[0] == holding.version and known[1] == state.protections_lifted:
        return known[2], known[3]
    usage = state.settled_usage(holding)
    taken = 0
    if usage > holding.limit:
        # Take the fewest first candidates that bring it within its limit, or all of them.
        candidates = candidates_of(state, holding)
        taken = candidates.fewest_holding(usage - holding.limit)
        usage -= candidates.instances(taken)
    state.reclaim_floor[key] = (holding.version, state.protections_lifted, usage, taken)
    return usage, taken


def candidates_of(state: WorkingState, holding: Holding) -> Candidates:
    """Every job of the holding that `next_candidate` would offer (still placed, not protected), in order.

    Kept until one of the holding's victims stops (its victim usage only falls then), so a search no longer
    walks past the protected jobs at the front of the list again and again. Victims stop from the front, but
    not only the first ones (a put-back returns some in between): when the stopped candidates found from the
    front account for all the victim usage lost, only the part up to the last of them is rewritten
    (`Candidates.drop_stopped`); otherwise (a protected job stopped) the list is filtered again.
    """
    key = (holding.share.id, holding.instance_type, state.protections_lifted)
    known = state.candidates.get(key)
    if known is not None and known.victim_usage == holding.victim_usage:
        return known
    if known is None:
        jobs: list[Job] = []
        index = next_candidate(state, holding)
        while index is not None:
            jobs.append(holding.victims[index])
            index = next_candidate(state, holding, index + 1)
        known = Candidates(holding.victim_usage, jobs)
    else:
        # Victims only ever stop during a pass, and protection does not change: the list only loses jobs,
        # each taking its instances (at least one) off the victim usage.
        stopped = state.stopped
        if known.drop_stopped(stopped, known.victim_usage - holding.victim_usage):
            known.victim_usage = holding.victim_usage
        else:
            known = Candidates(holding.victim_usage, [job for job in known.all() if job.id not in stopped])
    state.candidates[key] = known
    return known


def in_share_candidates(state: WorkingState, holding: Holding, priority: int) -> Iterator[Job]:
    """In-share: when the share has in_share_preemption, its own jobs of strictly lower priority."""
    if not holding.share.in_share_preemption:
        return
    candidates = candidates_of(state, holding)
    yield from candidates.first(candidates.below(priority))


def in_share_usage(state: WorkingState, holding: Holding, priority: int) -> int:
    if not holding.share.in_share_preemption:
        return 0
    candidates = candidates_of(state, holding)
    return candidates.instances(candidates.below(priority))


def can_end_within_own_quota(state: WorkingState, holding: Holding, count: int, priority: int) -> bool:
    """A share never reclaims in order to borrow: reclaim only if it can end within its own limit, now (its
    STOPPING jobs holding) and once settled."""
    usage = state.settled_usage(holding)
    if state.ledgers[holding.instance_type].settling:
        usage = max(usage, holding.usage)
    return within_own_quota(holding, usage + count) or within_own_quota(
        holding, usage - in_share_usage(state, holding, priority) + count
    )


def preemption_may_make_room(state: WorkingState, job: Job, entry: Entry) -> bool:
    """Cheap upper bound: other shares' reclaimable over-limit usage plus the share's lower-priority usage."""
    return room_by_preemption_possible(
        state, job.share_id, job.priority, entry.instance_type, entry.instance_count
    )


def room_by_preemption_possible(
    state: WorkingState, share_id: int, priority: int, instance_type: str, count: int
) -> bool:
    """`preemption_may_make_room` for `count` instances of a job of the share at `priority`. It only gets
    harder with a larger count or a lower priority (fewer of the share's own jobs rank below it)."""
    holding = state.holding(share_id, instance_type)
    ledger = state.ledgers[instance_type]
    if ledger.settling:  # the bound reads the sums of now; the search itself reads the type once settled
        return True
    in_share = 0
    if holding.share.in_share_preemption:
        index = next_candidate(state, holding)
        if index is not None and holding.victims[index].priority < priority:
            in_share = holding.victim_usage
    reclaim = ledger.reclaimable - (holding.victim_usage if holding.over_limit else 0)
    if not in_share and not reclaim:
        return False
    usage_after = holding.usage - in_share + count
    if not within_own_quota(holding, usage_after):
        if not in_share or not within_share_ceiling(holding, usage_after):
            return False
        reclaim = 0
    return within_lendable_capacity(
        ledger, holding, ledger.in_use_or_reserved - reclaim, holding.usage, usage_after
    )


def take_until(trial: Trial, candidates: Iterable[Job], fits: Callable[[], bool]) -> list[Job] | None:
    """Take candidates in order until the job fits; None when it never does (then nobody is preempted)."""
    taken: list[Job] = []
    for candidate in candidates:
        trial.take(candidate)
        taken.append(candidate)
        if fits():
            return taken
    return None


def put_back_round(trial: Trial, taken: list[Job], fits: Callable[[], bool]) -> list[Job]:
    """One round: put back, last taken first, every victim whose return still lets the job fit; the rest, in
    the order taken.

    In a victim set the share's own victims come last (every reclaim candidate is offered before them) and
    are put back at once (`VictimSet.put_back_own`).
    """
    needed: list[Job] = []
    index = len(taken) - 1
    if isinstance(trial, VictimSet):
        own = trial.holding.share.id
        start = bisect_left(taken, True, key=lambda job: job.share_id == own)
        if start < len(taken):
            needed = trial.put_back_own(fits, taken[start:])
        index = start - 1
    while index >= 0:
        victim = taken[index]
        trial.put_back(victim)
        if not fits():
            trial.take(victim)
            needed.append(victim)
        index -= 1
    needed.reverse()
    return needed


def take_own_until(
    victims: VictimSet, state: WorkingState, priority: int, fits: Callable[[], bool]
) -> list[Job] | None:
    """`take_until` over `in_share_candidates`: the share's own lower-priority jobs, the fewest first ones
    (at least one) after which the job fits, or None. Taking more of them only lowers the share's own usage,
    so whether it fits only turns from no to yes along the list: a search on their running sums."""
    holding = victims.holding
    if not holding.share.in_share_preemption:
        return None
    candidates = candidates_of(state, holding)
    available = candidates.below(priority)
    if not available:
        return None

    def fits_after(k: int) -> bool:
        victims.move_own(-candidates.instances(k))
        holds = fits()
        victims.move_own(candidates.instances(k))
        return holds

    if not fits_after(available):
        victims.move_own(-candidates.instances(available))
        return None
    # First where each rule starts to hold (`VictimSet.turns`: the fewest first victims freeing what it needs,
    # most often the answer for the highest need), then steps that double and a bisection: the cost follows
    # how far the answer is from those, not how many candidates the share has.
    low, high = 1, available  # fits after `high`, not after fewer than `low`
    for turn in victims.turns():
        fewest = max(1, candidates.fewest_holding(-turn))
        for target in (fewest, fewest - 1):
            if not low <= target < high:
                continue
            if fits_after(target):
                high = target
            else:
                low = target + 1
                break
        if low == high:
            break
    step = 1
    while low < high:
        probe = min(low + step - 1, high - 1)
        if fits_after(probe):
            high = probe
            break
        low, step = probe + 1, step * 2
    while low < high:
        middle = (low + high) // 2
        if fits_after(middle):
            high = middle
        else:
            low = middle + 1
    victims.move_own(-candidates.instances(low))
    return candidates.first(low)


def put_back_until_minimal(trial: Trial, taken: list[Job], fits: Callable[[], bool]) -> list[Job]:
    """Put back rounds until a round returns nobody."""
    kept = taken
    while True:
        needed = put_back_round(trial, kept, fits)
        if len(needed) == len(kept):
            return needed
        kept = needed


def reclaim_first_search(state: WorkingState, job: Job, entry: Entry) -> tuple[Job, ...] | None:
    """Reclaim candidates, then in-share ones, in victim order, until the job fits within its own limit."""
    holding = state.holding(job.share_id, entry.instance_type)
    if not can_end_within_own_quota(state, holding, entry.instance_count, job.priority):
        return None
    victims = VictimSet(state, holding, entry.instance_count)
    if not victims.own_within_limit():
        decided, chosen = in_share_after_all_reclaim(state, victims, job.priority)
        if decided:
            return chosen
        victims = VictimSet(state, holding, entry.instance_count)
    candidates = chain(reclaim_candidates(state, victims), in_share_candidates(state, holding, job.priority))
    taken = take_until(victims, candidates, victims.fits_within_own_limit)
    return None if taken is None else tuple(put_back_until_minimal(victims, taken, victims.makes_room))


def in_share_after_all_reclaim(
    state: WorkingState, victims: VictimSet, priority: int
) -> tuple[bool, tuple[Job, ...] | None]:
    """`reclaim_first_search` for a share that needs its own lower-priority jobs gone to end within its limit,
    deciding as it does without taking the reclaim candidates one by one: (True, its answer), or (False, None)
    when only the search itself can tell.

    Reclaim victims leave the share's own usage as it is, so the search takes every reclaim candidate before
    the job can fit: each share's run of them at once (`reclaimed_down`). The in-share candidates are then
    taken one by one as in the search. The first put-back round returns the in-share victims one by one as
    well, then the reclaim victims, last taken first: the share's usage is settled by then and every return
    only adds to invariant B's sum, so when the job still fits with all of them back, each return on the way
    kept it fitting and all go back. Otherwise (some reclaim victim must stay) it cannot tell.
    """
    holding = victims.holding
    reclaim: list[tuple[Holding, int, int]] = []
    for other in state.holdings_of_type(holding.instance_type):
        if other is not holding and victims.still_over_limit(other):
            usage, count = reclaimed_down(state, other)
            if count:
                reclaim.append((other, victims.usage_of(other) - usage, count))
    for other, instances, count in reclaim:
        victims.move_share(other, -instances, count)
    taken = take_own_until(victims, state, priority, victims.fits_within_own_limit)
    if taken is None:
        return True, None
    needed = put_back_round(victims, taken, victims.makes_room)
    if not reclaim:
        kept = (
            needed
            if len(needed) == len(taken)
            else put_back_until_minimal(victims, needed, victims.makes_room)
        )
        return True, tuple(kept)
    for other, instances, count in reclaim:
        victims.move_share(other, instances, count)
    if not victims.makes_room():
        return False, None
    return True, tuple(put_back_until_minimal(victims, needed, victims.makes_room))


def in_share_alone_fallback(state: WorkingState, job: Job, entry: Entry) -> tuple[Job, ...] | None:
    """Failing that, with in_share_preemption: in-share candidates alone until it fits its borrow limit."""
    holding = state.holding(job.share_id, entry.instance_type)
    if not holding.share.in_share_preemption:
        return None
    victims = VictimSet(state, holding, entry.instance_count)
    taken = take_own_until(victims, state, job.priority, victims.fits_within_borrow_limit)
    return None if taken is None else tuple(put_back_until_minimal(victims, taken, victims.makes_room))


def select_victims(state: WorkingState, job: Job, entry: Entry) -> tuple[Job, ...] | None:
    """The victims for an entry: reclaim-first search, else the in-share-alone fallback (None: neither)."""
    victims = reclaim_first_search(state, job, entry)
    if victims is None:
        victims = in_share_alone_fallback(state, job, entry)
    return victims


def first_fit_with_preemption(state: WorkingState, job: Job) -> Fit | None:
    """The job's first on-demand entry, in preference order, that preemption can make room for.

    An entry that would fit once the STOPPING jobs that are no nominee's victims are gone ends the search
    with no victims (`Fit.waits_for_freeing`): the job preempts nobody for it or a later entry and waits.
    Until usage of the type changes, preemption that cannot make room for n instances for a share and priority
    cannot for more either: `state.no_preemption` remembers the smallest such count.
    """
    for index, entry in enumerate(job.entries):
        if entry.training_plan is not None:
            continue
        key = (job.share_id, job.priority)
        if state.no_preemption.known_to_fail(entry.instance_type, key, entry.instance_count):
            continue
        holding = state.holding(job.share_id, entry.instance_type)
        if fits_once_freed(state, holding, entry.instance_count):
            return Fit(index, entry, waits_for_freeing=True)
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


def stops_gracefully(job: Job) -> bool:
    """A job its executor has taken goes to STOPPING and keeps its capacity; one not taken stops at once."""
    return job.taken


def stop(state: WorkingState, job: Job) -> bool:
    """Stop `job` for the rest of the pass, gracefully or at once; True when graceful."""
    if stops_gracefully(job):
        state.begin_stopping(job)
        return True
    state.release(job)
    return False


def preempt(
    state: WorkingState, decisions: Decisions, victim: Job, *, kind: PreemptionKind, preemptor: Job | None
) -> Preemption:
    """Stop `victim`: at once (its capacity free in this pass) or gracefully; never placed again in the pass."""
    placement = state.placements[victim.id]
    message = messages.preemption_message(state, victim, placement, kind=kind, preemptor=preemptor)
    graceful = stop(state, victim)
    preemption = Preemption(
        job_id=victim.id,
        share_id=victim.share_id,
        kind=kind,
        instance_type=placement.instance_type,
        instances=placement.instance_count,
        preemptor_job_id=preemptor.id if preemptor is not None else None,
        preemptor_share_id=preemptor.share_id if preemptor is not None else None,
        fails=preemption_fails(victim),
        message=message + (" (stopping gracefully)" if graceful else ""),
        graceful=graceful,
    )
    decisions.preemptions.append(preemption)
    return preemption
