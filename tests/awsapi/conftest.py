"""A live server and real boto3 `batch` clients signing with access keys, against the API tests' world:
queue `training` (environment `gpu-fleet`) with shares `nlp` (team nlp) and `vision` (team vision)."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.config import Config

from awsapi import keys
from scheduling.models import ServiceEnvironment
from tests.api.conftest import world  # noqa: F401 (the same world as the API's tests)
from tests.api.support import P4, P5

REGION = "us-west-2"


@pytest.fixture
def endpoint(live_server) -> str:
    return f"{live_server.url}/aws/batch"


_open_clients: list = []


def client(endpoint: str, key_id: str, secret: str, **config):
    # One attempt: a test sees the server's answer, not botocore's retries of it.
    made = boto3.client(
        "batch",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, **config),
    )
    _open_clients.append(made)
    return made


@pytest.fixture(autouse=True)
def _clients_closed():
    """Each test's clients hang up at its end, so the live server's threads (and their database
    connections) end before the test database is dropped."""
    yield
    while _open_clients:
        _open_clients.pop().close()


@pytest.fixture
def batch_for(endpoint):
    """A boto3 batch client signing with a new access key of the user."""

    def make(user):
        key, secret = keys.access_key_create(user=user)
        return client(endpoint, key.access_key_id, secret)

    return make


@pytest.fixture
def simulated(world):  # noqa: F811
    """The world's environment runs jobs itself, so a submission needs no command."""
    ServiceEnvironment.objects.filter(pk=world.queue.service_environment_id).update(
        executor=ServiceEnvironment.Executor.SIMULATED
    )
    return world


def payload(*preferences, **extra) -> str:
    """A SageMaker CreateTrainingJob request as the SDK builds it (shown in docs/aws-api.md)."""
    body = {
        "TrainingJobName": extra.pop("name", "llm-20261204234847"),
        "AlgorithmSpecification": {
            "TrainingInputMode": "File",
            "TrainingImage": "registry.example.com/train:1",
        },
        "ResourceConfig": {
            "VolumeSizeInGB": 30,
            "InstancePreferences": list(preferences)
            or [{"InstanceType": P5, "InstanceCount": 2}, {"InstanceType": P4, "InstanceCount": 2}],
        },
        "RoleArn": "arn:aws:iam::123456789012:role/SageMakerRole",
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
        **extra,
    }
    return json.dumps(body)
