"""Usage integrated over virtual time: GPU-seconds used, borrowed and lent per share, and a step series.

Usage is a step function that changes only when a job is placed or stops. The meter keeps the current rates
(GPUs per share on demand, on plans, borrowed, lent) and, at each change, adds rate x elapsed time. Borrowed
and lent are those of `engine.accounting.share_usage`, the arithmetic the live pages show (both
call `lent_of_type`), so a replay's "lent" means what the overview page means by it. Each type is accounted
on its own (a loan never crosses types), so a change on one type recomputes only that type, and a type's
loans are remembered by what they depend on: the total borrowed and what each lender leaves idle.
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import add

from engine import Strategy
from engine.accounting import lent_of_type
from engine.ceilings import lends

Series = list[tuple[float, tuple[int, ...], tuple[int, ...]]]


class UsageMeter:
    """Per share: GPU-seconds on demand, borrowed, lent and on plans; the step series of GPUs in use."""

    def __init__(
        self,
        *,
        share_ids: list[int],
        capacity: Mapping[str, int],
        limits: Mapping[int, Mapping[str, int]],
        strategies: Mapping[int, Strategy],
        gpus: Mapping[str, int],
        start: float,
        lending_limits: Mapping[int, Mapping[str, int]] | None = None,
    ):
        """`lending_limits`: share id -> type -> the most it lends of that type (a type absent: all)."""
        self.share_ids = share_ids
        self.capacity = dict(capacity)
        self.limits = {share_id: dict(limits.get(share_id, {})) for share_id in share_ids}
        self.strategies = dict(strategies)
        self.lending_limits = {share_id: dict(types) for share_id, types in (lending_limits or {}).items()}
        self.gpus = dict(gpus)
        self.position = {share_id: i for i, share_id in enumerate(share_ids)}
        count = len(share_ids)
        self.instances: dict[str, list[int]] = {}  # type -> instances on demand per share
        self.plan_gpus = [0] * count
        self.time = start
        # GPU-seconds per share
        self.on_demand = [0.0] * count
        self.borrowed = [0.0] * count
        self.lent = [0.0] * count
        self.on_plan = [0.0] * count
        # (time, GPUs in use per share, GPUs borrowed per share) from that time on. Nothing in use from the
        # start: a window in which nothing changes is a series of zeros per share, not an empty one.
        self.series: Series = [(start, (0,) * count, (0,) * count)]
        self._type_rates: dict[str, tuple[list[int], list[int], list[int]]] = {}
        self._loans: dict[tuple[str, int, tuple[int, ...]], tuple[int, ...]] = {}
        self._stale: set[str] = set()
        self._rates = ([0] * count, [0] * count, [0] * count)
        self._plans_changed = False
        self._type_limits: dict[str, list[int]] = {}  # type -> limit per share
        self._lenders = [lends(self.strategies[s]) for s in share_ids]

    def gpus_of(self, instance_type: str) -> int:
        return self.gpus.get(instance_type, 1)

    def change(self, at: float, share_id: int, instance_type: str, plan: str | None, instances: int) -> None:
        """`instances` (negative: released) of a type, on demand or on `plan`, for a share from time `at`."""
        self.advance(at)
        i = self.position[share_id]
        if plan is not None:
            self.plan_gpus[i] += instances * self.gpus_of(instance_type)
            self._plans_changed = True
            return
        held = self.instances.get(instance_type)
        if held is None:
            held = self.instances[instance_type] = [0] * len(self.share_ids)
        held[i] += instances
        self._stale.add(instance_type)

    def advance(self, to: float) -> None:
        """Add the current rates over [time, to)."""
        if to <= self.time:
            return
        used, borrowed, lent = self.rates()
        elapsed = to - self.time
        plan_gpus = self.plan_gpus
        for i in range(len(self.share_ids)):
            if used[i]:
                self.on_demand[i] += used[i] * elapsed
            if borrowed[i]:
                self.borrowed[i] += borrowed[i] * elapsed
            if lent[i]:
                self.lent[i] += lent[i] * elapsed
            if plan_gpus[i]:
                self.on_plan[i] += plan_gpus[i] * elapsed
        self.time = to

    def rates(self) -> tuple[list[int], list[int], list[int]]:
        """GPUs per share now: on demand, borrowed, lent (and the series extended when they changed)."""
        if not self._stale and not self._plans_changed:
            return self._rates
        for instance_type in self._stale:
            self._type_rates[instance_type] = self._rates_of_type(instance_type)
        self._stale.clear()
        self._plans_changed = False
        by_type = self._type_rates.values()
        if by_type:
            used = list(map(sum, zip(*(rates[0] for rates in by_type), strict=True)))
            borrowed = list(map(sum, zip(*(rates[1] for rates in by_type), strict=True)))
            lent = list(map(sum, zip(*(rates[2] for rates in by_type), strict=True)))
        else:
            count = len(self.share_ids)
            used, borrowed, lent = [0] * count, [0] * count, [0] * count
        self._rates = (used, borrowed, lent)
        point = (self.time, tuple(map(add, used, self.plan_gpus)), tuple(borrowed))
        if self.series and self.series[-1][0] == self.time:
            self.series[-1] = point
        else:
            self.series.append(point)
        return self._rates

    def _rates_of_type(self, instance_type: str) -> tuple[list[int], list[int], list[int]]:
        held = self.instances[instance_type]
        limits = self._limits_of(instance_type)
        gpus = self.gpus_of(instance_type)
        used = [n * gpus for n in held]
        over = [n - limit if n > limit else 0 for n, limit in zip(held, limits, strict=True)]
        if not any(over):
            return used, [0] * len(held), [0] * len(held)
        borrowed = [n * gpus for n in over]
        # What a share lends depends only on the total borrowed and on what each lender leaves idle.
        idle = tuple(
            limit - n if lends and limit > n else 0
            for n, limit, lends in zip(held, limits, self._lenders, strict=True)
        )
        key = (instance_type, sum(over), idle)
        loans = self._loans.get(key)
        if loans is None:
            loans = self._loans[key] = self._lent(instance_type, held)
        return used, borrowed, [n * gpus for n in loans]

    def _limits_of(self, instance_type: str) -> list[int]:
        limits = self._type_limits.get(instance_type)
        if limits is None:
            limits = self._type_limits[instance_type] = [
                self.limits[s].get(instance_type, 0) for s in self.share_ids
            ]
        return limits

    def _lent(self, instance_type: str, held: list[int]) -> tuple[int, ...]:
        """What each share lends of the type: the `lent` of `share_usage`'s rows, without the loans between
        shares that it also works out."""
        _, lent = lent_of_type(
            capacity=self.capacity.get(instance_type, 0),
            limit=dict(zip(self.share_ids, self._limits_of(instance_type), strict=True)),
            used=dict(zip(self.share_ids, held, strict=True)),
            lenders=[s for s, lends in zip(self.share_ids, self._lenders, strict=True) if lends],
            lending_limit={
                s: types[instance_type] for s, types in self.lending_limits.items() if instance_type in types
            },
        )
        return tuple(lent.get(s, 0) for s in self.share_ids)


def bucket_series(
    series: Series, *, start: float, end: float, buckets: int
) -> tuple[list[float], list[list[float]], list[list[float]]]:
    """Time-weighted mean GPUs in use and borrowed per share in `buckets` equal slices of [start, end)."""
    width = (end - start) / buckets if end > start else 1.0
    count = len(series[0][1]) if series else 0
    used = [[0.0] * buckets for _ in range(count)]
    borrowed = [[0.0] * buckets for _ in range(count)]
    for index, (at, in_use, over) in enumerate(series):
        until = series[index + 1][0] if index + 1 < len(series) else end
        at, until = max(at, start), min(until, end)
        while at < until:
            slot = min(buckets - 1, int((at - start) / width))
            slot_end = min(until, start + (slot + 1) * width)
            if slot_end <= at:  # rounding at a slot edge
                slot_end = until
            weight = (slot_end - at) / width
            for i in range(count):
                if in_use[i]:
                    used[i][slot] += in_use[i] * weight
                if over[i]:
                    borrowed[i][slot] += over[i] * weight
            at = slot_end
    times = [start + (i + 0.5) * width for i in range(buckets)]
    return times, used, borrowed


class Unmetered:
    """In place of a `UsageMeter` in a replay whose usage over time nobody reads: takes the same calls and
    keeps nothing."""

    def change(self, at: float, share_id: int, instance_type: str, plan: str | None, instances: int) -> None:
        pass

    def advance(self, to: float) -> None:
        pass
