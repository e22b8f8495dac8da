"""How a notification leaves: a signed JSON webhook, a Slack-compatible incoming webhook, or an email.

Each sender makes one try and says what happened (`Outcome`); retrying is the caller's business.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import requests
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import send_mail

SIGNATURE_HEADER = "X-Quotaportal-Signature"
TIMESTAMP_HEADER = "X-Quotaportal-Timestamp"
DELIVERY_HEADER = "X-Quotaportal-Delivery"
USER_AGENT = "quotaportal-notifications/1"
# Only the start of a receiver's answer is kept in the log.
ERROR_CHARS = 500


@dataclass(frozen=True)
class Outcome:
    ok: bool
    response_code: int | None = None
    error: str = ""
    # False: trying again cannot help (the address is refused, the receiver said the request is wrong).
    retry: bool = True


def signature(*, secret: str, timestamp: str, body: bytes) -> str:
    """`v1=` and the hex HMAC-SHA256 of `<timestamp>.<body>` under the subscription's secret."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"v1={digest}"


def signature_valid(*, secret: str, timestamp: str, body: bytes, header: str) -> bool:
    return hmac.compare_digest(signature(secret=secret, timestamp=timestamp, body=body), header)


def _private(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return not ip.is_global or ip.is_multicast


def webhook_url_check(url: str, *, resolve: bool) -> None:
    """An http(s) URL with a host; unless NOTIFY_ALLOW_PRIVATE_WEBHOOKS, one that does not name (or, with
    `resolve`, resolve to) a loopback, private or link-local address. Raises ValidationError on `target`."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError({"target": ["Enter an http:// or https:// URL with a host name."]})
    try:
        parts.port  # noqa: B018 - reading it is the check
    except ValueError:
        raise ValidationError({"target": [f"{url} has a port that is no port number."]}) from None
    if settings.NOTIFY_ALLOW_PRIVATE_WEBHOOKS:
        return
    host = parts.hostname
    addresses: list[str]
    try:
        addresses = [str(ipaddress.ip_address(host))]
    except ValueError:
        if host == "localhost" or host.endswith(".localhost"):
            addresses = ["127.0.0.1"]
        elif resolve:
            try:
                addresses = [info[4][0] for info in socket.getaddrinfo(host, parts.port or 443)]
            except OSError as exc:
                raise ValidationError({"target": [f"{host} does not resolve ({exc})."]}) from None
        else:
            return
    if any(_private(address) for address in addresses):
        raise ValidationError(
            {
                "target": [
                    f"{host} is a loopback, private or link-local address, which webhooks may not reach "
                    "(an administrator allows them with NOTIFY_ALLOW_PRIVATE_WEBHOOKS=1)."
                ]
            }
        )


def post(*, url: str, body: dict, secret: str, delivery_id: int) -> Outcome:
    """POST `body` as JSON, signed; 2xx is delivered. Redirects are not followed (a redirect could lead
    where the address check did not look)."""
    try:
        webhook_url_check(url, resolve=True)
    except ValidationError as exc:
        return Outcome(ok=False, error=" ".join(exc.message_dict["target"]), retry=False)
    raw = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: signature(secret=secret, timestamp=timestamp, body=raw),
        DELIVERY_HEADER: str(delivery_id),
    }
    try:
        response = requests.post(
            url, data=raw, headers=headers, timeout=settings.NOTIFY_TIMEOUT_SECONDS, allow_redirects=False
        )
    except requests.RequestException as exc:
        return Outcome(ok=False, error=f"{type(exc).__name__}: {exc}"[:ERROR_CHARS])
    if 200 <= response.status_code < 300:
        return Outcome(ok=True, response_code=response.status_code)
    if 300 <= response.status_code < 400:
        answer = f"a redirect to {response.headers.get('Location', '?')}, not followed: use the final URL"
    else:
        answer = response.text
    # A redirect or a 4xx says the request itself is refused (a wrong URL, a revoked hook): except for 408 and
    # 429, asking again will not change the answer.
    retry = response.status_code >= 500 or response.status_code in (408, 429)
    return Outcome(
        ok=False,
        response_code=response.status_code,
        error=f"HTTP {response.status_code}: {answer}"[:ERROR_CHARS],
        retry=retry,
    )


def email(*, address: str, subject: str, text: str) -> Outcome:
    try:
        send_mail(subject, text, settings.DEFAULT_FROM_EMAIL, [address], fail_silently=False)
    except (OSError, ValueError) as exc:  # smtplib's errors are OSErrors
        return Outcome(ok=False, error=f"{type(exc).__name__}: {exc}"[:ERROR_CHARS])
    return Outcome(ok=True)
