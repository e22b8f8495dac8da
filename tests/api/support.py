"""Names and bodies the API tests share."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils import timezone

from scheduling.models import (
    InstanceType,
    Job,
    JobAttempt,
    JobQueue,
    JobStatus,
    QuotaShare,
    Team,
    TrainingPlan,
)

P5, P4, G5 = "ml.p5.48xlarge", "ml.p4d.24xlarge", "ml.g5.12xlarge"


@dataclass
class World:
    queue: JobQueue
    nlp: QuotaShare
    vision: QuotaShare
    plan: TrainingPlan
    team_nlp: Team
    team_vision: Team
    users: dict

    def __getattr__(self, name):
        try:
            return self.users[name]
        except KeyError:
            raise AttributeError(name) from None


def submission(**overrides) -> dict:
    body = {
        "name": "pretrain",
        "job_queue": "training",
        "quota_share": "nlp",
        "instance_preferences": [
            {"instance_type": P5, "instance_count": 2, "training_plan": "nlp-p5-december"},
            {"instance_type": P5, "instance_count": 2},
            {"instance_type": P4, "instance_count": 2},
        ],
        "payload": {"image": "registry.example.com/nlp/trainer:1", "command": ["python3", "train.py"]},
    }
    body.update(overrides)
    return body


def placed(job: Job, type_name=P5, count=2, plan: TrainingPlan | None = None) -> Job:
    """Put a job in SCHEDULED as a pass would (tests of reports and cancels need no engine)."""
    now = timezone.now()
    job.status = JobStatus.SCHEDULED
    job.selected_instance_type = InstanceType.objects.get(name=type_name)
    job.selected_instance_count = count
    job.selected_training_plan = plan
    job.scheduled_at = now
    job.attempt += 1
    job.save()
    JobAttempt.objects.create(
        job=job,
        attempt=job.attempt,
        instance_type=job.selected_instance_type,
        instance_count=count,
        training_plan=plan,
        scheduled_at=now,
    )
    return job
