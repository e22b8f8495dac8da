"""An API token does not outlive the password it was issued under: setting a password revokes it."""

from __future__ import annotations

import pytest
from django.contrib.auth.forms import AdminPasswordChangeForm
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"


def answers_to(token: Token) -> int:
    return APIClient().get(JOBS, HTTP_AUTHORIZATION=f"Token {token.key}").status_code


def test_setting_a_new_password_revokes_the_users_api_token():
    user = UserFactory(username="ana")
    token = Token.objects.create(user=user)
    assert answers_to(token) == 200

    user.set_password("a-new-password-1")
    user.save()

    assert not Token.objects.filter(user=user).exists()
    assert answers_to(token) == 401


def test_a_password_changed_in_the_admin_form_revokes_the_token_and_only_that_users():
    user, other = UserFactory(username="ana"), UserFactory(username="ben")
    Token.objects.create(user=user)
    kept = Token.objects.create(user=other)
    form = AdminPasswordChangeForm(user, {"password1": "a-new-password-1", "password2": "a-new-password-1"})
    assert form.is_valid(), form.errors

    form.save()

    assert not Token.objects.filter(user=user).exists()
    assert answers_to(kept) == 200


def test_saving_a_user_without_a_new_password_keeps_the_token():
    user = UserFactory(username="ana")
    token = Token.objects.create(user=user)

    user.first_name = "Ana"
    user.save()

    assert answers_to(token) == 200


def test_rehashing_an_unchanged_password_at_sign_in_keeps_the_token(settings):
    user = UserFactory(username="ana")  # hashed with MD5, the tests' hasher
    token = Token.objects.create(user=user)
    settings.PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.PBKDF2PasswordHasher",
        "django.contrib.auth.hashers.MD5PasswordHasher",
    ]

    response = Client().post("/accounts/login/", {"username": "ana", "password": "pw-for-tests-1"})

    user.refresh_from_db()
    assert response.status_code == 302
    assert user.password.startswith("pbkdf2_sha256$")  # Django upgraded the hash as it signed ana in
    assert answers_to(token) == 200


def test_making_a_password_unusable_keeps_the_token_of_an_account_that_signs_in_by_token():
    executor = UserFactory(username="executor")
    token = Token.objects.create(user=executor)

    executor.set_unusable_password()
    executor.save()

    assert answers_to(token) == 200


def test_the_password_forms_say_that_a_change_revokes_the_token():
    form = AdminPasswordChangeForm(UserFactory(username="ana"))

    assert "also revokes the API token" in str(form["password1"].help_text)
