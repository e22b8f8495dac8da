"""Access keys: each user creates, lists and revokes their own; the secret is shown once and kept encrypted."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from awsapi import keys
from awsapi.models import AccessKey
from awsapi.secrets_box import secret_open
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
KEYS = "/api/v1/access-keys/"


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_a_user_creates_a_key_and_sees_its_secret_once():
    ana = UserFactory(username="ana")
    response = api(ana).post(KEYS, {"description": "laptop"}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert re.fullmatch(r"QPAK[A-Z2-7]{16}", body["access_key_id"])
    assert len(body["secret_access_key"]) == 40
    listed = api(ana).get(KEYS).json()
    assert [key["access_key_id"] for key in listed] == [body["access_key_id"]]
    assert body["secret_access_key"] not in str(listed)
    assert "secret" not in str(listed)


def test_the_secret_is_encrypted_at_rest():
    ana = UserFactory(username="ana")
    key, secret = keys.access_key_create(user=ana)
    stored = AccessKey.objects.get(pk=key.pk).secret_ciphertext
    assert secret not in stored
    assert secret_open(stored) == secret


def test_a_key_is_revoked_by_its_owner_but_another_user_cannot_see_or_revoke_it():
    ana, chen = UserFactory(username="ana"), UserFactory(username="chen")
    key, _ = keys.access_key_create(user=ana)
    assert api(chen).get(KEYS).json() == []
    assert api(chen).delete(f"{KEYS}{key.access_key_id}/").status_code == 404
    assert api(ana).delete(f"{KEYS}{key.access_key_id}/").status_code == 204
    key.refresh_from_db()
    assert not key.active
    assert keys.access_key_for_signing(key.access_key_id) is None


def test_a_body_with_an_unknown_field_is_refused_naming_it():
    response = api(UserFactory()).post(KEYS, {"descripton": "x"}, format="json")
    assert response.status_code == 400
    assert "descripton" in response.json()


def test_anonymous_requests_are_refused():
    assert APIClient().get(KEYS).status_code in (401, 403)


def test_the_command_prints_a_credentials_file_and_revokes(capsys):
    ana = UserFactory(username="ana")
    call_command("access_key", "create", "ana")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("aws_access_key_id = QPAK")
    assert out[1].startswith("aws_secret_access_key = ")
    key_id = out[0].split(" = ")[1]
    secret = out[1].split(" = ")[1]
    assert keys.access_key_for_signing(key_id)[1] == secret
    call_command("access_key", "revoke", key_id)
    assert keys.access_key_for_signing(key_id) is None
    call_command("access_key", "list", "ana")
    listing = capsys.readouterr().out
    assert key_id in listing and "revoked" in listing and secret not in listing
    assert AccessKey.objects.filter(user=ana).count() == 1


def test_the_page_shows_a_new_secret_once_then_only_the_key_id(client):
    ana = UserFactory(username="ana")
    client.force_login(ana)
    created = client.post("/profile/access-keys/", {"action": "create", "description": "ci"})
    assert created.status_code == 200
    key = AccessKey.objects.get(user=ana)
    secret = secret_open(key.secret_ciphertext)
    assert secret in created.content.decode()
    again = client.get("/profile/access-keys/").content.decode()
    assert key.access_key_id in again and secret not in again
    client.post("/profile/access-keys/", {"action": "revoke", "access_key_id": key.access_key_id})
    key.refresh_from_db()
    assert not key.active


def test_the_page_needs_a_sign_in(client):
    response = client.get("/profile/access-keys/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_staff_list_and_revoke_keys_in_the_admin_without_seeing_a_secret(client):
    admin = UserFactory(username="root", is_staff=True, is_superuser=True)
    key, secret = keys.access_key_create(user=UserFactory(username="ana"))
    client.force_login(admin)
    page = client.get("/admin/awsapi/accesskey/").content.decode()
    assert key.access_key_id in page and secret not in page
    detail = client.get(f"/admin/awsapi/accesskey/{key.pk}/change/").content.decode()
    assert secret not in detail and key.secret_ciphertext not in detail
    client.post("/admin/awsapi/accesskey/", {"action": "revoke", "_selected_action": [key.pk]})
    key.refresh_from_db()
    assert not key.active


def test_a_description_postgresql_could_not_store_is_refused_naming_it():
    body = '{"description": "a\\ud800b"}'  # an unpaired surrogate, escaped as JSON allows
    response = api(UserFactory()).post(KEYS, body, content_type="application/json")
    assert response.status_code == 400 and "description" in response.json()
    assert not AccessKey.objects.exists()
