"""Housekeeping of what passes leave behind; events are the audit log and are kept."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from scheduling.models import SchedulingPass, ShareUsageSample


def history_prune(*, now=None) -> int:
    """Delete utilization samples and pass records older than HISTORY_DAYS; returns rows deleted."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.HISTORY_DAYS)
    samples, _ = ShareUsageSample.objects.filter(taken_at__lt=cutoff).delete()
    passes, _ = SchedulingPass.objects.filter(started_at__lt=cutoff).delete()
    return samples + passes
