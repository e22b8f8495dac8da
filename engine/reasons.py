"""Why pending (behaviour.md#why-pending-and-when-it-will-start): for each job left RUNNABLE, entry by entry, why it
does not fit, read off the state at the end of the pass, in words a person can act on.
"""

from __future__ import annotations

from .budgets import budget_spent_words, stops_borrowing
from .capacity import Holding, TypeLedger, WorkingState
from .fit import (
    fits_now,
    fits_once_freed,
    fits_once_settled,
    plan_has_room,
    plan_is_active,
    plan_is_draining,
    plan_open_to_share,
    within_own_quota,
    within_share_ceiling,
)
from .messages import job_label, labels_of_ids, when
from .preemption import (
    in_share_usage,
    preemption_may_make_room,
    protected_until,
    protections_lifted,
    select_victims,
)
from .types import Entry, Job, Preemption, PreemptionKind, Share, Strategy

PREEMPTION_NEXT_PASS = "preemption can make room from the next pass"
WAITS_FOR_FREEING = "waits for instances being freed"
NO_PREEMPTION_WHILE_FREEING = "no preemption while an earlier entry waits for instances being freed"


def queue_disabled_reason() -> str:
    return "job queue is disabled: no job is placed until it is enabled"


def share_disabled_reason(share_name: str) -> str:
    return f"share {share_name} is disabled: its RUNNABLE jobs are not placed until it is enabled"


def budget_spent_reason(share: Share) -> str:
    """behaviour.md#gpu-hour-budgets: a share whose ALL budget is spent starts no new job until the period ends."""
    return f"share {share.name}: {budget_spent_words(share.budget)}"


def held_by_strict_fifo_reason(state: WorkingState, job: Job, blocking_job_id: int) -> str:
    blocking = labels_of_ids(state, [blocking_job_id], job)
    return f"held by STRICT_FIFO behind {blocking}, which cannot be placed yet"


def preempted_reason(state: WorkingState, job: Job, preemption: Preemption) -> str:
    if preemption.kind == PreemptionKind.LIMIT_REDUCED:
        return "preempted in this pass because capacity was lowered (will be retried next pass)"
    share = state.shares[preemption.preemptor_share_id].name
    preemptor = labels_of_ids(state, [preemption.preemptor_job_id], job)
    return f"preempted in this pass by {preemptor} of share {share} (will be retried next pass)"


def nominated_reason(state: WorkingState, job: Job, entry_index: int, stopping_ids: list[int]) -> str:
    """What a nominated job waits for, and until when (the latest deadline of the jobs it waits for)."""
    entry = job.entries[entry_index]
    stopping = state.stopping_jobs.get(entry.instance_type, {})
    deadlines = [stopping[job_id].stop_deadline for job_id in stopping_ids if job_id in stopping]
    jobs = labels_of_ids(state, stopping_ids, job)
    # A job that began stopping in this pass has no deadline in the snapshot: the write side sets it.
    if deadlines and None not in deadlines:
        until = f"until {when(max(deadlines))}"
    else:
        until = "until they have stopped (at most the stop grace period)"
    return f"waiting for {entry.instance_type} x{entry.instance_count} held by stopping {jobs} {until}"


