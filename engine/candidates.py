"""A holding's preemption candidates in victim order, with running sums for the searches' bisections.

Its own module so that `capacity` (which keeps them per holding for the pass) and `preemption` (which builds
and reads them) both import it and neither imports the other.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Set
from itertools import accumulate

from .types import Job


class Candidates:
    """A holding's jobs that `next_candidate` would offer, in order, from `start` on: their priorities
    (ascending, as the victim order goes) and running instance sums over the whole list."""

    __slots__ = ("victim_usage", "jobs", "priorities", "sums", "start")

    def __init__(self, victim_usage: int, jobs: list[Job]):
        self.victim_usage = victim_usage
        self.jobs = jobs
        self.priorities = [job.priority for job in jobs]
        self.sums = [0, *accumulate(job.placement.instance_count for job in jobs)]
        self.start = 0

    def __len__(self) -> int:
        return len(self.jobs) - self.start

    def first(self, count: int) -> list[Job]:
        return self.jobs[self.start : self.start + count]

    def below(self, priority: int) -> int:
        """How many candidates have a priority below `priority` (they come first)."""
        return bisect_left(self.priorities, priority, lo=self.start) - self.start

    def instances(self, count: int) -> int:
        """The instances the first `count` candidates hold."""
        return self.sums[self.start + count] - self.sums[self.start]

    def fewest_holding(self, instances: int) -> int:
        """The fewest first candidates holding at least `instances` (all of them when none do)."""
        return min(
            len(self), bisect_left(self.sums, self.sums[self.start] + instances, lo=self.start) - self.start
        )

    def tail_within(self, count: int, instances: int) -> int:
        """Where the longest tail of the first `count` candidates holding at most `instances` begins."""
        end = self.start + count
        return bisect_left(self.sums, self.sums[end] - instances, lo=self.start, hi=end) - self.start

    def all(self) -> list[Job]:
        return self.jobs[self.start :]

    def drop_stopped(self, stopped: Set[int], instances: int) -> bool:
        """Drop the candidates in `stopped`, which hold `instances` in all, walking from the front only as far
        as the last of them: True; or False, unchanged, when the list's stopped jobs hold fewer (other jobs of
        the holding stopped) and it must be filtered whole.

        The live candidates walked past move up, in order, against the first one not walked, and the sums in
        front of it are rebuilt backwards from its own, so the rest of the list is not touched.
        """
        jobs, sums = self.jobs, self.sums
        kept: list[Job] = []
        found, end = 0, self.start
        while found < instances:
            if end == len(jobs):
                return False
            job = jobs[end]
            if job.id in stopped:
                found += sums[end + 1] - sums[end]
            else:
                kept.append(job)
            end += 1
        if found != instances:
            return False
        start = end - len(kept)
        jobs[start:end] = kept
        priorities = self.priorities
        for index in range(end - 1, start - 1, -1):
            job = jobs[index]
            priorities[index] = job.priority
            sums[index] = sums[index + 1] - job.placement.instance_count
        self.start = start
        return True
