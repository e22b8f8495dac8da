"""seed_demo publishes its passwords: with DEBUG off it refuses unless forced, then makes random ones."""

from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduling.management.commands.seed_demo import ADMIN, DEMO_PASSWORD

pytestmark = pytest.mark.django_db


def seed(**options) -> str:
    out = io.StringIO()
    call_command("seed_demo", jobs=2, stdout=out, **options)
    return out.getvalue()


def test_seed_demo_with_debug_off_refuses_without_force_and_creates_nothing(settings):
    settings.DEBUG = False

    with pytest.raises(CommandError, match="DEBUG is off.*--force"):
        seed()

    assert not get_user_model().objects.exists()


def test_seed_demo_forced_with_debug_off_gives_random_passwords_printed_once(settings):
    settings.DEBUG = False

    first = seed(force=True)
    again = seed(force=True)

    admin_password = re.search(rf"superuser {ADMIN[0]}, password \(shown only now\): (\S+)", first).group(1)
    member_password = re.search(r"ana, .*password \(shown only now\): (\S+)", first).group(1)
    admin = get_user_model().objects.get(username=ADMIN[0])
    ana = get_user_model().objects.get(username="ana")
    assert admin.is_superuser and admin.check_password(admin_password)
    assert not admin.check_password(ADMIN[1])
    assert ana.check_password(member_password) and not ana.check_password(DEMO_PASSWORD)
    assert admin_password not in again and member_password not in again
    assert "existing passwords are unchanged" in again


def test_seed_demo_with_debug_on_keeps_the_published_demo_passwords(settings):
    settings.DEBUG = True

    out = seed()

    assert f"{ADMIN[0]} / {ADMIN[1]}" in out
    assert get_user_model().objects.get(username=ADMIN[0]).check_password(ADMIN[1])
    assert get_user_model().objects.get(username="ana").check_password(DEMO_PASSWORD)
