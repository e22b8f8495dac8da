"""The decider that gives each pass the smallest snapshot its proofs allow (`quiet`, `preempting`), and the
whole queue where none holds, with what the proofs do not cover:

6. **Graceful stops are not covered.** With a stop delay, while any job is STOPPING or nominated the pass
   runs on the whole queue (the proofs of `quiet` and `preempting` read capacity as freed by a stop in the
   same pass, and know nothing of earmarks), and so does any pass that preempts (its victims may stop
   gracefully); skipped passes (point 4) need an event then too.

7. **Budgets** (`simulator.budgets`) only take room away within a period: a spent budget of scope ALL keeps
   its share's jobs out of the engine's order (as a disabled share's), one of scope BORROWED lowers the
   share's ceiling to its limit. Every bound of `quiet`, `preempting` and `rooms` reads the configured
   ceilings, which are then upper bounds, so a group judged held, stuck or cut short is so with the budget
   too, and a pass given more jobs than it needs decides the same. Room comes back only when a spent budget
   resets, and the replay wakes then (`Simulation.with_budgets`), so no pass that could decide something new
   is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from datetime import datetime
from typing import Any, Protocol

from engine import (
    Decisions,
    IdleCapacityAssignment,
    Job,
    Snapshot,
)

from ..config import Configuration, to_datetime
from .groups import GroupKey, RunnableGroups
from .holdings import PlacedJobs
from .preempting import FULLY_REDUCED, PreemptingPass, Verdict

MAX_ATTEMPTS = 4


class Reducer(PreemptingPass):
    """Builds the reduced job list of a pass and judges whether the engine's decisions on it are exact."""


def shortcuts_cover(config: Configuration) -> bool:
    """Whether the proofs above hold for a configuration. Lending limits only change reserved(S,T), which
    every proof reads through invariant B's sum. FAIR_SHARE orders over-limit heads by borrowing against
    the queue's lendable capacity, which folding shares into capacity (point 5) changes; a protection from
    early preemption lets a pass preempt once time alone has passed, which skipping passes (point 4) and
    placeholders at their lowest priority (points 1 and 3) do not see. With either, the replay runs whole."""
    return (
        config.idle_capacity_assignment == IdleCapacityAssignment.FIFO
        and config.preemption_min_runtime_seconds == 0
    )


class WholeQueue(Protocol):
    """The plain replay the shortcuts fall back to (`simulation.WholeQueueDecider`), named by what it offers:
    the simulation imports this module, not the other way round."""

    schedule: Callable[[Snapshot], Decisions]
    snapshots: Any  # `simulation.Snapshots`: `whole(now)` and `of(now, jobs, reduced)`
    stats: Any  # `simulation.ReplayStats`

    def decide(self, index: int, now: float) -> Decisions: ...


