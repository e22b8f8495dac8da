"""Signed requests from boto3 against a live server: unknown and revoked keys, bad signatures, clock skew,
throttling after repeated failures; the secret never appears in a log or an answer."""

from __future__ import annotations

from datetime import timedelta

import pytest
from botocore import UNSIGNED
from botocore.exceptions import ClientError
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from awsapi import auth as aws_auth
from awsapi import keys
from awsapi.models import AccessKey
from tests.awsapi.conftest import client

pytestmark = pytest.mark.django_db(transaction=True)


def code_of(call) -> tuple[str, int]:
    with pytest.raises(ClientError) as caught:
        call()
    error = caught.value.response
    return error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]


def test_a_signed_request_acts_as_the_key_user_and_records_its_use(world, endpoint):
    key, secret = keys.access_key_create(user=world.ana)
    batch = client(endpoint, key.access_key_id, secret)
    assert [queue["jobQueueName"] for queue in batch.describe_job_queues()["jobQueues"]] == ["training"]
    key.refresh_from_db()
    assert key.last_used_at is not None


def test_an_unknown_key_is_unrecognized(world, endpoint):
    batch = client(endpoint, "QPAKAAAAAAAAAAAAAAAA", "x" * 40)
    assert code_of(batch.describe_job_queues) == ("UnrecognizedClientException", 403)


def test_a_revoked_key_is_unrecognized(world, endpoint):
    key, secret = keys.access_key_create(user=world.ana)
    keys.access_key_revoke(access_key_id=key.access_key_id, actor=world.ana)
    assert code_of(client(endpoint, key.access_key_id, secret).describe_job_queues) == (
        "UnrecognizedClientException",
        403,
    )


def test_a_wrong_secret_is_an_invalid_signature(world, endpoint):
    key, _ = keys.access_key_create(user=world.ana)
    batch = client(endpoint, key.access_key_id, "not-the-secret-of-this-key-at-all-000000")
    assert code_of(batch.describe_job_queues) == ("InvalidSignatureException", 403)


def test_an_unsigned_request_is_missing_its_token(world, endpoint):
    batch = client(endpoint, "x", "y", signature_version=UNSIGNED)
    assert code_of(batch.describe_job_queues) == ("MissingAuthenticationTokenException", 403)


class _Skewed:
    @staticmethod
    def now():
        return timezone.now() + timedelta(minutes=16)


def test_a_clock_skewed_over_fifteen_minutes_is_refused(world, endpoint, monkeypatch):
    key, secret = keys.access_key_create(user=world.ana)
    monkeypatch.setattr(aws_auth, "timezone", _Skewed)
    with pytest.raises(ClientError) as caught:
        client(endpoint, key.access_key_id, secret).describe_job_queues()
    assert caught.value.response["Error"]["Code"] == "InvalidSignatureException"
    assert "Signature expired" in caught.value.response["Error"]["Message"]


def test_repeated_failures_lock_the_key_out_like_sign_ins(world, endpoint, settings):
    settings.LOGIN_FAILURE_LIMIT = 3
    key, secret = keys.access_key_create(user=world.ana)
    wrong = client(endpoint, key.access_key_id, "wrong-secret-" + "0" * 27)
    for _ in range(3):
        assert code_of(wrong.describe_job_queues)[0] == "InvalidSignatureException"
    right = client(endpoint, key.access_key_id, secret)
    assert code_of(right.describe_job_queues) == ("TooManyRequestsException", 429)
    # Lifted as a sign-in lockout is, by the key id (which axes keeps case-folded).
    call_command("axes_reset_username", key.access_key_id.lower())
    assert right.describe_job_queues()["jobQueues"]


def test_the_secret_never_reaches_a_log_or_an_answer(world, endpoint, caplog, django_client):
    caplog.set_level("DEBUG")
    key, secret = keys.access_key_create(user=world.ana)
    client(endpoint, key.access_key_id, secret).describe_job_queues()
    assert code_of(client(endpoint, key.access_key_id, "wrong-secret-" + "0" * 27).describe_job_queues)
    django_client.force_login(world.ana)
    page = django_client.get("/profile/access-keys/").content.decode()
    listed = django_client.get("/api/v1/access-keys/").content.decode()
    assert key.access_key_id in caplog.text  # the log names keys by id
    assert secret not in caplog.text
    assert secret not in page and secret not in listed
    assert secret not in AccessKey.objects.get(pk=key.pk).secret_ciphertext


@pytest.fixture
def django_client():
    return Client()


def test_a_body_over_the_size_limit_is_refused_before_anything_runs(world, endpoint, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048
    key, secret = keys.access_key_create(user=world.ana)
    batch = client(endpoint, key.access_key_id, secret)
    with pytest.raises(ClientError) as caught:
        batch.submit_service_job(
            jobName="big",
            jobQueue="training",
            serviceJobType="SAGEMAKER_TRAINING",
            quotaShareName="nlp",
            serviceRequestPayload="x" * 5000,
        )
    assert caught.value.response["Error"]["Code"] == "ClientException"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 413
