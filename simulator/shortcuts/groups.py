"""The RUNNABLE jobs of each share in groups (point 2 of `simulator.shortcuts`), kept as jobs come and go, and
indexed by their entries (`RunnableGroups.by_entry`) so a pass finds the groups not stuck from a few numbers
per share and type."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Hashable, Iterator, Set

from engine import (
    Entry,
    Job,
)
from engine.order import queue_key

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
    """The RUNNABLE jobs of each share, grouped, each group in queue order (behaviour.md#order)."""

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
