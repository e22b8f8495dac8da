"""Subscriptions, their delivery log, and the cursor that says which events have been read."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from scheduling.models import Event, Team

MIN_AFTER_MINUTES, MAX_AFTER_MINUTES = 1, 7 * 24 * 60


class Trigger(models.TextChoices):
    """What a subscription listens for; the label is how a person reads it."""

    JOB_FAILED = "JOB_FAILED", "a job failed"
    JOB_PREEMPTED = "JOB_PREEMPTED", "a job was preempted"
    JOB_TIMED_OUT = "JOB_TIMED_OUT", "a job timed out (waiting or running too long)"
    JOB_EXECUTOR_LOST = "JOB_EXECUTOR_LOST", "a job lost its executor"
    SHARE_STARVED = "SHARE_STARVED", "a share starved (jobs waiting, none placed) for N minutes"
    BUDGET_WARNING = "BUDGET_WARNING", "a share used 80% of its GPU-hour budget"
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED", "a share spent its GPU-hour budget"
    EXECUTOR_SILENT = "EXECUTOR_SILENT", "an executor went silent for N minutes (staff)"


# Conditions found by looking at the state (not events): they use the subscription's `after_minutes`.
CONDITION_TRIGGERS = (Trigger.SHARE_STARVED, Trigger.EXECUTOR_SILENT)
STAFF_ONLY_TRIGGERS = (Trigger.EXECUTOR_SILENT,)


class Channel(models.TextChoices):
    WEBHOOK = "WEBHOOK", "webhook (JSON, signed)"
    SLACK = "SLACK", "Slack-compatible incoming webhook"
    EMAIL = "EMAIL", "email"


class Subscription(models.Model):
    """Someone's wish to hear about some triggers, on one channel.

    Without a team it is personal: jobs and shares of every team its owner belongs to (staff: all), or only
    the jobs its owner submitted with `only_my_jobs`. With a team it is that team's (made by a manager of the
    team or staff): jobs and shares of that team only, while its owner still belongs to the team.
    """

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_subscriptions"
    )
    team = models.ForeignKey(
        Team, on_delete=models.CASCADE, null=True, blank=True, related_name="notification_subscriptions"
    )
    name = models.CharField(max_length=128)
    channel = models.CharField(max_length=16, choices=Channel.choices)
    # A URL for WEBHOOK and SLACK, an address for EMAIL.
    target = models.CharField(max_length=2000)
    # Signs every webhook body (HMAC-SHA256): the receiver holds the same secret and checks the signature.
    secret = models.CharField(max_length=128)
    triggers = models.JSONField(default=list)
    only_my_jobs = models.BooleanField(default=False)
    after_minutes = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(MIN_AFTER_MINUTES), MaxValueValidator(MAX_AFTER_MINUTES)]
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["owner_id", "name", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(after_minutes__gte=MIN_AFTER_MINUTES, after_minutes__lte=MAX_AFTER_MINUTES),
                name="subscription_after_minutes_range",
            ),
            models.CheckConstraint(
                condition=Q(channel__in=[c.value for c in Channel]), name="subscription_channel_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.channel} to {self.target})"

    @property
    def trigger_labels(self) -> list[str]:
        return [Trigger(code).label if code in Trigger.values else code for code in self.triggers]


class DeliveryStatus(models.TextChoices):
    PENDING = "PENDING", "PENDING"
    SENDING = "SENDING", "SENDING"
    RETRYING = "RETRYING", "RETRYING"
    SENT = "SENT", "SENT"
    FAILED = "FAILED", "FAILED"


class Delivery(models.Model):
    """One notification to one subscription, and what became of sending it: the subscription's log.

    `dedupe_key` says what it is about (an event, a share's starvation since its last placement, an
    executor's silence since it was last seen, a test): one delivery per subscription and key, however often
    the scan looks.
    """

    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE, related_name="deliveries")
    event = models.ForeignKey(Event, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    trigger = models.CharField(max_length=32)
    dedupe_key = models.CharField(max_length=200)
    subject = models.CharField(max_length=500)
    payload = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    response_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "deliveries"
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["subscription", "dedupe_key"], name="delivery_once_per_subject"),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in DeliveryStatus]), name="delivery_status_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["subscription", "created_at"], name="delivery_log_idx"),
            models.Index(fields=["status", "next_attempt_at"], name="delivery_due_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.trigger} to subscription {self.subscription_id}: {self.status}"


class EventCursor(models.Model):
    """The highest event id the scan has read (event ids only grow)."""

    name = models.CharField(max_length=64, unique=True)
    last_event_id = models.BigIntegerField(default=0)
    scanned_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} at event {self.last_event_id}"
