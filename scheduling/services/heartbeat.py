"""Heartbeats of the scheduler's parts: the beat records one when it sends the heartbeat task, a worker when it
runs it (`scheduling.tasks.heartbeat`). The overview reads them (`scheduling.selectors.heartbeat`)."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from scheduling.models import Heartbeat


def heartbeat_record(*, component: str, detail: str = "", now: datetime | None = None) -> Heartbeat:
    """One row per component, overwritten: only the last sign of life matters."""
    heartbeat, _ = Heartbeat.objects.update_or_create(
        component=component, defaults={"seen_at": now or timezone.now(), "detail": detail[:255]}
    )
    return heartbeat
