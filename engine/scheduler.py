"""The scheduling pass (behaviour.md#the-scheduling-pass): housekeeping, order heads, nominate, preempt, place, explain.

One call, one queue, one snapshot; nothing is read but the snapshot and nothing is written but the decisions.

Graceful stops (behaviour.md#preemption): a preemptor whose own victims include a taken job, and whose entry does not
fit until they are gone, is nominated for them alone; jobs nominated by earlier passes are settled first
(`PassRun.place_nominated_first`), so while their victims stop their instances are earmarked and nobody
preempts again on their behalf. A nominee that fits on free capacity is placed at once. Instances held by
STOPPING jobs that are no nominee's victims are held for nobody: a job that would fit once they are gone
waits for them, RUNNABLE (`fit.fits_once_freed`). See docs/engine-graceful-stops.md.

Relocation (behaviour.md#moving-to-a-preferred-entry, `relocation.py`): after the heads are placed, running jobs that
opted in may move to an earlier entry; a moved job is nominated there as a preemptor is, its entry earmarked (on a plan
too) while it stops. See docs/relocation.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter

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
from .relocation import hold_relocation_earmarks, is_relocation, relocate
from .types import (
    Admission,
    Decisions,
    Job,
    Nominate,
    Ordering,
    PassStats,
    Pending,
    PreemptionKind,
    Share,
    Snapshot,
)

_id = attrgetter("id")


def schedule(snapshot: Snapshot, *, explain: bool = True) -> Decisions:
    """One pass over one queue: same snapshot in, same decisions out.

    `explain=False` leaves `Decisions.pending` empty (no reasons, no queue positions) and decides the rest
    exactly as with it: the reasons are worked out after every decision, read-only, for a caller that only
    needs the decisions (the start-time estimator's forward replay).
    """
    state = WorkingState(snapshot)
    run = PassRun(state)
    run.nomination_holds.update(hold_relocation_earmarks(state))
    drained = drain_expiring_plans(state, run.decisions)
    timed_out = time_out_pending_jobs(state, run.decisions)
    restore_capacity_limits(state, run.decisions)
    restore_plan_limits(state, run.decisions)
    # The RUNNABLE jobs, in id order, then those drained at once (in the order drained).
    runnable = state.runnable_jobs
    if timed_out:
        runnable = [job for job in runnable if job.id not in timed_out]
    if drained:
        runnable = runnable + drained
    # In id order when nothing was drained: the queues' sort may then skip its first key.
    in_id_order = not drained
    left: dict[int, list[Job]] = {}
    unordered = runnable
    if snapshot.queue_enabled:
        # A disabled share, or one whose ALL budget is spent, starts nothing: its jobs are only explained.
        starting = {share.id for share in state.shares.values() if starts_jobs(share)}
        if len(starting) == len(state.shares):
            schedulable, unordered = runnable, []
        else:
            schedulable, unordered = [], []
            for job in runnable:
                (schedulable if job.share_id in starting else unordered).append(job)
        nominated = [job for job in schedulable if job.nomination is not None] if state.nominated_jobs else []
        placed_first = run.place_nominated_first(nominated)
        if placed_first:
            schedulable = [job for job in schedulable if job.id not in placed_first]
        left = run.place_in_order(share_queues(schedulable, in_id_order=in_id_order), allow_preemption=True)
        if run.placed_at_once or any(p.preemptor_job_id is not None for p in run.decisions.preemptions):
            left = run.sweep(left)
        if relocate(state, run.decisions, runnable, run.admit):
            left = run.sweep(left)  # a job moved at once freed its old entry
    run.lapse_nominations(job.id for job in state.nominated_jobs if job.id not in run.nomination_holds)
    if explain:
        run.explain_pending(unordered, left)
    run.decisions.stats = pass_stats(run.decisions, run.considered)
    return run.decisions


def starts_jobs(share: Share) -> bool:
    """A share places jobs while enabled and not held back by a spent budget of scope ALL
    (behaviour.md#gpu-hour-budgets)."""
    return share.enabled and not stops_all_starts(share.budget)


def nomination_still_valid(state: WorkingState, job: Job) -> bool:
    """A nomination lapses at once when its entry is gone or on a plan (its share and queue are enabled);
    a relocation's nomination (the job its own one victim) may name a plan entry."""
    index = job.nomination.entry_index
    if not 0 <= index < len(job.entries):
        return False
    return job.entries[index].training_plan is None or is_relocation(job)


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
    # Per share, its jobs in `waiting`: such a share is never parked, since a nominee may be placed at once
    # when its own earmark is given back to it, which the refusals do not ask about.
    nominee_shares: dict[int, int] = field(default_factory=dict)
    # How many waiting nominees were placed at once in the order or the sweep (each gives its earmark back).
    placed_at_once: int = 0

    def place_nominated_first(self, nominated: list[Job]) -> set[int]:
        """Nominated jobs are taken before any other head; returns those it placed.

        Every valid nomination is earmarked first, and its victims still STOPPING are its own. Then, in head
        order, each is placed on the first entry that fits without preemption (its own earmark freed for it);
        else, while any of its victims is STOPPING and its entry fits once settled, it keeps waiting (and its
        earmark); else its nomination lapses and it is an ordinary head of this pass.
        """
        state = self.state
        valid = [job for job in nominated if nomination_still_valid(state, job)]
        for job in valid:
            entry = job.entries[job.nomination.entry_index]
            state.earmark_entry(job.share_id, entry, entry.instance_count)
            state.claim(job.id, entry.instance_type, victims_still_stopping(state, job))
        placed: set[int] = set()
        # The order of behaviour.md#order, FAIR_SHARE included, kept current as each nominated job is placed.
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
        stopping = victims_still_stopping(state, job)
        state.earmark_entry(job.share_id, entry, -entry.instance_count)
        state.unclaim(job.id, entry.instance_type, stopping)
        fit = first_fit_without_preemption(state, job)
        if fit is not None:
            self.admit(job, fit)
            self.nomination_holds.add(job.id)
            return True
        holding = state.holding(job.share_id, entry.instance_type)
        if stopping and fits_once_settled(state, holding, entry.instance_count):
            self.hold_earmark(job, job.nomination.entry_index, stopping)
            self.nomination_holds.add(job.id)
        return False

    def hold_earmark(self, job: Job, entry_index: int, victim_ids: list[int]) -> None:
        """The job waits, nominated on the entry, for its own STOPPING victims."""
        entry = job.entries[entry_index]
        self.state.earmark_entry(job.share_id, entry, entry.instance_count)
        self.state.claim(job.id, entry.instance_type, victim_ids)
        if job.id not in self.waiting:
            self.nominee_shares[job.share_id] = self.nominee_shares.get(job.share_id, 0) + 1
        self.waiting[job.id] = (entry_index, victim_ids)

    def place_nominee_at_once(self, job: Job) -> bool:
        """A waiting nominee whose entries fit on free capacity without its victims is placed at once (work
        conservation; its victims still stop). True when placed."""
        state = self.state
        entry_index, victim_ids = self.waiting[job.id]
        entry = job.entries[entry_index]
        state.earmark_entry(job.share_id, entry, -entry.instance_count)
        state.unclaim(job.id, entry.instance_type, victim_ids)
        fit = first_fit_without_preemption(state, job)
        if fit is None:
            self.hold_earmark(job, entry_index, victim_ids)
            return False
        del self.waiting[job.id]
        self.nominee_shares[job.share_id] -= 1
        if not self.nominee_shares[job.share_id]:
            del self.nominee_shares[job.share_id]
        self.decisions.nominations = [n for n in self.decisions.nominations if n.job_id != job.id]
        self.nomination_holds.add(job.id)
        self.placed_at_once += 1
        self.admit(job, fit)
        return True

    def nominate(self, job: Job, fit: Fit, victim_ids: list[int]) -> None:
        """The preemptor waits for its own STOPPING victims: its entry is earmarked, a later pass places it."""
        state, entry = self.state, fit.entry
        self.hold_earmark(job, fit.entry_index, victim_ids)
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
            self.considered.update(map(_id, jobs))

        while (job := heads.next_head()) is not None:
            share_id = job.share_id
            if (
                refusals is not None
                and share_id not in self.nominee_shares
                and refusals.refuses_all(share_id, job.priority)
            ):
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
        """Work conservation: after preemptions freed capacity (or a nominee placed at once gave its earmark
        back), retry what was left, without preemption.

        The sweep preempts nobody. With no nominee waiting, a job that does not fit when the sweep starts cannot
        fit later in it: under BEST_EFFORT_FIFO only those that fit now are put through the order again. With
        nominees waiting, one placed at once gives its earmark back in the middle of the sweep, so every job
        left goes through, and the sweep is run again until none is placed at once. STRICT_FIFO queues go
        through whole, so a head that still does not fit keeps holding the jobs behind it.
        """
        while True:
            placed_at_once = self.placed_at_once
            if self.state.snapshot.ordering == Ordering.STRICT_FIFO:
                left = self.place_in_order(left, allow_preemption=False)
            else:
                left = self._sweep_once(left)
            if self.placed_at_once == placed_at_once:
                return left

    def _sweep_once(self, left: dict[int, list[Job]]) -> dict[int, list[Job]]:
        if self.waiting:
            # A nominee placed at once gives its earmark back in the middle of the sweep: every job goes through.
            candidates = {share_id: jobs for share_id, jobs in left.items() if jobs}
        else:
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

        A nominated job is placed only if it fits on free capacity now, else it waits (its share's next job is
        tried, or under STRICT_FIFO its share is held). A job whose entry would fit once STOPPING jobs that
        are no nominee's victims are gone waits too, RUNNABLE and not nominated. A preemptor is nominated when
        one of its own victims is STOPPING and its entry does not fit until they are gone.
        """
        if job.id in self.waiting:
            return self.place_nominee_at_once(job)
        fit = first_fit_without_preemption(self.state, job)
        preempting = fit is None and allow_preemption
        if preempting:
            fit = first_fit_with_preemption(self.state, job)
        if fit is None or fit.waits_for_freeing:
            return False
        stopping: list[int] = []
        for victim in fit.victims:
            preemption = preempt(
                self.state, self.decisions, victim, kind=preemption_kind(victim, job), preemptor=job
            )
            if preemption.graceful:
                stopping.append(victim.id)
            heads.refresh(victim.share_id)
        if preempting and not on_demand_entry_fits(self.state, job.share_id, fit.entry):
            if stopping:
                self.nominate(job, fit, sorted(stopping))
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
        held_behind, waiting = self.held_behind, self.waiting
        append = self.decisions.pending.append
        queue_enabled = state.snapshot.queue_enabled
        # A victim of this pass was placed when the pass began (all jobs are read should one not be).
        preempted = [job for job in state.placed_jobs if job.id in victims] if victims else []
        if len(preempted) != len(victims):
            preempted = [job for job in state.jobs if job.id in victims]
        joining = share_queues(preempted + unordered)
        for share_id in sorted(set(left) | set(joining)):
            share_queue = left.get(share_id, [])
            if share_id in joining:
                share_queue = sorted(share_queue + joining[share_id], key=queue_key)
            share = state.shares[share_id]
            # One text for every job of the share that is neither a victim nor nominated, when the queue or
            # the share is disabled or its budget is spent: a share may hold thousands.
            if not queue_enabled:
                common = queue_disabled_reason()
            elif not share.enabled:
                common = share_disabled_reason(share.name)
            elif stops_all_starts(share.budget):
                common = budget_spent_reason(share)
            else:
                common = None
            for position, job in enumerate(share_queue, start=1):
                job_id = job.id
                if job_id in victims:
                    reason = preempted_reason(state, job, victims[job_id])
                elif job_id in waiting:
                    reason = nominated_reason(state, job, *waiting[job_id])
                elif common is not None:
                    reason = common
                elif job_id in held_behind:
                    reason = held_by_strict_fifo_reason(state, job, held_behind[job_id])
                else:
                    reason = why_entries_do_not_fit(job)
                append(Pending(job_id, share_id, reason, position))


def pass_stats(decisions: Decisions, considered: set[int]) -> PassStats:
    """The pass record of behaviour.md#the-scheduling-pass, derived from the decisions so it cannot disagree with
    them."""
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
    stats.relocations = len(decisions.relocations)
    for preemption in decisions.preemptions:
        stats.preemptions[preemption.kind.value] += 1
    return stats
