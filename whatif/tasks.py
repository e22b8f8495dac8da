"""The what-if replay as a Celery task: takes the run's id, calls one service."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from whatif import services


# The service stops a replay at WHATIF_TIME_LIMIT_SECONDS and records why; these limits are the backstop.
@shared_task(
    acks_late=True,
    ignore_result=True,
    soft_time_limit=settings.WHATIF_TIME_LIMIT_SECONDS + 60,
    time_limit=settings.WHATIF_TIME_LIMIT_SECONDS + 120,
)
def run_whatif(run_id: int) -> None:
    """Replay one what-if run (a run already taken by another worker is left to it)."""
    services.whatif_run_execute(run_id=run_id)
