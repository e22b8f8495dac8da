"""Asking for a pass: after commit, one per queue per transaction, and one waiting per queue at a time.

Every service that changes what a pass would decide calls `pass_request` itself, inside its transaction; the
request is sent once the transaction commits (never inside it), and forgotten if it rolls back. While a pass
for the queue waits in the broker, a cache key (`pass_waiting_key`) says so, and further requests join it.
The task is found by name in Celery's registry, so this module does not import `scheduling.tasks` (which
imports the services that import this).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from quotaportal.celery import task_named
from scheduling.passes.due import pass_dirty_mark

logger = logging.getLogger("quotaportal.scheduling")

RUN_QUEUE_PASS = "scheduling.tasks.run_queue_pass"


def pass_request(*, job_queue_id: int, trigger: str) -> None:
    """Ask for a pass on the queue once the current transaction commits: mark it changed for the beat
    (`scheduling.passes.due`) and, unless QUOTAPORTAL_AUTOPASS=0, enqueue the pass."""
    # One request per queue per transaction: a batch of a hundred submissions wants one pass, not a hundred.
    # The callbacks live on the connection, so a rolled-back transaction forgets its requests with them.
    pending = transaction.get_connection().run_on_commit
    if any(getattr(callback, "quotaportal_queue", None) == job_queue_id for _, callback, *_ in pending):
        return

    def enqueue() -> None:
        pass_dirty_mark(job_queue_id)
        if settings.QUOTAPORTAL_AUTOPASS:
            pass_send(job_queue_id=job_queue_id, trigger=trigger)

    enqueue.quotaportal_queue = job_queue_id
    transaction.on_commit(enqueue)


def pass_send(*, job_queue_id: int, trigger: str) -> bool:
    """Enqueue a pass for the queue now, unless one already waits in the broker; True when one was sent."""
    # Across transactions too: while a pass for the queue waits in the broker, it will read this change
    # (it clears the key before it reads), so a script submitting a hundred jobs one request at a time
    # gets a handful of passes, not a hundred. The key expires, and every pass clears it, so a lost
    # message holds nothing up for longer than the beat's next pass.
    try:
        if settings.PASS_COALESCE_SECONDS and not cache.add(
            pass_waiting_key(job_queue_id), trigger, timeout=settings.PASS_COALESCE_SECONDS
        ):
            return False
    except Exception as exc:  # the cache is down: ask anyway, a pass too many is harmless
        logger.warning(
            "pass requests for queue %s not coalesced: the cache is unavailable (%s)", job_queue_id, exc
        )
    # The change has committed: a broker outage must not turn its request into an error. The beat runs
    # the queue's pass once the broker is back (the change marked the queue dirty for it).
    run_queue_pass = task_named(RUN_QUEUE_PASS)
    try:
        run_queue_pass.delay(job_queue_id, trigger)
    except Exception as exc:  # kombu.exceptions.OperationalError, or whatever the transport raises
        pass_waiting_clear(job_queue_id)
        logger.warning(
            "pass for queue %s not enqueued (%s): the broker is unavailable (%s); the beat will run it",
            job_queue_id,
            trigger,
            exc,
        )
        return False
    return True


def pass_waiting_key(job_queue_id: int) -> str:
    """The cache key present while a pass for the queue waits in the broker: requests meanwhile join it."""
    return f"quotaportal:pass-queued:{job_queue_id}"


def pass_waiting_clear(job_queue_id: int) -> None:
    """Called by a pass before it reads the queue: requests from now on need a pass of their own."""
    try:
        cache.delete(pass_waiting_key(job_queue_id))
    except Exception as exc:
        logger.warning(
            "pass-waiting key of queue %s not cleared: the cache is unavailable (%s)", job_queue_id, exc
        )