class ShortcutDecider:
    """A pass decided on the smallest snapshot that provably decides what the whole queue decides (points 1-3
    and 5), and on the whole queue (`whole`, the plain replay) where no proof holds."""

    # A pass that preempts starts from the retries the last one needed and with the holdings that may borrow
    # given as reclaimable (off: from the most reduced, to test each retry on every pass)
    carry_preempting_start = True

    def __init__(
        self,
        whole: WholeQueue,
        reducer: Reducer,
        *,
        unfinished: Mapping[int, Job],
        placed: PlacedJobs,
        groups: RunnableGroups,
        timeout_watch: Mapping[int, datetime],
        verify: bool,
        settling: Set[int] = frozenset(),
        relocatable: Set[int] = frozenset(),
        graceful_stops: bool = False,
    ):
        self.whole = whole
        self.settling = settling
        # Running jobs that may be relocated (behaviour.md#moving-to-a-preferred-entry): no proof above covers a move,
        # so while there are any, every pass is the whole queue's.
        self.relocatable = relocatable
        self.graceful_stops = graceful_stops
        self.reducer = reducer
        self.unfinished = unfinished
        self.placed = placed
        self.groups = groups
        self.timeout_watch = timeout_watch
        self.verify = verify
        self.stats = whole.stats
        # What the last pass that preempted needed (`decide_reduced`): the next one starts from it.
        self.preempting_start: tuple[bool, bool, frozenset[tuple[int, str]], bool] = FULLY_REDUCED

    def decide(self, index: int, now: float) -> Decisions:
        decisions = None if self.settling or self.relocatable else self.decide_reduced(now)
        if decisions is None:
            return self.whole.decide(index, now)
        if self.verify:
            difference = same_decisions(decisions, self.whole.schedule(self.whole.snapshots.whole(now)))
            if difference is not None:
                raise AssertionError(f"shortcut changed pass {index} at {now}: {difference}")
        return decisions

    def decide_reduced(self, now: float) -> Decisions | None:
        """Points 1, 2 and 5, then for a pass that preempts point 3; None when only the whole queue does."""
        moment = to_datetime(now)
        self.reducer.begin_pass(moment, self.placed)
        # `pending_too_long`, by the moment each watched job becomes due (`pending_too_long_after`)
        due = {job_id for job_id, after in self.timeout_watch.items() if moment > after}
        snapshot_of, schedule, stats = self.whole.snapshots.of, self.whole.schedule, self.stats
        given_per_group: dict[GroupKey, int] = {}
        for _ in range(MAX_ATTEMPTS):
            reduced = self.reducer.jobs(
                unfinished=self.unfinished,
                placed=self.placed,
                groups=self.groups,
                due=due,
                given_per_group=given_per_group,
            )
            decisions = schedule(snapshot_of(now, reduced.jobs, reduced))
            exact, give_more = self.reducer.verdict(
                decisions, reduced, unfinished=self.unfinished, groups=self.groups
            )
            if exact:
                stats.passes_reduced += 1
                return decisions
            stats.reduced_retries += 1
            if give_more is None:
                break
            given_per_group.update(give_more)
        else:
            return None
        if self.graceful_stops:  # point 6: a pass that preempts, with victims that may stop gracefully
            return None
        # Each retry below gives more of the queue than the try before it, and each try's decisions are
        # judged on their own; so a pass may as well start where the last pass that preempted ended: a busy
        # queue's passes that preempt mostly need the same retries, each a run of the engine on most of it.
        leave_out_stuck, split, borrowing, cut_groups = (
            self.preempting_start if self.carry_preempting_start else FULLY_REDUCED
        )
        if self.carry_preempting_start:
            borrowing = borrowing | self.reducer.may_borrow(
                unfinished=self.unfinished, placed=self.placed, groups=self.groups
            )
        while True:
            preempting = self.reducer.jobs_for_preemption(
                unfinished=self.unfinished,
                placed=self.placed,
                groups=self.groups,
                due=due,
                leave_out_stuck=leave_out_stuck,
                split=split,
                borrowing=borrowing,
                cut_groups=cut_groups,
            )
            decisions = schedule(snapshot_of(now, preempting.jobs, preempting))
            verdict, borrowed = self.reducer.preemption_verdict(decisions, preempting)
            if verdict == Verdict.EXACT:
                stats.passes_preempting += 1
                self.preempting_start = (leave_out_stuck, split, borrowing, cut_groups)
                return decisions
            retries = stats.preempting_retries
            retries[verdict.value] = retries.get(verdict.value, 0) + 1
            if verdict == Verdict.RECLAIM_PAST_FRONT:
                split = False
            elif verdict == Verdict.BORROWED_IN_PASS:
                borrowing |= borrowed
            elif verdict == Verdict.SHORT_GROUP_GREW:
                cut_groups = False
            elif preempting.stuck:  # STUCK_GROUP_FREED, or WHOLE_QUEUE with stuck groups left out: them first
                leave_out_stuck = False
            else:
                return None
            stats.reduced_retries += 1


def same_decisions(left: Decisions, right: Decisions) -> str | None:
    """None when two passes decided the same; else what differs (for `verify_shortcuts`)."""
    views = (
        (
            "admissions",
            lambda d: [
                (a.job_id, a.entry_index, a.instance_type, a.instance_count, a.training_plan, a.borrowed)
                for a in d.admissions
            ],
        ),
        ("preemptions", lambda d: [(p.job_id, p.kind, p.preemptor_job_id, p.fails) for p in d.preemptions]),
        ("drains", lambda d: [d_.job_id for d_ in d.drains]),
        ("timeouts", lambda d: sorted(t.job_id for t in d.timeouts)),
    )
    for name, view in views:
        if view(left) != view(right):
            return f"{name}: {view(left)} != {view(right)}"
    return None
