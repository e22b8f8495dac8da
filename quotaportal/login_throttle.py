"""Sign-in throttling for the login page and the admin's: failed attempts are counted in the shared cache.

After LOGIN_FAILURE_LIMIT failures for one username, or ten times as many from one address (a password
sprayed over many usernames), a sign-in is refused with 429 for LOGIN_LOCKOUT_SECONDS after the last failure,
before the password is even checked. A successful sign-in clears its username's count. Counting in
CACHES makes the limit hold across every web process; a cache that is down lets sign-ins through.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from functools import wraps

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from redis.exceptions import RedisError

logger = logging.getLogger("quotaportal.auth")

ADDRESS_FACTOR = 10


def client_address(request: HttpRequest) -> str:
    """The client's address; behind a proxy (BEHIND_PROXY=1), the last in X-Forwarded-For (the proxy's)."""
    if settings.BEHIND_PROXY:
        forwarded = [
            part.strip() for part in request.headers.get("X-Forwarded-For", "").split(",") if part.strip()
        ]
        if forwarded:
            return forwarded[-1]
    return request.META.get("REMOTE_ADDR", "")


def _counter(kind: str, value: str) -> str:
    return f"login-failures:{kind}:{hashlib.sha256(value.encode()).hexdigest()}"


def _refused(seconds: int) -> HttpResponse:
    minutes = max(1, round(seconds / 60))
    body = (
        '<!doctype html><html lang="en"><head><title>Too many sign-in attempts</title></head><body>'
        "<h1>Too many sign-in attempts</h1><p>Too many failed sign-in attempts for this account or from "
        f"this address. Try again in {minutes} minute{'s' if minutes != 1 else ''}.</p>"
        '<p><a href="">Back to sign-in</a></p></body></html>'
    )
    response = HttpResponse(body, status=429)
    response["Retry-After"] = str(seconds)
    return response


def login_throttled(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Wrap a login view whose failed sign-in answers 200 (the form again) and whose success redirects."""

    @wraps(view)
    def throttled(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if request.method != "POST":
            return view(request, *args, **kwargs)
        limit, lockout = settings.LOGIN_FAILURE_LIMIT, settings.LOGIN_LOCKOUT_SECONDS
        username = str(request.POST.get("username", "")).strip().lower()
        limits = {
            _counter("user", username): limit,
            _counter("address", client_address(request)): limit * ADDRESS_FACTOR,
        }
        try:
            counts = cache.get_many(list(limits))
        except (OSError, RedisError) as exc:
            logger.warning("sign-in throttle skipped: the cache is unavailable (%s)", exc)
            return view(request, *args, **kwargs)
        if any(counts.get(key, 0) >= maximum for key, maximum in limits.items()):
            logger.warning(
                "sign-in refused: too many failures for username %r or address %s",
                username,
                client_address(request),
            )
            return _refused(lockout)
        response = view(request, *args, **kwargs)
        try:
            if response.status_code == 200:  # the form again: the credentials were wrong
                for key, maximum in limits.items():
                    cache.add(key, 0, timeout=lockout)
                    if cache.incr(key) >= maximum:
                        cache.touch(key, timeout=lockout)  # the lockout runs from the last failure
            elif 300 <= response.status_code < 400:
                cache.delete(_counter("user", username))
        except (OSError, RedisError, ValueError) as exc:  # ValueError: the counter expired before incr
            logger.warning("sign-in throttle could not count an attempt (%s)", exc)
        return response

    return throttled
