"""The scheduling pass (SPEC section 3): housekeeping, order heads, nominate, preempt, place, explain.

One call, one queue, one snapshot; nothing is read but the snapshot and nothing is written but the decisions.

Graceful stops (SPEC 3.4): a preemptor whose victims include a taken job is nominated, not placed; jobs
nominated by earlier passes are settled first (`PassRun.place_nominated_first`), so while their victims
stop their instances are earmarked and nobody preempts again on their behalf.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import messages
from .budgets import stops_all_starts
from .capacity import WorkingState
from .fit import (
    Fit,
    borrowed_by_placement,
    first_fit_without_preemption,
    fits_once_settled,
    on_demand_entry_fits,
)
from .housekeeping import (
    drain_expiring_plans,
    restore_capacity_limits,
    restore_plan_limits,
    time_out_pending_jobs,
)
from .order import HeadOrder, fair_share_of, queue_key, share_queues
from .preemption import first_fit_with_preemption, preempt, preemption_kind
from .reasons import (
    PendingReasons,
    budget_spent_reason,
    held_by_strict_fifo_reason,
    nominated_reason,
    preempted_reason,
    queue_disabled_reason,
    share_disabled_reason,
)
from .refusals import Refusals
from .types import (
    Admission,
    Decisions,
    Job,
    JobStatus,
    Nominate,
    Ordering,
    PassStats,
    Pending,
    PreemptionKind,
    Share,
    Snapshot,
)


def schedule(snapshot: Snapshot, *, explain: bool = True) -> Decisions:
    """One pass over one queue: same snapshot in, same decisions out.

    `explain=False` leaves `Decisions.pending` empty (no reasons, no queue positions) and decides the rest
    exactly as with it: the reasons are worked out after every decision, read-only, for a caller that only
    needs the decisions (the start-time estimator's forward replay).
    """
    state = WorkingState(snapshot)
    run = PassRun(state)
    drained = drain_expiring_plans(state, run.decisions)
    timed_out = time_out_pending_jobs(state, run.decisions)
    restore_capacity_limits(state, run.decisions)
    restore_plan_limits(state, run.decisions)
    waiting = JobStatus.RUNNABLE  # looked up once: an enum member is a class attribute lookup each time
    runnable = [job for job in state.jobs if job.status == waiting and job.id not in timed_out]
    runnable += drained
    left: dict[int, list[Job]] = {}
    unordered = runnable
    if snapshot.queue_enabled:
        # A disabled share, or one whose ALL budget is spent, starts nothing: its jobs are only explained.
        starting = {share.id for share in state.shares.values() if starts_jobs(share)}
        unordered = [job for job in runnable if job.share_id not in starting]
        schedulable = [job for job in runnable if job.share_id in starting]
        placed_first = run.place_nominated_first([job for job in schedulable if job.nomination is not None])
        schedulable = [job for job in schedulable if job.id not in placed_first]
        left = run.place_in_order(share_queues(schedulable), allow_preemption=True)
        if any(p.preemptor_job_id is not None for p in run.decisions.preemptions):
            left = run.sweep(left)
    run.lapse_nominations(
        job.id for job in state.jobs if job.nomination is not None and job.id not in run.nomination_holds
    )
    if explain:
        run.explain_pending(unordered, left)
    run.decisions.stats = pass_stats(run.decisions, run.considered)
    return run.decisions


def starts_jobs(share: Share) -> bool:
    """A share places jobs while enabled and not held back by a spent budget of scope ALL (SPEC 2.1)."""
    return share.enabled and not stops_all_starts(share.budget)


def nomination_still_valid(state: WorkingState, job: Job) -> bool:
    """A nomination lapses at once when its entry is gone or on a plan (its share and queue are enabled)."""
    index = job.nomination.entry_index
    return 0 <= index < len(job.entries) and job.entries[index].training_plan is None


def victims_still_stopping(state: WorkingState, job: Job) -> list[int]:
    """The nominated job's victims that are still STOPPING (a victim gone from the snapshot has stopped)."""
    instance_type = job.entries[job.nomination.entry_index].instance_type
    stopping = state.stopping_jobs.get(instance_type, {})
    return sorted(job_id for job_id in job.nomination.victim_ids if job_id in stopping)


@dataclass
class PassRun:
    """The decisions of one pass so far, and what became of each job it looked at."""

    # Park shares that refuse all (`refusals`); off only to hold it to taking every head one by one.
    park_refusing_shares = True

    state: WorkingState
    decisions: Decisions = field(default_factory=Decisions)
    considered: set[int] = field(default_factory=set)
    held_behind: dict[int, int] = field(default_factory=dict)
    # Jobs that end the pass nominated (kept from the snapshot or new): entry index and the STOPPING jobs
    # they wait for; and every job whose nomination, old or new, stands or was replaced by an admission.
    waiting: dict[int, tuple[int, list[int]]] = field(default_factory=dict)
    nomination_holds: set[int] = field(default_factory=set)

    def place_nominated_first(self, nominated: list[Job]) -> set[int]:
        """Nominated jobs are taken before any other head; returns those it placed.

        Every valid nomination is earmarked first. Then, in head order, each is placed on the first entry that
        fits without preemption (its own earmark freed for it); else, while any of its victims is STOPPING and
        its entry fits once they are gone, it keeps waiting (and its earmark); else its nomination lapses and
        it is an ordinary head of this pass.
        """
        state = self.state
        valid = [job for job in nominated if nomination_still_valid(state, job)]
        for job in valid:
            entry = job.entries[job.nomination.entry_index]
            state.earmark(job.share_id, entry.instance_type, entry.instance_count)
        placed: set[int] = set()
        # The order of SPEC 3.2, FAIR_SHARE included, kept current as each nominated job is placed.
        heads = HeadOrder(share_queues(valid), state.share_under_limit, fair_share_of(state))
        while (job := heads.next_head()) is not None:
            if self.settle_nomination(job):
                placed.add(job.id)
            heads.advance(job.share_id)
        return placed

    def settle_nomination(self, job: Job) -> bool:
        """Place the nominated job, keep it waiting, or let its nomination lapse; True when it was placed."""
        state = self.state
        self.considered.add(job.id)
        entry = job.entries[job.nomination.entry_index]
        state.earmark(job.share_id, entry.instance_type, -entry.instance_count)
        fit = first_fit_without_preemption(state, job)
        if fit is not None:
            self.admit(job, fit)
            self.nomination_holds.add(job.id)
            return True
        stopping = victims_still_stopping(state, job)
        holding = state.holding(job.share_id, entry.instance_type)
        if stopping and fits_once_settled(state, holding, entry.instance_count):
            state.earmark(job.share_id, entry.instance_type, entry.instance_count)
            self.waiting[job.id] = (job.nomination.entry_index, stopping)
            self.nomination_holds.add(job.id)
        return False

    def nominate(self, job: Job, fit: Fit) -> None:
        """The preemptor waits for STOPPING jobs: its entry is earmarked and it is placed by a later pass."""
        state, entry = self.state, fit.entry
        victim_ids = sorted(state.stopping_jobs.get(entry.instance_type, {}))
        state.earmark(job.share_id, entry.instance_type, entry.instance_count)
        self.waiting[job.id] = (fit.entry_index, victim_ids)
        self.nomination_holds.add(job.id)
        self.decisions.nominations.append(
            Nominate(
                job_id=job.id,
                share_id=job.share_id,
                entry_index=fit.entry_index,
                instance_type=entry.instance_type,
                instance_count=entry.instance_count,
                training_plan=entry.training_plan,
                victim_ids=tuple(victim_ids),
                message=messages.nomination_message(state, job, fit, victim_ids),
            )
        )

    def lapse_nominations(self, job_ids) -> None:
        """A nomination neither kept, renewed nor ended by an admission lapses (the write side clears it)."""
        self.decisions.lapsed_nominations.extend(sorted(job_ids))

    def place_in_order(self, queues: dict[int, list[Job]], *, allow_preemption: bool) -> dict[int, list[Job]]:
        """Take the best head across shares until none is left; returns each share's jobs left unplaced.

        Under BEST_EFFORT_FIFO a share none of whose jobs can be placed or preempt for as things stand is
        parked (`HeadOrder.park`, `refusals`): its jobs are refused in bulk, exactly where one by one they
        would have been, and after each change of state a parked share is asked again.
        """
        state = self.state
        strict = state.snapshot.ordering == Ordering.STRICT_FIFO
        heads = HeadOrder(queues, state.share_under_limit, fair_share_of(state))
        refusals = None
        if not strict and self.park_refusing_shares:
            refusals = Refusals(state, allow_preemption=allow_preemption)
        left: dict[int, list[Job]] = {share_id: [] for share_id in queues}
        self.held_behind = {}

        def refused(share_id: int, jobs: list[Job]) -> None:
            left[share_id].extend(jobs)
            self.considered.update(job.id for job in jobs)

        while (job := heads.next_head()) is not None:
            share_id = job.share_id
            if refusals is not None and refusals.refuses_all(share_id, job.priority):
                heads.park(share_id)
                continue
            self.considered.add(job.id)
            changes = state.changes
            placed = self.try_place(job, heads, allow_preemption=allow_preemption)
            for share_refused in heads.refused:
                refused(*share_refused)
            heads.refused.clear()
            if placed:
                heads.advance(share_id)
            elif strict:
                blocked = heads.block(share_id)
                left[share_id].extend(blocked)
                for held in blocked[1:]:
                    self.held_behind[held.id] = job.id
            else:
                left[share_id].append(job)
                heads.advance(share_id)
            if state.changes != changes and refusals is not None and heads.parked:
                heads.passed()
                touched = [name for name, at in state.type_changed.items() if at > changes]
                plans = state.plans_changed > changes
                for parked in heads.parked:
                    head = heads.parked_head(parked)
                    if not refusals.still_refuses(parked, head.priority, touched, plans):
                        refused(parked, heads.unpark(parked))
        if refusals is not None:
            for share_id, jobs in heads.refuse_parked().items():
                refused(share_id, jobs)
        return left

    def sweep(self, left: dict[int, list[Job]]) -> dict[int, list[Job]]:
        """Work conservation: after preemptions freed capacity, retry what was left, without preemption.

        Only a preemption frees capacity during a pass and the sweep preempts nobody, so one sweep is enough,
        and a job that does not fit when the sweep starts cannot fit later in it: under BEST_EFFORT_FIFO only
        those that fit now are put through the order again. STRICT_FIFO queues go through whole, so a head
        that still does not fit keeps holding the jobs behind it.
        """
        if self.state.snapshot.ordering == Ordering.STRICT_FIFO:
            return self.place_in_order(left, allow_preemption=False)
        refusals = Refusals(self.state, allow_preemption=False) if self.park_refusing_shares else None
        candidates = {
            share_id: [job for job in jobs if first_fit_without_preemption(self.state, job) is not None]
            for share_id, jobs in left.items()
            if jobs and (refusals is None or not refusals.refuses_all(share_id, jobs[0].priority))
        }
        if any(candidates.values()):
            self.place_in_order(candidates, allow_preemption=False)
        placed = self.state.placed_in_pass
        return {share_id: [job for job in jobs if job.id not in placed] for share_id, jobs in left.items()}

    def try_place(self, job: Job, heads: HeadOrder, *, allow_preemption: bool) -> bool:
        """Preference evaluation: the first entry that fits without preemption, else with preemption.

        A nominated job waits (its share's next job is tried, or under STRICT_FIFO its share is held).
        """
        if job.id in self.waiting:
            return False
        fit = first_fit_without_preemption(self.state, job)
        preempting = fit is None and allow_preemption
        if preempting:
            fit = first_fit_with_preemption(self.state, job)
        if fit is None:
            return False
        graceful = False
        for victim in fit.victims:
            preemption = preempt(
                self.state, self.decisions, victim, kind=preemption_kind(victim, job), preemptor=job
            )
            graceful |= preemption.graceful
            heads.refresh(victim.share_id)
        if preempting and must_wait_for_stopping_jobs(self.state, job, fit, graceful):
            self.nominate(job, fit)
            return False
        self.admit(job, fit)
        return True

    def admit(self, job: Job, fit: Fit) -> None:
        entry = fit.entry
        borrowed = 0
        if entry.training_plan is None:
            borrowed = borrowed_by_placement(
                self.state.holding(job.share_id, entry.instance_type), entry.instance_count
            )
        self.state.place(job, entry.instance_type, entry.instance_count, entry.training_plan)
        if job.nomination is not None:  # the admission ends it: the write side clears it
            self.nomination_holds.add(job.id)
        self.decisions.admissions.append(
            Admission(
                job_id=job.id,
                share_id=job.share_id,
                entry_index=fit.entry_index,
                instance_type=entry.instance_type,
                instance_count=entry.instance_count,
                training_plan=entry.training_plan,
                borrowed=borrowed,
                message=messages.admission_message(job, fit, borrowed),
            )
        )

    def explain_pending(self, unordered: list[Job], left: dict[int, list[Job]]) -> None:
        """Every job left RUNNABLE gets a reason and its 1-based position among its share's RUNNABLE jobs.

        `left` holds each share's jobs left by the order, in queue order already; this pass's victims and the
        jobs that never went through the order (queue or share disabled) join them.
        """
        state = self.state
        why_entries_do_not_fit = PendingReasons(state).why_entries_do_not_fit
        victims = {p.job_id: p for p in self.decisions.preemptions if not p.fails and not p.graceful}
        held_behind = self.held_behind
        pending = self.decisions.pending
        joining = share_queues([job for job in state.jobs if job.id in victims] + unordered)
        for share_id in sorted(set(left) | set(joining)):
            share_queue = left.get(share_id, [])
            if share_id in joining:
                share_queue = sorted(share_queue + joining[share_id], key=queue_key)
            share = state.shares[share_id]
            # One text for every job of a share whose budget is spent: it may hold thousands.
            spent = budget_spent_reason(share) if stops_all_starts(share.budget) else None
            for position, job in enumerate(share_queue, start=1):
                if job.id in victims:
                    reason = preempted_reason(state, job, victims[job.id])
                elif job.id in self.waiting:
                    reason = nominated_reason(state, job, *self.waiting[job.id])
                elif not state.snapshot.queue_enabled:
                    reason = queue_disabled_reason()
                elif not share.enabled:
                    reason = share_disabled_reason(share.name)
                elif spent is not None:
                    reason = spent
                elif job.id in held_behind:
                    reason = held_by_strict_fifo_reason(state, job, held_behind[job.id])
                else:
                    reason = why_entries_do_not_fit(job)
                pending.append(Pending(job.id, share_id, reason, position))


def must_wait_for_stopping_jobs(state: WorkingState, job: Job, fit: Fit, graceful: bool) -> bool:
    """Nominate rather than place: a victim is STOPPING, or the entry's room is still held by STOPPING jobs."""
    if graceful:
        return True
    if not state.ledgers[fit.entry.instance_type].settling:
        return False
    return not on_demand_entry_fits(state, job.share_id, fit.entry)


def pass_stats(decisions: Decisions, considered: set[int]) -> PassStats:
    """The pass record of SPEC section 3, derived from the decisions so it cannot disagree with them."""
    stats = PassStats(
        jobs_considered=len(considered),
        plan_drains=len(decisions.drains),
        timeouts=len(decisions.timeouts),
        preemptions={kind.value: 0 for kind in PreemptionKind},
    )
    for admission in decisions.admissions:
        if admission.training_plan is not None:
            stats.placed_on_plan += 1
        elif admission.borrowed > 0:
            stats.placed_borrowing += 1
        else:
            stats.placed_within_quota += 1
        if admission.entry_index > 0:
            stats.fallbacks += 1
    for preemption in decisions.preemptions:
        stats.preemptions[preemption.kind.value] += 1
    return stats
