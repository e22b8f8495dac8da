"""Which queues need a pass: the beat runs none for a queue in which nothing changed and nothing is due.

Two cache keys per queue. A change marks the queue dirty (`pass_dirty_mark`, from `pass_request` once the
change commits). A pass forgets both keys before it reads the queue, and after it commits records when the
queue is next due (`engine.due.next_pass_due`: a plan boundary, a pending timeout, at once after it stopped
jobs; or never). The beat (`queues_needing_pass`) picks the queues that are dirty, due, or have no record.

Every doubt runs a pass, never skips one: a record missing (the cache evicted it, a pass failed before its
commit, the queue is new), a cache that does not answer, and a record lasts at most PASS_SETTLED_SECONDS, so a
change made behind the services' back (SQL, a queryset update) waits no longer than that. A change that
commits while a pass runs marks the queue dirty after the pass forgot the mark, so the next beat runs it.
PASS_SETTLED_SECONDS=0 (the default with a one-process cache, which the beat cannot read) runs every queue
on every beat, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from django.conf import settings
from django.core.cache import cache

logger = logging.getLogger("quotaportal.scheduling")

NEVER = "never"


def pass_dirty_key(job_queue_id: int) -> str:
    return f"quotaportal:pass-dirty:{job_queue_id}"


def pass_due_key(job_queue_id: int) -> str:
    return f"quotaportal:pass-due:{job_queue_id}"


def pass_dirty_mark(job_queue_id: int) -> None:
    """The queue changed (called once the change has committed): the beat's next run gives it a pass."""
    if not settings.PASS_SETTLED_SECONDS:
        return
    try:
        cache.set(pass_dirty_key(job_queue_id), 1, timeout=None)
    except Exception as exc:  # the beat treats a queue it cannot read the cache for as needing a pass
        logger.warning("queue %s not marked as changed: the cache is unavailable (%s)", job_queue_id, exc)


def pass_due_forget(job_queue_id: int) -> None:
    """Called by a pass before it reads the queue: until it records its due time, the queue needs a pass, and
    a change from now on marks it dirty again."""
    if not settings.PASS_SETTLED_SECONDS:
        return
    try:
        cache.delete_many([pass_dirty_key(job_queue_id), pass_due_key(job_queue_id)])
    except Exception as exc:
        logger.warning("pass marks of queue %s not cleared: the cache is unavailable (%s)", job_queue_id, exc)


def pass_due_record(job_queue_id: int, due: datetime | None, *, now: datetime) -> None:
    """Called by a pass once it has committed: the queue needs no pass before `due` (None: until it changes),
    and none later than PASS_SETTLED_SECONDS from now."""
    settled = settings.PASS_SETTLED_SECONDS
    if not settled:
        return
    try:
        cache.set(pass_due_key(job_queue_id), due.timestamp() if due else NEVER, timeout=settled)
    except Exception as exc:
        logger.warning("next pass of queue %s not recorded: the cache is unavailable (%s)", job_queue_id, exc)


def pass_due_by(job_queue_id: int, moment: datetime) -> None:
    """Something outside a pass became due at `moment` (an executor took a job or renewed its lease: if it
    goes silent, a pass must find the job lost then): the queue's recorded due time moves no later than it."""
    settled = settings.PASS_SETTLED_SECONDS
    if not settled:
        return
    key = pass_due_key(job_queue_id)
    try:
        recorded = cache.get(key)
        if recorded is None or (recorded != NEVER and recorded <= moment.timestamp()):
            return  # no record (the beat passes it anyway) or due already no later than `moment`
        cache.set(key, moment.timestamp(), timeout=settled)
    except Exception as exc:
        logger.warning("lease of queue %s not recorded: the cache is unavailable (%s)", job_queue_id, exc)


def queues_needing_pass(job_queue_ids: Iterable[int], *, now: datetime) -> list[int]:
    """Of these queues, those that are dirty, due by `now`, or without a record (one cache round trip)."""
    ids = list(job_queue_ids)
    if not settings.PASS_SETTLED_SECONDS:
        return ids
    try:
        marks = cache.get_many(
            [key for queue_id in ids for key in (pass_dirty_key(queue_id), pass_due_key(queue_id))]
        )
    except Exception as exc:
        logger.warning("every queue gets a pass: the cache is unavailable (%s)", exc)
        return ids
    moment = now.timestamp()
    return [
        queue_id
        for queue_id in ids
        if pass_dirty_key(queue_id) in marks
        or (due := marks.get(pass_due_key(queue_id))) is None
        or (due != NEVER and due <= moment)
    ]
