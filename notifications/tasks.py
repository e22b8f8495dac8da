"""Thin Celery entry points of notifications: the beat's scan, one delivery's try (and its retries)."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from notifications import services


@shared_task(
    acks_late=True,
    ignore_result=True,
    autoretry_for=(OperationalError,),
    max_retries=3,
    soft_time_limit=120,
    time_limit=180,
)
def scan() -> int:
    """New events, starved shares and silent executors -> deliveries (each sent by `send`)."""
    return services.notifications_scan().deliveries


@shared_task(
    bind=True, acks_late=True, ignore_result=True, max_retries=None, soft_time_limit=60, time_limit=90
)
def send(self, delivery_id: int) -> str | None:
    """One try; a try that may succeed later is retried after `services.retry_wait` (the service counts the
    tries and gives up after NOTIFY_MAX_ATTEMPTS)."""
    attempt = services.delivery_attempt(delivery_id=delivery_id)
    if attempt is not None and attempt.retry_in is not None:
        raise self.retry(countdown=attempt.retry_in)
    return attempt.status if attempt is not None else None


@shared_task(acks_late=True, ignore_result=True)
def prune() -> int:
    """Drop delivery logs older than NOTIFY_LOG_DAYS."""
    return services.deliveries_prune()
