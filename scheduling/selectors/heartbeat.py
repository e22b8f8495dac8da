"""Whether the beat and the workers are alive, from the heartbeats they write; one query."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings

from scheduling.models import Heartbeat


@dataclass(frozen=True)
class Silence:
    """Which part of the scheduler is silent (`beat` or `workers`), since when (None: never heard), and what
    that means, in a sentence for the overview."""

    part: str
    since: datetime | None
    message: str


def _age(now: datetime, then: datetime) -> str:
    seconds = int((now - then).total_seconds())
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


def scheduler_silence(*, now: datetime) -> Silence | None:
    """None while the beat sends heartbeats and a worker runs them; else which is silent. A silent beat hides
    the workers' state (they get nothing to run), so it is named first."""
    silent_before = now - timedelta(seconds=settings.HEARTBEAT_SILENT_SECONDS)
    seen = dict(Heartbeat.objects.values_list("component", "seen_at"))
    beat, worker = seen.get(Heartbeat.Component.BEAT), seen.get(Heartbeat.Component.WORKER)
    if beat is None or beat < silent_before:
        heard = "has never been heard from" if beat is None else f"has been silent for {_age(now, beat)}"
        return Silence(
            "beat",
            beat,
            f"The beat {heard}: no pass runs on its own, so nothing falls due (timeouts, plan drains, "
            "lost executors) and queues move only when someone submits or changes something. Is celery beat "
            "running?",
        )
    # The worker's heartbeat may trail the beat's by the time a task waits in the broker.
    if worker is None or worker < silent_before:
        heard = "has run one yet" if worker is None else f"has run one for {_age(now, worker)}"
        return Silence(
            "workers",
            worker,
            f"The beat is sending tasks, but no worker {heard}: no pass runs and no job is placed. Are the "
            "Celery workers running (and reading the broker the beat writes to)?",
        )
    return None
