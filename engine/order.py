"""Order (behaviour.md#order): each share's queue, and which share's head the pass takes next."""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Iterable
from datetime import datetime
from fractions import Fraction
from operator import attrgetter

from .capacity import WorkingState
from .types import IdleCapacityAssignment, Job, JobStatus, Snapshot

QueueKey = tuple[int, datetime, int]
HeadKey = tuple[int, int, Fraction, datetime, int]
_id, _submitted_at, _priority = attrgetter("id"), attrgetter("submitted_at"), attrgetter("priority")


def queue_key(job: Job) -> QueueKey:
    """A share's queue: higher priority first, then earlier submission, then lower id (kept on the job)."""
    return job.queue_key


def head_key(job: Job, share_under_limit: bool, borrowed_share: Fraction = Fraction(0)) -> HeadKey:
    """Across shares: heads of shares under their limit first, then priority, then (FAIR_SHARE, over-limit
    heads only) the lowest dominant borrowed share per weight, then submission time, lower id."""
    return (0 if share_under_limit else 1, -job.priority, borrowed_share, job.submitted_at, job.id)


def lendable_capacity_of_queue(state: WorkingState) -> dict[str, int]:
    """Per type, what borrowers may ever use: capacity(T) minus what the shares reserve
    (behaviour.md#capacity-what-a-share-may-hold)."""
    lendable = {}
    for instance_type, ledger in state.ledgers.items():
        reserved = sum(holding.reserved for holding in state.holdings_of_type(instance_type))
        lendable[instance_type] = max(0, ledger.capacity - reserved)
    return lendable


def dominant_borrowed_share(state: WorkingState, share_id: int, lendable: dict[str, int]) -> Fraction:
    """FAIR_SHARE: over types, the largest of instances borrowed / the queue's lendable capacity, per weight."""
    largest = Fraction(0)
    for instance_type, most in lendable.items():
        holding = state.holdings.get((share_id, instance_type))
        if holding is not None and holding.borrowed:
            largest = max(largest, Fraction(holding.borrowed, max(1, most)))
    return largest / Fraction(state.shares[share_id].fair_share_weight)


def fair_share_of(state: WorkingState) -> Callable[[int], Fraction] | None:
    """Under FAIR_SHARE, each share's current dominant borrowed share per weight; None under FIFO."""
    if state.snapshot.idle_capacity_assignment != IdleCapacityAssignment.FAIR_SHARE:
        return None
    lendable = lendable_capacity_of_queue(state)
    return lambda share_id: dominant_borrowed_share(state, share_id, lendable)


def share_queues(jobs: Iterable[Job], *, in_id_order: bool = False) -> dict[int, list[Job]]:
    """The RUNNABLE jobs of each share in queue order, shares by id.

    The jobs are first dealt to their shares, each share's list then sorted on its own: a share's list is a
    fraction of the queue, and sorting lists that fit the processor's caches is cheaper than sorting all the
    jobs at once (and no list of them all is made). Each is sorted one key at a time, last key first (Python's
    sort is stable, reversed too): ids and priorities are compared as plain integers and submission times as
    datetimes, each far cheaper than comparing the tuple `queue_key`, and jobs read in id order, mostly
    submitted in that order too, are runs the sort merely checks. The order is `queue_key`'s. `in_id_order`:
    the caller gives the jobs by ascending id already (as the working state gathers them), so the sort by id
    is left out: dealing keeps each share's jobs in the order given."""
    queues: dict[int, list[Job]] = {}
    for job in jobs:
        queue = queues.get(job.share_id)
        if queue is None:
            queues[job.share_id] = [job]
        else:
            queue.append(job)
    for queue in queues.values():
        if not in_id_order:
            queue.sort(key=_id)
        queue.sort(key=_submitted_at)
        queue.sort(key=_priority, reverse=True)
    return dict(sorted(queues.items()))