class PendingReasons:
    """Entry texts are cached: at the end of the pass the same entry of the same share reads the same."""

    def __init__(self, state: WorkingState):
        self.state = state
        self._entries: dict[tuple[int, int | None, str, int, str | None, int | None], str] = {}
        self._type_details: dict[str, tuple[list[str], int]] = {}

    def why_entries_do_not_fit(self, job: Job) -> str:
        """Each entry's reason, in preference order, joined by "; "."""
        if not job.entries:
            return "the job has no instance preferences"
        # Only in-share preemption depends on the job's own priority.
        priority = job.priority if self.state.shares[job.share_id].in_share_preemption else None
        known = self._entries
        reasons = []
        waiting_for_freeing = False
        for entry in job.entries:
            # The team too: a text names its own team's jobs (a share's jobs are all of one team but for a
            # share moved to another team while its jobs ran).
            key = (
                job.share_id,
                job.team_id,
                entry.instance_type,
                entry.instance_count,
                entry.training_plan,
                priority,
            )
            reason = known.get(key)
            if reason is None:
                reason = known[key] = self.why_entry_does_not_fit(job, entry)
            if waiting_for_freeing and entry.training_plan is None:
                # behaviour.md#preemption: no preemption for an entry after one that waits for instances being freed.
                reason = reason.replace(PREEMPTION_NEXT_PASS, NO_PREEMPTION_WHILE_FREEING)
            elif entry.training_plan is None and WAITS_FOR_FREEING in reason:
                waiting_for_freeing = True
            reasons.append(reason)
        return "; ".join(reasons)

    def why_entry_does_not_fit(self, job: Job, entry: Entry) -> str:
        if entry.training_plan is not None:
            label = f"{entry.instance_type} x{entry.instance_count} on plan {entry.training_plan}"
            return f"{label}: {self.why_plan_entry_does_not_fit(job, entry)}"
        label = f"{entry.instance_type} x{entry.instance_count}"
        return f"{label}: {self.why_on_demand_entry_does_not_fit(job, entry)}"

    def why_plan_entry_does_not_fit(self, job: Job, entry: Entry) -> str:
        state = self.state
        name = entry.training_plan
        plan = state.plans.get(name)
        if plan is None:
            return f"plan {name} does not exist (expired or removed)"
        if plan.instance_type != entry.instance_type:
            return f"plan {name} is for {plan.instance_type}"
        if not plan_open_to_share(plan, job.share_id):
            return f"plan {name} not open to share {state.shares[job.share_id].name}"
        if plan.start_time > state.now:
            return f"plan {name} not yet active (starts at {when(plan.start_time)})"
        if not plan_is_active(plan, state.now):
            return f"plan {name} expired (ended at {when(plan.end_time)})"
        if plan_is_draining(plan, state.now, state.snapshot.plan_drain_seconds):
            return (
                f"plan {name} draining (ends at {when(plan.end_time)}, within the "
                f"{state.snapshot.plan_drain_seconds} s drain window)"
            )
        if not plan_has_room(state, plan, entry.instance_count):
            held = state.plan_in_use.get(name, 0)
            if entry.instance_count > plan.instance_count:
                return f"plan {name} has only {plan.instance_count} instances"
            earmarked = state.plan_earmarked.get(name, 0)
            if earmarked:  # held for jobs moving onto it (relocation.py) until they are placed
                return f"plan {name} full {held}/{plan.instance_count} ({earmarked} earmarked for jobs moving onto it)"
            return f"plan {name} full {held}/{plan.instance_count}"
        return f"plan {name} had no room at this job's turn (it is placed next pass)"

    def why_on_demand_entry_does_not_fit(self, job: Job, entry: Entry) -> str:
        state = self.state
        ledger = state.ledger(entry.instance_type)
        holding = state.holding(job.share_id, entry.instance_type)
        usage_after = holding.usage + entry.instance_count
        if ledger.capacity <= 0:
            return "type not offered by the environment"
        if entry.instance_count > ledger.capacity:
            return f"needs more than the environment's {ledger.capacity} instances"
        if fits_once_freed(state, holding, entry.instance_count):
            return freeing_reason(state, ledger, job)
        if not within_share_ceiling(holding, usage_after):
            reason = share_rule_reason(holding, usage_after)
            if holding.share.in_share_preemption:
                reason += ", " + self.why_preemption_cannot_help(job, entry)
            return reason
        if not fits_now(state, holding, entry.instance_count):
            return (
                self.capacity_reason(ledger, holding, usage_after)
                + stopping_detail(state, ledger, job)
                + ", "
                + self.why_preemption_cannot_help(job, entry)
            )
        if not fits_once_settled(state, holding, entry.instance_count):
            return earmarked_reason(state, ledger, job)
        return "room was freed after this job's turn (it is placed next pass)"

    def capacity_reason(self, ledger: TypeLedger, holding: Holding, usage_after: int) -> str:
        """Why invariant B stops the entry: the environment is full, or what is free is RESERVE idle."""
        borrowers, reserved_idle = self._details_of_type(ledger.instance_type)
        idle_of_others = reserved_idle - max(0, holding.reserved - holding.usage)
        free = ledger.capacity - ledger.used
        if free <= 0:
            head, details = f"environment full {ledger.used}/{ledger.capacity}", borrowers
        elif idle_of_others > 0:
            lendable = max(0, free - idle_of_others)
            held = f"{idle_of_others} held by RESERVE shares idle"
            head = "lendable capacity exhausted"
            details = [f"only {lendable} lendable", held, *borrowers] if lendable else [held, *borrowers]
        else:
            head, details = f"only {free} of {ledger.capacity} free in the environment", borrowers
        return f"{head} ({', '.join(details)})" if details else head

    def why_preemption_cannot_help(self, job: Job, entry: Entry) -> str:
        state = self.state
        if preemption_may_make_room(state, job, entry) and select_victims(state, job, entry) is not None:
            # Borrowed after this job's turn: what a pass places is not preempted before the next pass.
            return PREEMPTION_NEXT_PASS
        waiting = self.protections_waited_for(job, entry)
        if waiting:
            return "waits for protection from early preemption to end: " + waiting
        holding = state.holding(job.share_id, entry.instance_type)
        share = holding.share
        in_share = in_share_usage(state, holding, job.priority)
        why: list[str] = []
        if not within_own_quota(holding, holding.usage - in_share + entry.instance_count):
            why.append(f"no reclaim while share {share.name} would be over its limit")
        else:
            ledger = state.ledgers[entry.instance_type]
            others_borrowed = ledger.borrowed - holding.borrowed
            others_reclaimable = ledger.reclaimable - (holding.victim_usage if holding.over_limit else 0)
            if others_borrowed <= 0:
                why.append("no over-limit borrowers")
            elif others_reclaimable <= 0:
                why.append("borrowers were placed in this pass and are reclaimable from the next")
            else:
                why.append(f"over-limit borrowers hold only {others_borrowed} above their limits")
        if not share.in_share_preemption:
            why.append("in-share preemption disabled")
        elif in_share == 0:
            why.append(f"no lower-priority jobs of share {share.name} on {entry.instance_type}")
        else:
            why.append(f"lower-priority jobs of share {share.name} hold only {in_share}")
        return f"would need preemption but none possible ({', '.join(why)})"

    def protections_waited_for(self, job: Job, entry: Entry) -> str:
        """When preemption could make room but for protected victims: which, and until when ("" otherwise)."""
        state = self.state
        if state.snapshot.preemption_min_runtime_seconds <= 0:
            return ""
        with protections_lifted(state):
            victims = None
            if preemption_may_make_room(state, job, entry):
                victims = select_victims(state, job, entry)
        protected = [(victim, protected_until(state, victim)) for victim in victims or ()]
        return ", ".join(
            f"would preempt {job_label(victim, job)} of share {state.shares[victim.share_id].name}, "
            f"protected until {when(until)}"
            for victim, until in protected
            if until is not None
        )

    def _details_of_type(self, instance_type: str) -> tuple[list[str], int]:
        """Who borrows the type (most first) and how much RESERVE shares hold idle, at the end of the pass."""
        details = self._type_details.get(instance_type)
        if details is None:
            holdings = self.state.holdings_of_type(instance_type)
            borrowers = sorted((-h.borrowed, h.share.name) for h in holdings if h.over_limit)
            reserved_idle = sum(max(0, h.reserved - h.usage) for h in holdings)
            details = self._type_details[instance_type] = (
                [f"{-borrowed} borrowed by {name}" for borrowed, name in borrowers],
                reserved_idle,
            )
        return details


