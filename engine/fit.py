"""Preference evaluation without preemption (behaviour.md#preference-evaluation): does an entry fit the state as it is
now?"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .capacity import Holding, TypeLedger, WorkingState
from .types import Entry, Job, Plan


@dataclass(frozen=True, slots=True)
class Fit:
    """An entry a job can be placed on, with the victims that must go first (none without preemption)."""

    entry_index: int
    entry: Entry
    victims: tuple[Job, ...] = ()
    # The entry only waits for instances being freed by STOPPING jobs (`fits_once_freed`): no victim, no place.
    waits_for_freeing: bool = False


# --- training plan entries -------------------------------------------------------------------------------


def plan_is_active(plan: Plan, now: datetime) -> bool:
    """A plan is ACTIVE from start_time (inclusive) to end_time (exclusive)."""
    return plan.start_time <= now < plan.end_time


def plan_is_draining(plan: Plan, now: datetime, drain_seconds: int) -> bool:
    """A plan ending within PLAN_DRAIN_SECONDS (or already ended) takes no jobs and stops those it holds."""
    return plan.end_time - now <= timedelta(seconds=drain_seconds)


def plan_open_to_share(plan: Plan, share_id: int) -> bool:
    """A plan with no quota shares listed is open to every share of the queue."""
    return not plan.share_ids or share_id in plan.share_ids


def plan_has_room(state: WorkingState, plan: Plan, count: int) -> bool:
    """Invariant D: a plan's instances in use never exceed its instance_count."""
    return state.plan_free(plan) >= count


def plan_entry_fits(state: WorkingState, share_id: int, entry: Entry) -> bool:
    """A plan entry fits if the plan is ACTIVE, not draining, open to the share, of the type, and has room."""
    plan = state.plans.get(entry.training_plan)
    return (
        plan is not None
        and plan.instance_type == entry.instance_type
        and plan_open_to_share(plan, share_id)
        and plan_is_active(plan, state.now)
        and not plan_is_draining(plan, state.now, state.snapshot.plan_drain_seconds)
        and plan_has_room(state, plan, entry.instance_count)
    )


# --- on-demand entries -----------------------------------------------------------------------------------


def within_own_quota(holding: Holding, usage_after: int) -> bool:
    """A placement is within the share's own quota when usage + n <= limit; anything above is borrowing."""
    return usage_after <= holding.limit


def within_share_ceiling(holding: Holding, usage_after: int) -> bool:
    """Invariant C: only LEND_AND_BORROW goes above its limit, and then at most by its borrow limit."""
    return holding.ceiling is None or usage_after <= holding.ceiling


def within_lendable_capacity(
    ledger: TypeLedger, holding: Holding, in_use_or_reserved: int, usage_before: int, usage_after: int
) -> bool:
    """Invariant B: the sum over shares of max(usage, reserved) stays within capacity (RESERVE idle kept)."""
    change = max(usage_after, holding.reserved) - max(usage_before, holding.reserved)
    return in_use_or_reserved + change <= ledger.capacity


def no_worse_now(
    ledger: TypeLedger,
    holding: Holding,
    in_use_or_reserved: int,
    used: int,
    usage_before: int,
    usage_after: int,
    stopping: bool,
) -> bool:
    """Invariant B now, STOPPING jobs holding: it holds after the placement, or (while jobs stop, so the sum
    may be over a lowered capacity until they are gone) the placement leaves it as it was, being within what
    the share keeps (a RESERVE share, the unlendable part of any share), on instances free now (invariant A)."""
    change = max(usage_after, holding.reserved) - max(usage_before, holding.reserved)
    if in_use_or_reserved + change <= ledger.capacity:
        return True
    return stopping and change == 0 and used + usage_after - usage_before <= ledger.capacity


