"""The scheduling pass: lock the queue, load its snapshot, let the engine decide, write the decisions.

One pass covers one queue, in one transaction, serialized per queue by the queue's row lock
(`scheduling.services.locks.queue_lock`), which `queue_pass_run` takes first and holds to the commit
(behaviour.md#the-scheduling-pass). `pass_execute` is the part under the lock: it expects its caller to hold it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import OuterRef
from django.utils import timezone

import engine
from engine import types as et
from engine.collector import collector_paused
from engine.due import next_pass_due
from scheduling.models import PLACED_STATUSES, JobQueue, SchedulingPass
from scheduling.passes.budgets import budgets_apply, budgets_due, budgets_read, budgets_write
from scheduling.passes.due import pass_due_forget, pass_due_record
from scheduling.passes.histogram import pass_histogram_observe
from scheduling.passes.snapshot import JOB_COLUMNS, snapshot_load
from scheduling.passes.starts import gangs_due, start_deadline_next, starts_settle
from scheduling.passes.stops import stops_settle
from scheduling.passes.work import work_changed
from scheduling.passes.write import decisions_log, decisions_write, last_sample_at, usage_after, usage_sample
from scheduling.services.gangs import gangs_settle
from scheduling.services.locks import queue_lock

logger = logging.getLogger("quotaportal.scheduling")


@dataclass(frozen=True)
class PassResult:
    job_queue_id: int
    admitted: list[int]
    preempted: list[int]
    duration_ms: float
    record: SchedulingPass | None


@dataclass
class PassOutcome:
    admitted: list[int]
    preempted: list[int]
    duration_ms: float
    engine_ms: float
    record: SchedulingPass
    decisions: et.Decisions
    due: datetime | None  # when the queue next needs a pass if nothing changes (`engine.due`)


def queue_pass_run(*, job_queue_id: int, trigger: str = "beat") -> PassResult:
    """One scheduling pass over one queue, in one transaction, serialized per queue by its row lock
    (behaviour.md#the-scheduling-pass).

    Takes the queue lock itself: the caller holds no lock (and no transaction that has written anything).
    """
    started = time.perf_counter()
    pass_due_forget(job_queue_id)  # before the read: a change committed from now on marks the queue again
    # The collector would stop a busy queue's pass about 150 times (a tenth of the pass on 12,000 jobs,
    # measured by `bench_pass`) while every change to the queue waits for the row lock.
    with collector_paused(), transaction.atomic():
        queue = queue_lock(job_queue_id, last_sample=last_sample_at(OuterRef("pk")))
        now = timezone.now()
        outcome = pass_execute(job_queue=queue, now=now, trigger=trigger, started=started)
    # Once the decisions are visible (at once, unless a caller's transaction is still open).
    transaction.on_commit(lambda: pass_due_record(job_queue_id, outcome.due, now=now))
    logger.info(
        "pass queue=%s trigger=%s admitted=%d preempted=%d duration_ms=%.1f",
        queue.name,
        trigger,
        len(outcome.admitted),
        len(outcome.preempted),
        outcome.duration_ms,
    )
    return PassResult(
        job_queue_id=job_queue_id,
        admitted=outcome.admitted,
        preempted=outcome.preempted,
        duration_ms=outcome.duration_ms,
        record=outcome.record,
    )


def pass_execute(*, job_queue: JobQueue, now: datetime, trigger: str, started: float) -> PassOutcome:
    """Load, decide, write. The caller holds the queue's row lock in the enclosing transaction, taken with
    `last_sample_at` read beside it (`queue_lock(..., last_sample=...)`)."""
    snap, index = snapshot_load(job_queue=job_queue, now=now, clauses=True)
    environment = job_queue.service_environment
    due_now = gangs_due(job_queue=job_queue, index=index, now=now)
    # Lost tasks and start deadlines move jobs with the services (rare: a few jobs); the engine reads the result.
    if due_now and gangs_settle(job_queue=job_queue, job_ids=due_now, now=now):
        snap, index = snapshot_load(job_queue=job_queue, now=now, clauses=True)
    book = budgets_read(job_queue_id=job_queue.pk, now=now)
    snap = budgets_apply(snap, book)
    snap, settled = stops_settle(
        snap=snap,
        index=index,
        lease_seconds=environment.lease_seconds,
        now=now,
        grace_seconds=environment.stop_grace_seconds,
    )
    snap, held = starts_settle(snap=snap, index=index, job_queue=job_queue, settled=settled, now=now)
    engine_started = time.perf_counter()
    decisions = engine.schedule(snap)
    engine_ms = (time.perf_counter() - engine_started) * 1000
    decisions.pending.extend(held)
    admitted, preempted = decisions_write(
        job_queue=job_queue, decisions=decisions, index=index, now=now, settled=settled
    )
    # Housekeeping's changes count too: an attempt past its duration is a stop its executor must hear of.
    if admitted or decisions.preemptions or decisions.drains or decisions.relocations or settled.rows:
        work_changed(environment=job_queue.service_environment)
    usage = usage_after(snap, decisions)
    budgets_write(job_queue_id=job_queue.pk, book=book, snap=snap, usage=usage)
    decisions_log(job_queue=job_queue, decisions=decisions, index=index)
    usage_sample(
        job_queue=job_queue,
        snap=snap,
        decisions=decisions,
        index=index,
        now=now,
        last=job_queue.last_sample,
    )
    stats = decisions.stats
    duration_ms = (time.perf_counter() - started) * 1000
    pass_histogram_observe(job_queue_id=job_queue.pk, seconds=duration_ms / 1000)
    record = SchedulingPass.objects.create(
        job_queue=job_queue,
        started_at=now,
        duration_ms=duration_ms,
        engine_ms=engine_ms,
        trigger=trigger,
        jobs_considered=stats.jobs_considered,
        placed_within_quota=stats.placed_within_quota,
        placed_borrowing=stats.placed_borrowing,
        placed_on_plan=stats.placed_on_plan,
        fallbacks=stats.fallbacks,
        preempted_reclaim=stats.preemptions.get(et.PreemptionKind.RECLAIM, 0),
        preempted_in_share=stats.preemptions.get(et.PreemptionKind.IN_SHARE, 0),
        preempted_limit_reduced=stats.preemptions.get(et.PreemptionKind.LIMIT_REDUCED, 0),
        plan_drains=stats.plan_drains,
        timeouts=stats.timeouts,
        relocations=stats.relocations,
    )
    return PassOutcome(
        admitted=admitted,
        preempted=preempted,
        duration_ms=duration_ms,
        engine_ms=engine_ms,
        record=record,
        decisions=decisions,
        due=_earliest(
            next_pass_due(snap, decisions),
            _lease_expiry(index),
            _attempt_timeout(index),
            start_deadline_next(job_queue=job_queue, index=index),
            budgets_due(book=book, snap=snap, usage=usage),
        ),
    )


_LEASE = JOB_COLUMNS.index("lease_expires_at")
_STATUS, _SCHEDULED, _ATTEMPT_DURATION = (
    JOB_COLUMNS.index(name) for name in ("status", "scheduled_at", "attempt_duration_seconds")
)


def _lease_expiry(index) -> datetime | None:
    """The first lease of a taken job to run out: a pass then finds it EXECUTOR_LOST, whatever else is due."""
    leases = [row[_LEASE] for row in index.jobs.values() if row[_LEASE] is not None]
    return min(leases, default=None)


def _attempt_timeout(index) -> datetime | None:
    """The first placed attempt to run past its attempt duration: a pass then stops it (ATTEMPT_TIMEOUT)."""
    deadlines = [
        row[_SCHEDULED] + timedelta(seconds=row[_ATTEMPT_DURATION])
        for row in index.jobs.values()
        if row[_ATTEMPT_DURATION] is not None
        and row[_SCHEDULED] is not None
        and row[_STATUS] in PLACED_STATUSES
    ]
    return min(deadlines, default=None)


def _earliest(*moments: datetime | None) -> datetime | None:
    known = [moment for moment in moments if moment is not None]
    return min(known, default=None)
