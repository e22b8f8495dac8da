"""Hostile input boto3 would send unchecked: text PostgreSQL cannot store (NUL, unpaired surrogates), JSON
nested too deep, numbers that are not numbers; each a ClientException naming the member, never a server error
(called in-process: the operations are what the endpoint runs once the signature holds)."""

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


@pytest.mark.parametrize("value", ["²", "99999999999999999999", "-1", "1.5"])
def test_a_time_filter_that_is_not_epoch_milliseconds_is_a_client_error(world, value):
    filters = [{"name": "AFTER_CREATED_AT", "values": [value]}]
    with pytest.raises(ClientError) as caught:
        jobs.list_service_jobs(world.ana, Members({"filters": filters}))
    assert caught.value.message.startswith("filters[0].values[0]: must be milliseconds since the epoch")


@pytest.mark.parametrize("value", ["²", "0", "x"])
def test_a_duration_tag_that_is_not_whole_seconds_is_a_client_error(simulated, value):
    with pytest.raises(ClientError) as caught:
        jobs.submit_service_job(simulated.ana, submission(tags={"quotaportal:durationSeconds": value}))
    assert caught.value.message.startswith("tags.quotaportal:durationSeconds")
