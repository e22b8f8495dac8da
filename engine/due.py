"""When a queue next needs a pass although nothing in it changes: the beat runs none before then.

A pass over an unchanged queue decides again what it decided, except when time alone changes the answer: a
training plan starts, enters its drain window or ends, a waiting job passes its max_pending_seconds, a
stopping job reaches its deadline, or a spent GPU-hour budget resets. A pass
that stopped jobs (preemption, drain) released capacity that jobs ahead in the order may now fit in, so the
next pass is due at once, to confirm the queue settled.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from .housekeeping import pending_too_long_after
from .types import Decisions, JobStatus, Snapshot

# A job times out once it has waited longer than its max_pending_seconds (`housekeeping.pending_too_long`):
# the first moment a pass would fail it is just after the limit.
_AFTER = timedelta(seconds=1)


def next_pass_due(snapshot: Snapshot, decisions: Decisions) -> datetime | None:
    """The earliest moment after `snapshot.now` at which a pass over the unchanged queue decides something
    new (`snapshot.now` itself when this pass stopped jobs); None when only a change to the queue can."""
    now = snapshot.now
    if decisions.preemptions or decisions.drains:
        return now
    moments = [moment for moment in _plan_boundaries(snapshot) if moment > now]
    moments += _pending_timeouts(snapshot, decisions)
    moments += _stop_deadlines(snapshot)
    moments += [share.budget.resets_at for share in snapshot.shares if share.budget and share.budget.spent]
    return min(moments, default=None)


def _stop_deadlines(snapshot: Snapshot) -> list[datetime]:
    """A STOPPING job whose executor never reports STOPPED counts as stopped at its deadline: its capacity
    (and any nominated job waiting for it) moves then."""
    return [
        job.stop_deadline + _AFTER
        for job in snapshot.jobs
        if job.status == JobStatus.STOPPING and job.stop_deadline is not None
    ]


def _plan_boundaries(snapshot: Snapshot):
    """Plan starts (its capacity opens), drain starts (jobs on it go back to the queue) and ends."""
    drain = timedelta(seconds=snapshot.plan_drain_seconds)
    for plan in snapshot.plans:
        yield plan.start_time
        yield plan.end_time - drain
        yield plan.end_time


def _pending_timeouts(snapshot: Snapshot, decisions: Decisions) -> list[datetime]:
    """For each job the pass left waiting with a max_pending_seconds, the moment a pass would fail it."""
    waiting = {pending.job_id for pending in decisions.pending}
    return [
        pending_too_long_after(job) + _AFTER
        for job in snapshot.jobs
        if job.id in waiting and job.status == JobStatus.RUNNABLE and job.max_pending_seconds is not None
    ]
