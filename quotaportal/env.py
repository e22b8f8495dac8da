"""Typed readers for environment variables that refuse bad values loudly (in the manner of healthchecks).

Every setting of quotaportal comes from here; `.env.example` lists them all.
"""

from __future__ import annotations

import logging
import os
import re
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def envstr(name: str, default: str) -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean: use one of 1/0, true/false, yes/no, on/off")


def envint(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a whole number") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below its minimum {minimum}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name}={value} is above its maximum {maximum}")
    return value


def envname(name: str, default: str) -> str:
    """A name for a queue or a key prefix: letters, digits, dot, dash and underscore, 1 to 64 of them."""
    raw = os.environ.get(name, default).strip()
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", raw):
        raise ImproperlyConfigured(
            f"{name}={raw!r} is not a usable name: 1 to 64 letters, digits, '.', '-' or '_'"
        )
    return raw


def envlist(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    items = [item.strip() for item in raw.split(",") if item.strip()]
    if not items:
        raise ImproperlyConfigured(f"{name} is set but empty: give a comma-separated list")
    return items


def envurl(name: str, default: str, *, schemes: tuple[str, ...]) -> str:
    raw = os.environ.get(name, default).strip()
    scheme = raw.split("://", 1)[0] if "://" in raw else ""
    if scheme not in schemes:
        raise ImproperlyConfigured(
            f"{name}={_masked(raw)!r} has an unsupported scheme {scheme!r}: "
            f"use one of {', '.join(s + '://' for s in schemes)}"
        )
    try:
        urlsplit(raw).port  # noqa: B018 - reading it is the check: a port that is no port number raises
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={_masked(raw)!r} is not a valid URL: {exc}") from None
    return raw


def _masked(url: str) -> str:
    """The URL without its password, for messages that end up in logs."""
    head, at, tail = url.rpartition("@")
    if not at or "://" not in head:
        return url
    scheme, _, credentials = head.partition("://")
    user, colon, _password = credentials.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}@{tail}"


def envlevel(name: str, default: str) -> str:
    """A logging level by name (DEBUG, INFO, WARNING, ERROR, CRITICAL), in any case."""
    raw = os.environ.get(name, default)
    value = raw.strip().upper()
    if value not in logging.getLevelNamesMapping() or value == "NOTSET":
        raise ImproperlyConfigured(
            f"{name}={raw!r} is not a level: use DEBUG, INFO, WARNING, ERROR or CRITICAL"
        )
    return value


_RATE = re.compile(r"^\s*(\d+)\s*/\s*(s|sec|second|m|min|minute|h|hour|d|day)\s*$")


def envrate(name: str, default: str) -> str | None:
    """A DRF throttle rate such as `600/min`; `0`, `off` or empty turns the limit off (None)."""
    raw = os.environ.get(name, default).strip()
    if raw.lower() in ("", "0", "off", "none"):
        return None
    match = _RATE.match(raw)
    if not match or int(match.group(1)) < 1:
        raise ImproperlyConfigured(
            f"{name}={raw!r} is not a rate: write N/second, N/min, N/hour or N/day, or off"
        )
    return f"{match.group(1)}/{match.group(2)}"