class HeadOrder:
    """The share queues' heads, best first (Kueue's "order heads"), kept current as usage changes.

    A share's key changes when its head moves, its under-limit state flips or (FAIR_SHARE) its borrowing
    changes, each only through a placement or preemption of its own; a stale heap entry is one whose key is no
    longer the share's current key, and is dropped when popped.

    A share all of whose jobs fail as things stand (`refusals.Refusals`) can be *parked*: out of the order,
    its head left where it is. Taken one by one, its jobs would each fail, at the places their keys give them
    among the other heads, with no effect; so nothing is taken from it until the state changes. At each change
    (`passed`), what the heads taken so far went past is noted: the parked share's jobs whose keys come before
    the head that changed the state were tried before the change, and refused. `unpark` hands those back
    (they are refused, in queue order) and puts the share back in the order from its first job after them.
    While parked, a share's own key cannot change (it places nothing; a preemption of its jobs unparks it
    first, `refresh`), so its jobs' keys are those it had when parked.
    """

    def __init__(
        self,
        queues: dict[int, list[Job]],
        share_under_limit: Callable[[int], bool],
        fair_share: Callable[[int], Fraction] | None = None,
    ):
        self._queues = queues
        self._share_under_limit = share_under_limit
        self._fair_share = fair_share
        self._cursor = dict.fromkeys(queues, 0)
        self._key: dict[int, HeadKey | None] = {}
        self._heap: list[tuple[HeadKey, int]] = []
        # The key of the head last taken; per parked share, its head's key when parked and the furthest key
        # of a head taken since that changed the state (None: none yet).
        self.taken_key: HeadKey | None = None
        self._parked: dict[int, tuple[HeadKey, HeadKey | None]] = {}
        # Jobs refused by a share's unparking inside a change (`refresh`), for the caller to collect.
        self.refused: list[tuple[int, list[Job]]] = []
        for share_id in queues:
            self._push(share_id)

    def next_head(self) -> Job | None:
        """The best head; its share is out of the order until `advance` or `block` says what became of it."""
        while self._heap:
            key, share_id = heapq.heappop(self._heap)
            if self._key[share_id] == key:
                self._key[share_id] = None
                self.taken_key = key
                return self._queues[share_id][self._cursor[share_id]]
        return None

    @property
    def parked(self) -> list[int]:
        """The parked shares, by when they were parked."""
        return list(self._parked)

    def parked_head(self, share_id: int) -> Job:
        return self._queues[share_id][self._cursor[share_id]]

    def park(self, share_id: int) -> None:
        """The head just taken, and every job behind it, fail as things stand: the share leaves the order."""
        self._parked[share_id] = (self.taken_key, None)

    def passed(self) -> None:
        """The head just taken changed the state: the parked shares' jobs before it were refused."""
        key = self.taken_key
        for share_id, (parked_at, reach) in self._parked.items():
            if reach is None or key > reach:
                self._parked[share_id] = (parked_at, key)

    def unpark(self, share_id: int) -> list[Job]:
        """Back in the order; returns its jobs refused while it was out (those before the furthest change)."""
        parked_at, reach = self._parked.pop(share_id)
        queue, cursor = self._queues[share_id], self._cursor[share_id]
        end = cursor
        if reach is not None:
            under_limit, fair_share = parked_at[0] == 0, parked_at[2]
            end = bisect_left(queue, reach, lo=cursor, key=lambda job: head_key(job, under_limit, fair_share))
        self._cursor[share_id] = end
        self._push(share_id)
        return queue[cursor:end]

    def refuse_parked(self) -> dict[int, list[Job]]:
        """No change is left to come: every job of the parked shares is refused."""
        refused = {}
        for share_id in self._parked:
            queue = self._queues[share_id]
            refused[share_id] = queue[self._cursor[share_id] :]
            self._cursor[share_id] = len(queue)
        self._parked.clear()
        return refused

    def advance(self, share_id: int) -> None:
        """The head was placed or skipped: the share's next job becomes its head."""
        self._cursor[share_id] += 1
        self._push(share_id)

    def block(self, share_id: int) -> list[Job]:
        """STRICT_FIFO: the head cannot be placed, so the share is done; returns the head and those behind."""
        rest = self._queues[share_id][self._cursor[share_id] :]
        self._cursor[share_id] = len(self._queues[share_id])
        self._key[share_id] = None
        return rest

    def refresh(self, share_id: int) -> None:
        """The share lost jobs to preemption: its head may move from the over-limit group to the other (a
        parked share comes back, its jobs before the head now taken refused)."""
        if share_id in self._parked:
            self.passed()
            self.refused.append((share_id, self.unpark(share_id)))
        elif self._key.get(share_id) is not None:
            self._push(share_id)

    def _push(self, share_id: int) -> None:
        queue = self._queues[share_id]
        cursor = self._cursor[share_id]
        if cursor >= len(queue):
            self._key[share_id] = None
            return
        key = self._head_key(queue[cursor], share_id)
        if key != self._key.get(share_id):
            self._key[share_id] = key
            heapq.heappush(self._heap, (key, share_id))

    def _head_key(self, job: Job, share_id: int) -> HeadKey:
        under_limit = self._share_under_limit(share_id)
        if under_limit or self._fair_share is None:
            return head_key(job, under_limit)
        return head_key(job, under_limit, self._fair_share(share_id))


def head_order(snapshot: Snapshot) -> list[Job]:
    """The RUNNABLE jobs of enabled shares in the order the pass takes them as heads when it places none.

    Each head taken is followed by its share's next job, as after a head that cannot be placed under
    BEST_EFFORT_FIFO; since nothing is placed or preempted, no share moves between the under-limit and
    over-limit groups. The snapshot is read as it stands: housekeeping (drains, timeouts, lowered limits) is
    not applied, and the order is given even when the queue is disabled.
    """
    state = WorkingState(snapshot)
    runnable = [
        job for job in state.jobs if job.status == JobStatus.RUNNABLE and state.shares[job.share_id].enabled
    ]
    heads = HeadOrder(share_queues(runnable), state.share_under_limit, fair_share_of(state))
    order = []
    while (job := heads.next_head()) is not None:
        order.append(job)
        heads.advance(job.share_id)
    return order
