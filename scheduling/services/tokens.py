"""A user's API token (DRF authtoken, `Authorization: Token KEY`): made, rotated and revoked by its user on
their profile page. The key is handed back once, when it is made; afterwards only when it was made shows."""

from __future__ import annotations

import logging

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from rest_framework.authtoken.models import Token

from scheduling.errors import Conflict

logger = logging.getLogger("quotaportal.auth")


@transaction.atomic
def api_token_create(*, user: AbstractBaseUser) -> Token:
    """A first token for the user; a Conflict if they have one (rotate it instead: one token a user)."""
    if Token.objects.select_for_update().filter(user=user).exists():
        raise Conflict("you already have an API token: rotate it to get a new key, or revoke it")
    token = Token.objects.create(user=user)
    logger.info("api token created for %s", user.get_username())
    return token


@transaction.atomic
def api_token_rotate(*, user: AbstractBaseUser) -> Token:
    """A new key in place of the old, which stops working at once."""
    Token.objects.select_for_update().filter(user=user).delete()
    token = Token.objects.create(user=user)
    logger.info("api token rotated for %s", user.get_username())
    return token


@transaction.atomic
def api_token_revoke(*, user: AbstractBaseUser) -> bool:
    """The user's token stops working; False when they had none."""
    deleted, _ = Token.objects.filter(user=user).delete()
    if deleted:
        logger.info("api token revoked for %s", user.get_username())
    return bool(deleted)
