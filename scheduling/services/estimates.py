"""Estimated start times (SPEC 3.5), written beside each RUNNABLE job's pending reason, off the pass's hot path.

`queue_estimates_refresh` runs in its own Celery task (`scheduling.tasks.estimate_queue`), at most every
ESTIMATE_INTERVAL_SECONDS per queue, after passes that changed something. It takes no lock: it reads the queue
as a pass would, runs the pure estimator (`simulator.estimate`), which writes no decision, and bulk-writes the
four estimate columns of the PendingState rows that still exist (a row the next pass rewrote meanwhile stays
without an estimate until the run after).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from scheduling.models import JobQueue, PendingState
from scheduling.passes.snapshot import snapshot_load
from scheduling.selectors.estimates import runtime_expectations
from simulator.estimate import estimate

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
    snapshot, _index = snapshot_load(job_queue=job_queue, now=now)
    expectations = runtime_expectations(job_queue=job_queue)
    run = estimate(
        snapshot,
        expectations,
        pass_interval=settings.PASS_INTERVAL_SECONDS,
        time_limit=settings.ESTIMATE_TIME_LIMIT_SECONDS,
    )
    rows = [
        PendingState(
            job_id=job_id,
            estimated_earliest=found.earliest,
            estimated_latest=found.latest,
            estimate_basis=found.basis,
            estimated_at=now,
        )
        for job_id, found in sorted(run.estimates.items())
    ]
    with transaction.atomic():
        PendingState.objects.bulk_update(rows, ESTIMATE_FIELDS, batch_size=500)
    logger.info(
        "estimate queue=%s jobs=%d passes=%d seconds=%.2f", job_queue.name, len(rows), run.passes, run.seconds
    )
    return len(rows)
