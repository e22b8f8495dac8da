"""The placed jobs, on demand summed per share and type (point 1 of `simulator.shortcuts`), with the sums a pass
starts from (usage, invariant B's sum per type, which shares are over a limit, each holding's jobs in reclaim
order), kept as jobs come and go."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Mapping

from engine import (
    Job,
    Share,
)
from engine.capacity import victim_key
from engine.ceilings import reserved_capacity


class PlacedJobs:
    """The placed jobs: on-demand ones by (share, type) with their sum, so a pass can see them summed, and the
    sums over shares a pass starts from, kept as jobs come and go."""

    def __init__(self, shares: Mapping[int, Share]):
        self.shares = shares
        self.on_demand: dict[tuple[int, str], dict[int, int]] = {}  # (share, type) -> job id -> priority
        # (share, type) -> (the engine's victim key, job id, instances) of its jobs, in reclaim order
        self.in_victim_order: dict[tuple[int, str], list[tuple[tuple[int, float, int], int, int]]] = {}
        self._victim_keys: dict[int, tuple[int, float, int]] = {}  # job id -> its victim key, while placed
        self.usage: dict[tuple[int, str], int] = {}  # (share, type) -> instances
        self.types_of: dict[int, dict[str, None]] = {}  # share -> the types it holds on demand
        self.on_plans: dict[int, None] = {}
        self.plan_usage: dict[str, int] = {}  # plan -> instances
        # Invariant B's sum per type: max(usage, reserved) over shares (reserved 0 where a share has no limit)
        self.in_use_or_reserved: dict[str, int] = {}
        self.over_limit: dict[int, int] = {}  # share -> how many of its holdings are over their limit
        self.generation: dict[int, int] = {}  # share -> bumped at every change of its on-demand usage
        self._reserved_by_holding: dict[tuple[int, str], int] = {}  # (share, type) -> its reserved capacity
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
        found = self._victim_keys[job.id] = victim_key(job, placement)
        insort(self.in_victim_order[key], (found, job.id, placement.instance_count))
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
        del in_order[bisect_left(in_order, (self._victim_keys.pop(job.id), job.id))]
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
        return max(self.usage.get((share_id, instance_type), 0), self._reserved(share_id, instance_type))

    def _reserved(self, share_id: int, instance_type: str) -> int:
        key = (share_id, instance_type)
        reserved = self._reserved_by_holding.get(key)
        if reserved is None:
            share = self.shares[share_id]
            reserved = self._reserved_by_holding[key] = reserved_capacity(
                share.strategy, share.limits.get(instance_type, 0), share.lending_limits.get(instance_type)
            )
        return reserved

    def _change(self, key: tuple[int, str], count: int) -> None:
        share_id, instance_type = key
        before = self.usage.get(key, 0)
        reserved = self._reserved(share_id, instance_type)
        self.usage[key] = after = before + count
        # Invariant B's sum: the holding's max(usage, reserved) before and after
        self.in_use_or_reserved[instance_type] = (
            self.in_use_or_reserved.get(instance_type, 0) + max(after, reserved) - max(before, reserved)
        )
        limit = self.shares[share_id].limits.get(instance_type, 0)
        over = (after > limit) - (before > limit)
        if over:
            self.over_limit[share_id] = self.over_limit.get(share_id, 0) + over
        self.generation[share_id] = self.generation.get(share_id, 0) + 1
        self.changes += 1
        self.type_changed[instance_type] = self.changes
