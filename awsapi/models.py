"""What the AWS-compatible API keeps beside quotaportal's own model: access keys, scheduling policies, tags,
and the AWS side of jobs submitted through it. Every scheduling rule stays in `scheduling`."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from scheduling.models import IdleCapacityAssignment, Job, JobQueue, name_validator


class AccessKey(models.Model):
    """An AWS-style credential that acts as its user. The secret is kept encrypted (`awsapi.secrets`): a
    SigV4 signature can only be checked with the secret itself, so it cannot be a one-way hash."""

    access_key_id = models.CharField(max_length=20, unique=True)
    secret_ciphertext = models.TextField(help_text="the secret, encrypted; never shown after creation")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="access_keys")
    description = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["user_id", "-created_at", "-id"]

    def __str__(self) -> str:
        return self.access_key_id

    @property
    def active(self) -> bool:
        return self.revoked_at is None


class SchedulingPolicy(models.Model):
    """AWS Batch's scheduling policy: here, the idle-capacity rule it writes onto the queues that use it."""

    name = models.CharField(max_length=128, unique=True, validators=[name_validator])
    idle_resource_assignment_strategy = models.CharField(
        max_length=20, choices=IdleCapacityAssignment.choices, default=IdleCapacityAssignment.FIFO
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "scheduling policies"

    def __str__(self) -> str:
        return self.name


class QueuePolicy(models.Model):
    """Which scheduling policy a queue uses (at most one); the queue's own field holds the rule itself."""

    job_queue = models.OneToOneField(JobQueue, on_delete=models.CASCADE, related_name="aws_policy")
    policy = models.ForeignKey(SchedulingPolicy, on_delete=models.PROTECT, related_name="queue_links")

    def __str__(self) -> str:
        return f"{self.job_queue_id} uses {self.policy_id}"


class Tagged(models.TextChoices):
    SERVICE_ENVIRONMENT = "service-environment"
    SCHEDULING_POLICY = "scheduling-policy"
    JOB_QUEUE = "job-queue"
    QUOTA_SHARE = "quota-share"
    SERVICE_JOB = "service-job"


class ResourceTags(models.Model):
    """An object's AWS tags, returned as they were given (keys `quotaportal:*` are read at creation only)."""

    resource = models.CharField(max_length=32, choices=Tagged.choices)
    object_id = models.BigIntegerField()
    tags = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["resource", "object_id"], name="resource_tags_unique_object")
        ]

    def __str__(self) -> str:
        return f"{self.resource} {self.object_id}"


class ServiceJob(models.Model):
    """The AWS side of a job submitted through the AWS API: the SageMaker request as it was sent."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, primary_key=True, related_name="aws")
    service_request_payload = models.TextField()
    training_job_name = models.CharField(max_length=63)

    def __str__(self) -> str:
        return f"service job {self.job_id}"
