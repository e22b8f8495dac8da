"""The SageMaker SDK's TrainingQueue against quotaportal, offline: run by test_sagemaker_sdk.py with the SDK's
own interpreter (.venv-sdk), one step per call, printing one JSON object. Never imports the project.

Offline as AWS's SDK allows it: a full role ARN, SAGEMAKER_VALIDATE_ROLE=false, an S3 output path and S3
inputs; the batch client reaches quotaportal through AWS_ENDPOINT_URL_BATCH.
"""

from __future__ import annotations

import json
import sys

from sagemaker.core.shapes import InstancePreference
from sagemaker.train import ModelTrainer
from sagemaker.train.aws_batch.training_queue import TrainingQueue
from sagemaker.train.aws_batch.training_queued_job import TrainingQueuedJob
from sagemaker.train.configs import Compute, InputData, OutputDataConfig

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"


def trainer(name: str) -> ModelTrainer:
    return ModelTrainer(
        training_image="registry.example.com/train:1",
        role=ROLE,
        base_job_name=name,
        compute=Compute(
            instance_preferences=[
                InstancePreference(instance_type="ml.p5.48xlarge", instance_count=2),
                InstancePreference(instance_type="ml.p4d.24xlarge", instance_count=2),
            ]
        ),
        output_data_config=OutputDataConfig(s3_output_path="s3://bucket/out"),
        environment={"QUOTAPORTAL_COMMAND": "python train.py --epochs 3"},
        hyperparameters={"lr": "0.1"},
    )


def submit(name: str) -> dict:
    queue = TrainingQueue("training")
    inputs = [InputData(channel_name="train", data_source="s3://bucket/train/")]
    job = queue.submit(trainer(name), inputs, quota_share_name="nlp", priority=5)
    described = job.describe()
    listed = [queued.job_name for queued in queue.list_jobs(status="RUNNABLE")]
    by_share = [
        queued.job_name for queued in queue.list_jobs_by_share(status="RUNNABLE", quota_share_name="nlp")
    ]
    return {
        "job_arn": job.job_arn,
        "job_name": job.job_name,
        "status": described["status"],
        "listed": listed,
        "by_share": by_share,
    }


def wait(job_arn: str, job_name: str) -> dict:
    described = TrainingQueuedJob(job_arn, job_name).wait(timeout=60)
    return {"status": described["status"], "reason": described.get("statusReason")}


def terminate(job_arn: str, job_name: str) -> dict:
    job = TrainingQueuedJob(job_arn, job_name)
    job.update(scheduling_priority=9)
    job.terminate(reason="not needed")
    described = job.wait(timeout=60)
    return {
        "status": described["status"],
        "terminated": described["isTerminated"],
        "priority": described["schedulingPriority"],
    }


if __name__ == "__main__":
    step, *arguments = sys.argv[1:]
    print(json.dumps({"submit": submit, "wait": wait, "terminate": terminate}[step](*arguments)))
