"""Text PostgreSQL cannot store (NUL, unpaired surrogates) is a ClientException naming the member, never a
database error (called in-process: the operations are what the endpoint runs once the signature holds)."""

from __future__ import annotations

import pytest

from awsapi.errors import ClientError
from awsapi.operations import jobs
from awsapi.protocol import Members
from scheduling.models import Job
from tests.awsapi.conftest import payload

pytestmark = pytest.mark.django_db


def submission(**overrides) -> Members:
    body = {
        "jobName": "j",
        "jobQueue": "training",
        "serviceJobType": "SAGEMAKER_TRAINING",
        "quotaShareName": "nlp",
        "serviceRequestPayload": payload(),
    }
    return Members({**body, **overrides})


@pytest.mark.parametrize(
    ("overrides", "path"),
    [
        ({"jobName": "a\ud800"}, "jobName"),
        ({"clientToken": "t\x00"}, "clientToken"),
        ({"tags": {"k": "v\udfff"}}, "tags.k"),
        (
            {"serviceRequestPayload": payload(Environment={"A": "\x00"})},
            "serviceRequestPayload.Environment.A",
        ),
        (
            {"retryStrategy": {"attempts": 1, "evaluateOnExit": [{"action": "EXIT", "onReason": "\ud800*"}]}},
            "retryStrategy.evaluateOnExit[0].onReason",
        ),
    ],
)
def test_unstorable_text_is_refused_naming_the_member(simulated, overrides, path):
    with pytest.raises(ClientError) as caught:
        jobs.submit_service_job(simulated.ana, submission(**overrides))
    assert caught.value.message.startswith(path), caught.value.message
    assert not Job.objects.exists()


def test_a_payload_nested_too_deep_to_read_is_a_client_error(simulated):
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ClientError) as caught:
        jobs.submit_service_job(simulated.ana, submission(serviceRequestPayload=deep))
    assert caught.value.message.startswith("serviceRequestPayload: is not valid JSON")
