"""The SageMaker SDK's TrainingQueue and TrainingQueuedJob against a live server: submit, describe, list,
wait for the end, update and terminate. The SDK runs in its own interpreter (`make sdk-venv` builds
.venv-sdk; `make test-sdk` runs this); without it the tests are skipped, unless QUOTAPORTAL_REQUIRE_SDK=1."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from awsapi import keys
from scheduling.models import Job, JobStatus
from scheduling.passes import run as passes
from scheduling.services import executor as executor_services

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]
SDK_PYTHON = Path(os.environ.get("QUOTAPORTAL_SDK_PYTHON", ROOT / ".venv-sdk" / "bin" / "python"))

if not SDK_PYTHON.exists():
    if os.environ.get("QUOTAPORTAL_REQUIRE_SDK") == "1":
        raise RuntimeError(f"QUOTAPORTAL_REQUIRE_SDK=1 but there is no SDK interpreter at {SDK_PYTHON}")
    pytestmark = [pytestmark, pytest.mark.skip(reason=f"no SageMaker SDK at {SDK_PYTHON}: run make sdk-venv")]


@pytest.fixture
def sdk(world, endpoint):
    key, secret = keys.access_key_create(user=world.ana)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
        "AWS_ENDPOINT_URL_BATCH": endpoint,
        "AWS_ACCESS_KEY_ID": key.access_key_id,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_DEFAULT_REGION": "us-west-2",
        "SAGEMAKER_VALIDATE_ROLE": "false",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        "AWS_EC2_METADATA_DISABLED": "true",
    }

    def run(*arguments: str) -> dict:
        done = subprocess.run(
            [str(SDK_PYTHON), str(Path(__file__).with_name("sdk_client.py")), *arguments],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    return run


def test_a_training_queue_submits_and_a_queued_job_waits_until_it_succeeds(world, sdk):
    submitted = sdk("submit", "llm")
    job = Job.objects.get()
    assert submitted["job_arn"].endswith(f":service-job/{job.pk}")
    assert submitted["status"] == "RUNNABLE"
    assert submitted["listed"] == [submitted["job_name"]] == submitted["by_share"]
    assert job.submitted_via == "aws" and job.scheduling_priority == 5
    assert job.payload["command"] == ["python", "train.py", "--epochs", "3"]
    assert [(p.instance_type.name, p.instance_count) for p in job.instance_preferences.all()] == [
        ("ml.p5.48xlarge", 2),
        ("ml.p4d.24xlarge", 2),
    ]
    assert job.attempt_duration_seconds == 86400  # the SDK's default timeoutConfig
    assert job.retry_rules[-1] == {"action": "EXIT", "on_status_reason": "*"}  # the SDK's evaluateOnExit
    passes.queue_pass_run(job_queue_id=world.queue.pk, trigger="test")
    job.refresh_from_db()
    for status in ("RUNNING", "SUCCEEDED"):
        executor_services.job_report(job_id=job.pk, status=status, attempt=job.attempt, actor=world.executor)
    assert sdk("wait", submitted["job_arn"], submitted["job_name"])["status"] == "SUCCEEDED"


def test_a_terminated_job_ends_the_wait_as_failed(world, sdk):
    submitted = sdk("submit", "sweep")
    ended = sdk("terminate", submitted["job_arn"], submitted["job_name"])
    assert ended == {"status": "FAILED", "terminated": True, "priority": 9}
    assert Job.objects.get().status == JobStatus.CANCELLED
