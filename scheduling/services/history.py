"""Housekeeping of what passes leave behind: utilization samples, pass records, and events past retention."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef
from django.utils import timezone

from scheduling.models import UNFINISHED_STATUSES, Event, EventKind, Job, SchedulingPass, ShareUsageSample

EVENT_PRUNE_BATCH = 5_000
EVENT_PRUNE_MAX_BATCHES = 100


def history_prune(*, now=None) -> int:
    """Delete utilization samples and pass records older than HISTORY_DAYS; returns rows deleted."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.HISTORY_DAYS)
    samples, _ = ShareUsageSample.objects.filter(taken_at__lt=cutoff).delete()
    passes, _ = SchedulingPass.objects.filter(started_at__lt=cutoff).delete()
    return samples + passes


def events_prune(
    *, now=None, batch_size: int = EVENT_PRUNE_BATCH, max_batches: int = EVENT_PRUNE_MAX_BATCHES
) -> int:
    """Delete events older than EVENT_RETENTION_DAYS (0: keep every event), oldest first, in batches of
    `batch_size`, at most `max_batches` of them (the next run goes on); returns events deleted.

    Kept whatever their age: CONFIG_CHANGED events (the audit log of who changed the configuration), and every
    event of a job that is still unfinished, as the job or the other side of a preemption (its page tells its
    whole story until it ends). Each batch is its own short transaction, so the event log stays writable.
    """
    if settings.EVENT_RETENTION_DAYS == 0:
        return 0
    cutoff = (now or timezone.now()) - timedelta(days=settings.EVENT_RETENTION_DAYS)
    unfinished = Job.objects.filter(status__in=UNFINISHED_STATUSES)
    expired = (
        Event.objects.filter(created_at__lt=cutoff)
        .exclude(kind=EventKind.CONFIG_CHANGED)
        .filter(~Exists(unfinished.filter(pk=OuterRef("job_id"))))
        .filter(~Exists(unfinished.filter(pk=OuterRef("other_job_id"))))
    )
    deleted = 0
    after_id = 0
    for _ in range(max_batches):
        # Walking up the ids, so that kept events (an unfinished job's) are not read again by every batch.
        ids = list(expired.filter(id__gt=after_id).order_by("id").values_list("id", flat=True)[:batch_size])
        if not ids:
            break
        count, _ = Event.objects.filter(id__in=ids).delete()
        deleted += count
        after_id = ids[-1]
    return deleted
