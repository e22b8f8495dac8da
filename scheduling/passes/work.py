"""The work version of an environment: a cache key an external executor's long-poll watches (api.md).

Whatever may give an executor something to start or stop (a pass that places or stops jobs, a cancel) bumps
`work-version:{environment id}` once its transaction commits. A waiting `GET .../work/` request compares the
key between short sleeps, holding no database connection, and reads the database only when it moved (or
every `WORK_RECHECK_SECONDS`, in case a bump was lost with the cache).
"""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction

from scheduling.models import ServiceEnvironment

logger = logging.getLogger("quotaportal.scheduling")

# How often a waiting request looks at the cache key: a cache read, no database, every step.
WORK_POLL_STEP_SECONDS = 0.2


def work_version_key(environment_id: int) -> str:
    return f"work-version:{environment_id}"


def work_version(environment_id: int) -> int | None:
    """The environment's current work version (None when unset or when the cache is unavailable)."""
    try:
        return cache.get(work_version_key(environment_id))
    except Exception as exc:  # the cache is down: the waiting request falls back to its periodic recheck
        logger.warning("work version of environment %s unreadable: %s", environment_id, exc)
        return None


def work_changed(*, environment: ServiceEnvironment) -> None:
    """Once the current transaction commits, tell the environment's waiting executors to look again."""
    if environment.executor != ServiceEnvironment.Executor.EXTERNAL:
        return

    def bump() -> None:
        try:
            cache.set(work_version_key(environment.pk), time.time_ns(), timeout=None)
        except Exception as exc:  # waiting executors still recheck the database every few seconds
            logger.warning("work version of environment %s not bumped: %s", environment.pk, exc)

    transaction.on_commit(bump)


def work_wait(*, environment_id: int, seen: int | None, until: float) -> None:
    """Sleep until the environment's work version moves from `seen`, or `until` (a `time.monotonic()`), or
    WORK_RECHECK_SECONDS pass, whichever is first, holding no database connection meanwhile.

    The caller reads the version before it reads the database, so a bump in between is never missed. The
    connection is closed only outside a transaction (never inside a test's or a caller's atomic block); the
    next query opens a new one.
    """
    if not connection.in_atomic_block:
        connection.close()
    stop = min(until, time.monotonic() + settings.WORK_RECHECK_SECONDS)
    while (left := stop - time.monotonic()) > 0:
        time.sleep(min(WORK_POLL_STEP_SECONDS, left))
        if work_version(environment_id) != seen:
            return
