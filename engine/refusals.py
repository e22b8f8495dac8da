"""Shares whose every waiting job is refused as things stand: taken out of the order until something changes.

A pass over a busy queue takes thousands of heads, and most fail: their share has no room left on any type it
could use, and preemption has nothing to offer it. Each failure is a lookup or two, but one per job. This
module answers for a whole share at once: at the current state, can *any* job of the share, at the priority of
its head or below, be placed or make room by preemption? If not, `HeadOrder.park` takes the share out of the
order, and its jobs are refused in bulk up to the moment the state changes (an admission, a preemption, an
earmark) and the answer may change; then the share is asked again, and either stays out or goes back in.

The answer is "refuses all" only when, for every instance type of the queue, one instance fits neither now nor
once settled, and preemption's cheap bound
(`preemption.room_by_preemption_possible`) says no room can be made for it at the head's priority; and no plan
the share may use has room for one instance. Every one of these only gets harder with more instances (entries
ask for at least one, behaviour.md#what-there-is) and with a lower priority (fewer of the share's own jobs rank below
it), and the share's queue runs from its highest priority down, so the jobs behind its head are refused exactly as they
would be one by one: same decisions, same reasons. What a check of one type read changes only with that type
(`WorkingState.type_changed`), so a share is asked again only about the types a change touched.
"""

from __future__ import annotations

from typing import NamedTuple

from .capacity import WorkingState
from .fit import on_demand_entry_fits, plan_entry_fits
from .preemption import room_by_preemption_possible
from .types import Entry


class Refusals:
    """Whether a share refuses every job from a priority down, kept per (share, type) while the type stands
    and per share while nothing changed."""

    __slots__ = ("state", "allow_preemption", "_by_type", "_by_plans", "_by_share", "_types")

    def __init__(self, state: WorkingState, *, allow_preemption: bool):
        self.state = state
        self.allow_preemption = allow_preemption
        # (share, type) -> the answer for one instance of the type and what it was worked out at (`_Known`)
        self._by_type: dict[tuple[int, str], _Known] = {}
        # share -> (the plans' change count, refuses)
        self._by_plans: dict[int, tuple[int, bool]] = {}
        # share -> (the state's change count, priority, refuses, whether the answer holds at any priority)
        self._by_share: dict[int, tuple[int, int, bool, bool]] = {}
        self._types = {instance_type: Entry(instance_type, 1) for instance_type in state.ledgers}

    def refuses_all(self, share_id: int, priority: int) -> bool:
        """No job of the share at `priority` or below can be placed or preempt for, at the current state."""
        changes = self.state.changes
        known = self._by_share.get(share_id)
        if known is not None and known[0] == changes:
            _, at, refuses, any_priority = known
            if refuses and priority <= at:
                return True
            if not refuses and (any_priority or priority >= at):
                return False
        refuses, any_priority = True, True
        for instance_type in self._types:
            verdict = self._type_verdict(share_id, instance_type, priority)
            if verdict != _REFUSED:
                refuses, any_priority = False, verdict == _FITS
                break
        if refuses:
            refuses = self._plans_refuse(share_id)
            any_priority = not refuses
        self._by_share[share_id] = (changes, priority, refuses, any_priority)
        return refuses

    def still_refuses(self, share_id: int, priority: int, types: list[str], plans: bool) -> bool:
        """`refuses_all` for a share that refused all at `priority` before changes that touched only `types`
        (and the plans if `plans`): the other types are as they were, so only these are asked again."""
        for instance_type in types:
            if (
                instance_type in self._types
                and self._type_verdict(share_id, instance_type, priority) != _REFUSED
            ):
                return False
        if plans and not self._plans_refuse(share_id):
            return False
        self._by_share[share_id] = (self.state.changes, priority, True, True)
        return True

    def _type_verdict(self, share_id: int, instance_type: str, priority: int) -> int:
        state = self.state
        changed = state.type_changed.get(instance_type, 0)
        holding = state.holding(share_id, instance_type)
        ledger = state.ledgers[instance_type]
        key = (share_id, instance_type)
        known = self._by_type.get(key)
        if known is not None:
            verdict = known.verdict
            if known.changed == changed:
                # Refused at a priority: refused below it too; room by preemption at one: above it too.
                if verdict == _FITS or (verdict == _REFUSED and priority <= known.priority):
                    return verdict
                if verdict == _MAY_PREEMPT and priority >= known.priority:
                    return verdict
            elif (
                verdict == _REFUSED
                and priority <= known.priority
                and known.eased == state.type_eased.get(instance_type, 0)
                and known.version == holding.version
                and ledger.reclaimable <= known.reclaimable
            ):
                # Only admissions of other shares since: no more room for it, and no more to reclaim.
                return _REFUSED
        verdict = self._one_instance(share_id, instance_type, priority)
        self._by_type[key] = _Known(
            changed,
            state.type_eased.get(instance_type, 0),
            holding.version,
            ledger.reclaimable,
            priority,
            verdict,
        )
        return verdict

    def _one_instance(self, share_id: int, instance_type: str, priority: int) -> int:
        state = self.state
        if on_demand_entry_fits(state, share_id, self._types[instance_type]):
            return _FITS
        if not self.allow_preemption:
            return _REFUSED
        if room_by_preemption_possible(state, share_id, priority, instance_type, 1):
            return _MAY_PREEMPT
        return _REFUSED

    def _plans_refuse(self, share_id: int) -> bool:
        state = self.state
        known = self._by_plans.get(share_id)
        if known is not None and known[0] == state.plans_changed:
            return known[1]
        refuses = not any(
            plan_entry_fits(state, share_id, Entry(plan.instance_type, 1, plan.name))
            for plan in state.plans.values()
        )
        self._by_plans[share_id] = (state.plans_changed, refuses)
        return refuses


_REFUSED, _FITS, _MAY_PREEMPT = 0, 1, 2


class _Known(NamedTuple):
    """One (share, type) answer, and the type as it was: its change counts, the share's holding's version and
    what other shares had to reclaim."""

    changed: int
    eased: int
    version: int
    reclaimable: int
    priority: int
    verdict: int