def stopping_detail(state: WorkingState, ledger: TypeLedger, reader: Job) -> str:
    """Instances of the type still held by STOPPING jobs, named (empty when none)."""
    if not ledger.stopping:
        return ""
    stopping = state.stopping_jobs.get(ledger.instance_type, {})
    jobs = ", ".join(job_label(stopping[job_id], reader) for job_id in sorted(stopping))
    return f" ({ledger.stopping} held by stopping {jobs})"


def freeing_reason(state: WorkingState, ledger: TypeLedger, reader: Job) -> str:
    """It would fit once STOPPING jobs that are no nominee's victims are gone: it waits for them, RUNNABLE."""
    freeing = state.freeing_jobs(ledger.instance_type)
    instances = sum(job.placement.instance_count for job in freeing)
    jobs = ", ".join(job_label(job, reader) for job in freeing)
    return f"{WAITS_FOR_FREEING} ({instances} held by stopping {jobs}), preempting nobody for room already on its way"


def earmarked_reason(state: WorkingState, ledger: TypeLedger, reader: Job) -> str:
    """Room there is now, but nominated jobs will hold it once the STOPPING jobs are gone."""
    return (
        f"room held for nominated jobs: {ledger.earmarked} earmarked until stopping jobs are gone"
        f"{stopping_detail(state, ledger, reader)}"
    )


def share_rule_reason(holding: Holding, usage_after: int) -> str:
    """Why invariant C stops it: RESERVE and LEND never borrow, LEND_AND_BORROW is at its borrow limit."""
    share = holding.share
    usage, limit = holding.usage, holding.limit
    if share.strategy != Strategy.LEND_AND_BORROW:
        strategy = Strategy(share.strategy).value
        if limit == 0:
            return f"share {share.name} has no quota for {holding.instance_type} and {strategy} cannot borrow"
        if usage >= limit:
            return f"share {share.name} at its limit {usage}/{limit} and {strategy} cannot borrow"
        return (
            f"share {share.name} has {limit - usage} left of its limit ({usage}/{limit}) "
            f"and {strategy} cannot borrow"
        )
    if stops_borrowing(share.budget):
        head = f"share {share.name} at its limit {usage}/{limit}"
        if usage < limit:
            head = f"share {share.name} has {limit - usage} left of its limit ({usage}/{limit})"
        return f"{head} and borrows no more: {budget_spent_words(share.budget)}"
    most = holding.ceiling - limit
    reason = f"borrow limit reached ({holding.borrowed} borrowed of at most {most}"
    if holding.borrowed < most:
        reason += f", would need {usage_after - limit}"
    return reason + ")"
