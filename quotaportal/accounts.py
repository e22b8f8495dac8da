"""Sign-in and credentials: django-axes configured for quotaportal; API tokens revoked on a password change.

Sign-in lockout (settings `AXES_*` point here): after LOGIN_FAILURE_LIMIT failed sign-ins for one account, or
ADDRESS_FACTOR times as many from one address (a password sprayed over many usernames), every sign-in for it,
on /accounts/login/ and /admin/login/, is refused with 429 until LOGIN_LOCKOUT_SECONDS have passed since the
last attempt. An account is its username as Django's forms read it (NFKC, the user model's normalisation) and
case-folded, the way Django's user creation form refuses names differing only in case, so no other spelling of
a locked account gets a fresh count. Failures are counted in the database (axes' AccessAttempt, listed and
removable in the admin; `manage.py axes_reset_username <name>` unlocks one), so every web process shares them.
"""

from __future__ import annotations

import logging
import unicodedata
from datetime import timedelta

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_lockout_parameters
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

logger = logging.getLogger("quotaportal.auth")

ADDRESS_FACTOR = 10


def lockout_username(request: HttpRequest, credentials: dict | None) -> str:
    """The account a sign-in attempt is counted against: one key for every spelling Django signs in as one."""
    field = get_user_model().USERNAME_FIELD
    if credentials:
        raw = credentials.get(field)
    else:
        raw = getattr(request, "data", request.POST).get(field)
    name = get_user_model().normalize_username(str(raw or "").strip())
    # Case folding can leave text that is not NFKC (and NFKC text that folds further): settle both.
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())


def client_address(request: HttpRequest) -> str:
    """The client's address; behind a proxy (BEHIND_PROXY=1), the last in X-Forwarded-For (the proxy's)."""
    if settings.BEHIND_PROXY:
        forwarded = [
            part.strip() for part in request.headers.get("X-Forwarded-For", "").split(",") if part.strip()
        ]
        if forwarded:
            return forwarded[-1]
    return request.META.get("REMOTE_ADDR", "")


def failure_limit(request: HttpRequest | None, credentials: dict | None) -> int:
    # Read at every attempt, not copied into AXES_FAILURE_LIMIT at start-up, so a changed setting applies.
    return settings.LOGIN_FAILURE_LIMIT


def lockout_time(request: HttpRequest | None) -> timedelta:
    return timedelta(seconds=settings.LOGIN_LOCKOUT_SECONDS)


def lockout_response(
    request: HttpRequest, original_response=None, credentials: dict | None = None
) -> HttpResponse:
    """429 with Retry-After: every attempt while locked out starts the lockout again, so it is all of it."""
    seconds = settings.LOGIN_LOCKOUT_SECONDS
    minutes = max(1, round(seconds / 60))
    logger.warning(
        "sign-in refused: too many failures for username %r or address %s",
        lockout_username(request, credentials),
        client_address(request),
    )
    response = render(request, "429.html", {"minutes": minutes}, status=429)
    response["Retry-After"] = str(seconds)
    return response


class LockoutHandler(AxesDatabaseHandler):
    """axes' database handler with a looser limit per address than per username.

    AXES_LOCKOUT_PARAMETERS is ["username", "ip_address"]; axes compares each with one limit, so an office
    behind one address would be locked out by five typos. Here an address counts one per ADDRESS_FACTOR.
    """

    def get_failures(self, request, credentials: dict | None = None) -> int:
        failures = 0
        parameters = get_lockout_parameters(request, credentials)
        for parameter, attempts in zip(parameters, self.get_user_attempts(request, credentials), strict=True):
            total = attempts.aggregate(n=Sum("failures_since_start"))["n"] or 0
            failures = max(failures, total // ADDRESS_FACTOR if parameter == "ip_address" else total)
        return failures

    def reset_user_attempts(self, request, credentials: dict | None = None) -> int:
        """A success clears its username's failures only: a sprayer's own account clears no others."""
        count, _ = AccessAttempt.objects.filter(username=lockout_username(request, credentials)).delete()
        return count


class ApiTokensRevokedOnPasswordChange:
    """Deletes a user's API token when their password is set (admin, `changepassword`, any `set_password`).

    Not a validator of passwords: Django's documented `password_changed` hook of AUTH_PASSWORD_VALIDATORS is
    the one call made exactly when a password is set, and not when Django re-hashes an unchanged password at
    sign-in or when a password is made unusable (an executor account that signs in only by token keeps it).
    """

    def validate(self, password: str, user=None) -> None:
        return None

    def password_changed(self, password: str, user=None) -> None:
        if user is None or user.pk is None:
            return
        from rest_framework.authtoken.models import Token

        deleted, _ = Token.objects.filter(user=user).delete()
        if deleted:
            logger.info("API token of %s revoked: the password changed", user.get_username())

    def get_help_text(self) -> str:
        return "Setting a new password also revokes the API token."
