"""What-if runs: one window of jobs replayed against a queue's configuration as it is and as proposed."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class WhatIfRun(models.Model):
    """A what-if: one window of jobs replayed against a queue's configuration as it was (the baseline) and as
    proposed, side by side. Written only by `whatif.services`."""

    class Source(models.TextChoices):
        HISTORY = "HISTORY", "Recorded job history"
        PHILLY = "PHILLY", "Philly trace"

    class Status(models.TextChoices):
        QUEUED = "QUEUED"
        RUNNING = "RUNNING"
        DONE = "DONE"
        FAILED = "FAILED"

    job_queue = models.ForeignKey("scheduling.JobQueue", on_delete=models.CASCADE, related_name="whatif_runs")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    source = models.CharField(max_length=16, choices=Source.choices)
    window_start = models.DateTimeField()
    window_days = models.FloatField()
    # window_start + window_days, cut at the moment the run was asked for (history has no future).
    window_end = models.DateTimeField()
    # The queue's configuration when the run was asked for (`replay_sources.configuration_mapping`): what
    # "current" replays, and what the queue must still be for the proposal to be applied.
    baseline = models.JSONField()
    # Every share's proposed values: [{"name", "limits": {type: n}, "strategy", "borrow_limit",
    # "in_share_preemption", "lending_limits": {type: n}, "fair_share_weight"}], in the baseline's order.
    proposal = models.JSONField()
    # The queue's proposed settings: {"idle_capacity_assignment", "preemption_min_runtime_seconds"}; {} for a
    # run asked for before the what-if proposed them (it kept the queue's).
    queue_proposal = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    progress = models.FloatField(default=0)
    # When the worker last reported progress: a RUNNING run silent for long lost its worker.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    # {"current": metrics, "proposed": metrics}, each as `simulator.summarize` gives it, without the series.
    result = models.JSONField(default=dict, blank=True)
    # Chart name -> SVG text drawn by `simulator.charts`.
    charts = models.JSONField(default=dict, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    applied_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        # The table keeps the name it had when the model lived in the scheduling app.
        db_table = "scheduling_whatifrun"
        verbose_name = "what-if run"
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(progress__gte=0, progress__lte=1), name="whatif_progress_range"
            ),
            models.CheckConstraint(
                condition=Q(window_end__gt=models.F("window_start")), name="whatif_window_ends_after_start"
            ),
            models.CheckConstraint(
                condition=Q(status__in=["QUEUED", "RUNNING", "DONE", "FAILED"]), name="whatif_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"what-if #{self.pk} on {self.job_queue_id}"

    @property
    def finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)

    @property
    def percent(self) -> int:
        return int(self.progress * 100)
