"""Job submissions per user, at API_SUBMIT_RATE, counted in the cache every web process shares (CACHES)."""

from __future__ import annotations

import logging

from django.conf import settings
from redis.exceptions import RedisError
from rest_framework.throttling import UserRateThrottle

logger = logging.getLogger("quotaportal.api")


class SubmissionRateThrottle(UserRateThrottle):
    """429 with Retry-After once a user has submitted API_SUBMIT_RATE jobs in the window.

    The rate is read when the throttle is built (per request), not when DRF's settings load, so it follows
    settings; a cache that is down lets submissions through rather than refusing every one of them.
    """

    scope = "submit"

    def get_rate(self) -> str | None:
        return settings.API_SUBMIT_RATE

    def allow_request(self, request, view) -> bool:
        try:
            return super().allow_request(request, view)
        except (OSError, RedisError) as exc:
            logger.warning("submission throttle skipped: the cache is unavailable (%s)", exc)
            return True
