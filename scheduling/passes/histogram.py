"""A pass records its own duration in its queue's cumulative histogram, kept in the database.

The passes run in Celery workers that the web process cannot see, so `/metrics` (`ops.metrics`) reads these
rows at scrape time rather than an in-process histogram.
"""

from __future__ import annotations

from django.db.models import Case, F, Q, When

from scheduling.models import PassHistogramBucket

PASS_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def pass_histogram_observe(*, job_queue_id: int, seconds: float) -> None:
    """Add one pass duration to the queue's cumulative histogram.

    One statement (two the first time: the queue's rows are made on first use).
    """
    touched = (
        PassHistogramBucket.objects.filter(job_queue_id=job_queue_id)
        .filter(Q(le__gte=seconds) | Q(le__isnull=True))
        .update(
            count=F("count") + 1,
            sum_seconds=Case(
                When(le__isnull=True, then=F("sum_seconds") + seconds), default=F("sum_seconds")
            ),
        )
    )
    if not touched:
        PassHistogramBucket.objects.bulk_create(
            [
                PassHistogramBucket(job_queue_id=job_queue_id, le=le, count=int(seconds <= le))
                for le in PASS_DURATION_BUCKETS
            ]
            + [PassHistogramBucket(job_queue_id=job_queue_id, le=None, count=1, sum_seconds=seconds)],
            ignore_conflicts=True,
        )
