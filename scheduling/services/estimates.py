"""Estimated start times (behaviour.md#why-pending-and-when-it-will-start), written beside each RUNNABLE job's pending
reason, off the pass's hot path.

`queue_estimates_refresh` runs in its own Celery task (`scheduling.tasks.estimate_queue`), at most every
ESTIMATE_INTERVAL_SECONDS per queue, after passes that changed something. It takes no lock: it reads the queue
as a pass would, runs the pure estimator (`simulator.estimate`), which writes no decision, and bulk-writes the
four estimate columns of the PendingState rows that still exist (a row the next pass rewrote meanwhile stays
without an estimate until the run after).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from scheduling.models import JobQueue, PendingState
from scheduling.passes.budgets import budgets_apply, budgets_read
from scheduling.passes.bulk import rows_update
from scheduling.passes.snapshot import snapshot_load
from scheduling.selectors.estimates import runtime_expectations
from simulator.estimate import Estimate, EstimateRun, estimate

logger = logging.getLogger("quotaportal.scheduling")

ESTIMATE_FIELDS = ("estimated_earliest", "estimated_latest", "estimate_basis", "estimated_at")


def estimate_due(*, job_queue_id: int) -> bool:
    """True at most once per ESTIMATE_INTERVAL_SECONDS per queue (a cache mark that expires), for the caller
    to enqueue an estimate run; the mark is shared by every worker through the cache."""
    return cache.add(f"estimate-due:{job_queue_id}", 1, timeout=settings.ESTIMATE_INTERVAL_SECONDS)


def queue_estimates_refresh(*, job_queue_id: int) -> int:
    """Estimate the start of every RUNNABLE job of the queue and store it; returns the rows written."""
    job_queue = JobQueue.objects.select_related("service_environment").get(pk=job_queue_id)
    now = timezone.now()
    run = queue_estimates_compute(job_queue=job_queue, now=now)
    written = estimates_write(run.estimates, now=now)
    logger.info(
        "estimate queue=%s jobs=%d passes=%d seconds=%.2f", job_queue.name, written, run.passes, run.seconds
    )
    return written


def queue_estimates_compute(*, job_queue: JobQueue, now: datetime) -> EstimateRun:
    """Read the queue as a pass would and run the estimator on it (it writes nothing)."""
    snapshot, _index = snapshot_load(job_queue=job_queue, now=now)
    snapshot = budgets_apply(snapshot, budgets_read(job_queue_id=job_queue.pk, now=now))
    return estimate(
        snapshot,
        runtime_expectations(job_queue=job_queue),
        pass_interval=settings.PASS_INTERVAL_SECONDS,
        time_limit=settings.ESTIMATE_TIME_LIMIT_SECONDS,
    )


def estimates_write(estimates: Mapping[int, Estimate], *, now: datetime) -> int:
    """Store the estimates in the PendingState rows that still exist; returns how many were given."""
    rows = {
        job_id: {
            "estimated_earliest": found.earliest,
            "estimated_latest": found.latest,
            "estimate_basis": found.basis,
            "estimated_at": now,
        }
        for job_id, found in estimates.items()
    }
    # The pass's bulk UPDATE (COPY into a temporary table on PostgreSQL): Django's bulk_update builds a CASE
    # per field that grows with the square of its batch (5.7 s for the 8,535 rows of the bench queue).
    with transaction.atomic():
        rows_update(model=PendingState, fields=ESTIMATE_FIELDS, rows=rows, key="job_id")
    return len(rows)