def fits_now(state: WorkingState, holding: Holding, count: int) -> bool:
    """The share rule and the lendable capacity allow `count` more instances, STOPPING jobs still holding."""
    usage_after = holding.usage + count
    if not within_share_ceiling(holding, usage_after):
        return False
    ledger = state.ledgers[holding.instance_type]
    return no_worse_now(
        ledger,
        holding,
        ledger.in_use_or_reserved,
        ledger.used,
        holding.usage,
        usage_after,
        ledger.stopping > 0,
    )


def fits_once_settled(state: WorkingState, holding: Holding, count: int) -> bool:
    """Earmarks: the same `count` more also fits once STOPPING jobs are gone and nominated jobs are placed
    (invariant B strictly: every invariant holds once settled)."""
    ledger = state.ledgers[holding.instance_type]
    if not ledger.settling:
        return True
    usage = state.settled_usage(holding)
    if not within_share_ceiling(holding, usage + count):
        return False
    settled = state.settled_in_use_or_reserved(holding.instance_type)
    return within_lendable_capacity(ledger, holding, settled, usage, usage + count)


def on_demand_entry_fits(state: WorkingState, share_id: int, entry: Entry) -> bool:
    """An on-demand entry fits when it fits now and once the stopping and nominated jobs have settled."""
    holding = state.holding(share_id, entry.instance_type)
    return fits_now(state, holding, entry.instance_count) and fits_once_settled(
        state, holding, entry.instance_count
    )


def fits_once_freed(state: WorkingState, holding: Holding, count: int) -> bool:
    """behaviour.md#preemption: the entry would fit (now and once settled) once the STOPPING jobs that are no nominee's
    victims are gone. Such a job waits for them, RUNNABLE: room already on its way is never preempted for
    a second time, nor earmarked for anyone. False when no such job holds instances of the type."""
    instance_type = holding.instance_type
    ledger = state.ledgers[instance_type]
    if not ledger.stopping:
        return False
    freeing = state.freeing(instance_type)
    if not freeing:
        return False
    usage = holding.usage - freeing.get(holding.share.id, 0)
    if not within_share_ceiling(holding, usage + count):
        return False
    in_use_or_reserved = sum(
        max(other.usage - freeing.get(other.share.id, 0), other.reserved)
        for other in state.holdings_of_type(instance_type)
    )
    used = ledger.used - sum(freeing.values())
    still_stopping = ledger.stopping > sum(freeing.values())
    if not no_worse_now(ledger, holding, in_use_or_reserved, used, usage, usage + count, still_stopping):
        return False
    return fits_once_settled(state, holding, count)


def entry_fits_without_preemption(state: WorkingState, share_id: int, entry: Entry) -> bool:
    """A plan entry fits on the plan alone; an on-demand entry within quota or by borrowing."""
    if entry.training_plan is not None:
        return plan_entry_fits(state, share_id, entry)
    return on_demand_entry_fits(state, share_id, entry)


def first_fit_without_preemption(state: WorkingState, job: Job) -> Fit | None:
    """The job's first entry, in preference order, that fits without preempting anyone.

    Between two releases of capacity of a type, usage of that type only grows, so an entry that did not fit
    still does not, nor does a larger one of the same share and plan: `state.no_fit` remembers the smallest
    count that failed, and a release forgets the type. Most RUNNABLE jobs of a busy queue are then refused
    by lookups.
    """
    no_fit = state.no_fit
    for index, entry in enumerate(job.entries):
        key = (job.share_id, entry.training_plan)
        if no_fit.known_to_fail(entry.instance_type, key, entry.instance_count):
            continue
        if entry_fits_without_preemption(state, job.share_id, entry):
            return Fit(index, entry)
        no_fit.record(entry.instance_type, key, entry.instance_count)
    return None


def borrowed_by_placement(holding: Holding, count: int) -> int:
    """Instances of a placement above the share's limit: max(0, after - limit) - max(0, before - limit)."""
    return max(0, holding.usage + count - holding.limit) - holding.borrowed
