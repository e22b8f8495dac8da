"""Who signed a request to the AWS-compatible API: SigV4 against the access keys, failures counted as sign-in
failures are (django-axes, `quotaportal.accounts`): the access key id stands for the username, so a key (or
an address) that keeps failing is refused for LOGIN_LOCKOUT_SECONDS, like a password being guessed."""

from __future__ import annotations

import logging

from axes.handlers.proxy import AxesProxyHandler
from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.http import HttpRequest
from django.utils import timezone

from awsapi import keys, sigv4
from awsapi.errors import AwsError, TooManyRequests
from awsapi.secrets_box import SecretUnreadable

logger = logging.getLogger("quotaportal.auth")


def _credentials(key_id: str) -> dict:
    return {"username": key_id}


def signed_user(request: HttpRequest, *, raw_path: str):
    """The active user whose access key signed `request`; raises AwsError with AWS's code otherwise.

    `raw_path` is the path as the client encoded it (the view rebuilds it: WSGI hands Django a decoded one).
    """
    try:
        auth = sigv4.authorization_parse(request.headers.get("Authorization"))
    except sigv4.SignatureError as exc:
        raise AwsError(exc.message, code=exc.code, status=exc.status) from None
    credentials = _credentials(auth.access_key_id)
    if not AxesProxyHandler.is_allowed(request, credentials):
        raise TooManyRequests(
            f"too many failed signatures for access key {auth.access_key_id} or from this address; "
            f"retry in {settings.LOGIN_LOCKOUT_SECONDS} s"
        )
    try:
        sigv4.request_time_check(
            auth=auth,
            amz_date=request.headers.get("X-Amz-Date"),
            now=timezone.now(),
            max_skew_seconds=settings.AWS_MAX_SKEW_SECONDS,
        )
        found = keys.access_key_for_signing(auth.access_key_id)
        if found is None:
            raise sigv4.SignatureError(
                "UnrecognizedClientException", "The security token included in the request is invalid."
            )
        key, secret = found
        sigv4.signature_check(
            auth=auth,
            secret=secret,
            method=request.method,
            raw_path=raw_path,
            raw_query=request.META.get("QUERY_STRING", ""),
            headers={name.lower(): value for name, value in request.headers.items()},
            body=request.body,
        )
    except SecretUnreadable:
        logger.error("access key %s: %s", auth.access_key_id, "its secret cannot be decrypted")
        _failure(request, credentials, "UnrecognizedClientException")
        raise AwsError(
            "The security token included in the request is invalid.",
            code="UnrecognizedClientException",
            status=403,
        ) from None
    except sigv4.SignatureError as exc:
        _failure(request, credentials, exc.code)
        raise AwsError(exc.message, code=exc.code, status=exc.status) from None
    keys.access_key_used(key=key, now=timezone.now())
    return key.user


def _failure(request: HttpRequest, credentials: dict, code: str) -> None:
    logger.warning("AWS API request refused (%s) for access key %s", code, credentials["username"])
    user_login_failed.send(sender=__name__, credentials=credentials, request=request)
    # axes would turn the response into its sign-in lockout page; the API answers in AWS's shape instead.
    request.axes_locked_out = False
