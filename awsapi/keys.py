"""Access keys: create (the secret is returned once), list, revoke, and the lookup a signed request makes.

Every write is here; the API, the page and `manage.py access_key` call these.
"""

from __future__ import annotations

import logging
import secrets
from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from awsapi.models import AccessKey
from awsapi.protocol import UNSTORABLE
from awsapi.secrets_box import secret_open, secret_seal
from scheduling.errors import Conflict, NotAllowed, NotFound

logger = logging.getLogger("quotaportal.auth")

KEY_ID_PREFIX = "QPAK"
KEY_ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"  # base32, as AWS's own key ids
MAX_KEYS_PER_USER = 10
# last_used_at is written at most this often per key: a busy script must not write a row per request.
LAST_USED_PRECISION = timedelta(seconds=60)


def _new_key_id() -> str:
    return KEY_ID_PREFIX + "".join(secrets.choice(KEY_ID_ALPHABET) for _ in range(16))


@transaction.atomic
def access_key_create(*, user: AbstractBaseUser, description: str = "") -> tuple[AccessKey, str]:
    """A new key for `user`; returns it with its secret, which is never readable again."""
    if UNSTORABLE.search(description):
        raise ValidationError({"description": ["must be valid Unicode text without NUL characters"]})
    if not user.is_active:
        raise NotAllowed(f"user {user.get_username()} is inactive and cannot have access keys")
    active = AccessKey.objects.select_for_update().filter(user=user, revoked_at__isnull=True)
    if len(active) >= MAX_KEYS_PER_USER:
        raise Conflict(
            f"{user.get_username()} already has {MAX_KEYS_PER_USER} active access keys; revoke one first"
        )
    secret = secrets.token_urlsafe(30)  # 40 characters, as AWS's secrets
    key = AccessKey.objects.create(
        access_key_id=_new_key_id(),
        secret_ciphertext=secret_seal(secret),
        user=user,
        description=description.strip()[:200],
    )
    logger.info("access key %s created for %s", key.access_key_id, user.get_username())
    return key, secret


def access_keys_of(*, user: AbstractBaseUser) -> QuerySet[AccessKey]:
    """A user's keys, newest first, revoked ones included (they say when)."""
    return AccessKey.objects.filter(user=user).order_by("-created_at", "-id")


@transaction.atomic
def access_key_revoke(*, access_key_id: str, actor: AbstractBaseUser | None) -> AccessKey:
    """Revoke a key at once: its owner or staff (`actor` None: an administrator's command)."""
    key = (
        AccessKey.objects.select_for_update()
        .select_related("user")
        .filter(access_key_id=access_key_id)
        .first()
    )
    if key is None or (actor is not None and not actor.is_staff and key.user_id != actor.pk):
        raise NotFound(f"no access key {access_key_id}")
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        who = actor.get_username() if actor is not None else "an administrator"
        logger.info("access key %s of %s revoked by %s", key.access_key_id, key.user.get_username(), who)
    return key


def access_key_for_signing(access_key_id: str) -> tuple[AccessKey, str] | None:
    """The active key with this id, of an active user, and its secret; None when there is none."""
    key = (
        AccessKey.objects.select_related("user")
        .filter(access_key_id=access_key_id, revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if key is None:
        return None
    return key, secret_open(key.secret_ciphertext)


def access_key_used(*, key: AccessKey, now: datetime) -> None:
    """Record that a signed request used the key (at most once a minute per key)."""
    if key.last_used_at is None or now - key.last_used_at >= LAST_USED_PRECISION:
        AccessKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
