"""quotaportal's data model (behaviour.md#what-there-is).

Rules one row can hold are database constraints; rules that span rows (sum of share limits against the
environment's capacity, preference lists) live in `scheduling.rules`, used by the admin, forms and API alike.
"""

from __future__ import annotations

import hashlib
from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from engine.submission import MAX_PREFERENCES  # noqa: F401 (the one bound; forms and the admin read it here)

NAME_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"
name_validator = RegexValidator(
    NAME_PATTERN, "Use 1 to 128 letters, digits, hyphens or underscores (no spaces).", code="invalid_name"
)

# What the database's columns hold: ids (BigAutoField: PostgreSQL bigint) and integer columns (PostgreSQL
# integer; SQLite would hold 64 bits, so every layer bounds input by these, whichever database runs).
MAX_ID = 9_223_372_036_854_775_807
MIN_STORED_INT, MAX_STORED_INT = -2_147_483_648, 2_147_483_647
MAX_SHARES_PER_QUEUE = 20
MAX_SHARE_LIMITS = 5
MAX_PAYLOAD_BYTES = 64 * 1024
MAX_STOP_GRACE_SECONDS = 3600
MIN_LEASE_SECONDS = 10
MAX_LEASE_SECONDS = 86400
MAX_ATTEMPT_DURATION_SECONDS = 2_592_000  # 30 days, AWS Batch's own bound on timeoutConfig
MIN_START_DEADLINE_SECONDS = 5
MAX_START_DEADLINE_SECONDS = 86400


# Choices are labelled with their codes, the rules' spelling: one way on the pages, in the admin and the API
# (Django's own labels would be title-cased guesses, "Lend And Borrow"). Event kinds are read as words instead.
class State(models.TextChoices):
    ENABLED = "ENABLED", "ENABLED"
    DISABLED = "DISABLED", "DISABLED"


class InstanceType(models.Model):
    name = models.CharField(max_length=64, unique=True)
    gpu_count = models.PositiveIntegerField(default=0)
    hourly_price = models.DecimalField(
        max_digits=10, decimal_places=4, null=True, blank=True, validators=[MinValueValidator(0)]
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(hourly_price__gte=0) | Q(hourly_price__isnull=True),
                name="instance_type_price_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def accelerated(self) -> bool:
        return self.gpu_count > 0


class Team(models.Model):
    name = models.CharField(max_length=128, unique=True)
    slug = models.SlugField(max_length=64, unique=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="teams")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        MEMBER = "member"
        MANAGER = "manager"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        ordering = ["team__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["team", "user"], name="membership_unique_user_per_team")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class ServiceEnvironment(models.Model):
    class Executor(models.TextChoices):
        SIMULATED = "simulated"
        EXTERNAL = "external"

    name = models.CharField(max_length=128, unique=True, validators=[name_validator])
    state = models.CharField(max_length=16, choices=State.choices, default=State.ENABLED)
    executor = models.CharField(max_length=16, choices=Executor.choices, default=Executor.SIMULATED)
    stop_grace_seconds = models.PositiveIntegerField(
        default=120,
        validators=[MaxValueValidator(MAX_STOP_GRACE_SECONDS)],
        help_text="How long a stopping job keeps its capacity before it counts as stopped (SIGTERM to SIGKILL).",
    )
    lease_seconds = models.PositiveIntegerField(
        default=300,
        validators=[MinValueValidator(MIN_LEASE_SECONDS), MaxValueValidator(MAX_LEASE_SECONDS)],
        help_text="A job taken by an executor that reports nothing for this long is lost (EXECUTOR_LOST).",
    )
    start_deadline_seconds = models.PositiveIntegerField(
        default=600,
        validators=[
            MinValueValidator(MIN_START_DEADLINE_SECONDS),
            MaxValueValidator(MAX_START_DEADLINE_SECONDS),
        ],
        help_text="A placed job not started by all its executors within this time goes back to RUNNABLE "
        "(START_TIMEOUT) and waits before its next placement.",
    )
    executor_accounts = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        blank=True,
        related_name="served_environments",
        help_text="Executor accounts that may take work from this environment and report on its jobs.",
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(stop_grace_seconds__lte=MAX_STOP_GRACE_SECONDS),
                name="environment_stop_grace_range",
            ),
            models.CheckConstraint(
                condition=Q(lease_seconds__gte=MIN_LEASE_SECONDS, lease_seconds__lte=MAX_LEASE_SECONDS),
                name="environment_lease_range",
            ),
            models.CheckConstraint(
                condition=Q(
                    start_deadline_seconds__gte=MIN_START_DEADLINE_SECONDS,
                    start_deadline_seconds__lte=MAX_START_DEADLINE_SECONDS,
                ),
                name="environment_start_deadline_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def capacity_by_type(self) -> dict[str, int]:
        return {limit.instance_type.name: limit.max_capacity for limit in self.capacity_limits.all()}


class Executor(models.Model):
    """A program that runs an environment's jobs, as it names itself on the work endpoint (behaviour.md#a-jobs-life)."""

    service_environment = models.ForeignKey(
        ServiceEnvironment, on_delete=models.CASCADE, related_name="executors"
    )
    name = models.CharField(max_length=128)
    host = models.CharField(max_length=255, blank=True, default="")
    last_seen_at = models.DateTimeField(default=timezone.now)
    jobs_taken = models.PositiveIntegerField(default=0)
    jobs_lost = models.PositiveIntegerField(default=0)
    # What its last poll asked for: the instance type ("" any) and how many instances it could start (None:
    # it did not say), so a job placed but not taken can say whether any executor has room for it.
    offered_instance_type = models.CharField(max_length=64, blank=True, default="")
    offered_slots = models.PositiveIntegerField(null=True, blank=True)
    # Executors that ask for tasks (`gang=1` on the work endpoint) may take part of a job of several instances;
    # the others are handed only jobs they can take whole. `total_slots`: all the instances it has (None: it
    # did not say); `address`: where its tasks' peers reach it; `ports`: the range it gives a job's main port.
    gang_capable = models.BooleanField(default=False)
    total_slots = models.PositiveIntegerField(null=True, blank=True)
    address = models.CharField(max_length=255, blank=True, default="")
    ports = models.CharField(max_length=32, blank=True, default="")

    class Meta:
        ordering = ["service_environment_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["service_environment", "name"], name="executor_unique_name")
        ]

    def __str__(self) -> str:
        return f"{self.name} on {self.host or '?'}"


class EnvironmentCapacity(models.Model):
    """`max_capacity` instances of one type that the environment may run at once on on-demand capacity."""

    service_environment = models.ForeignKey(
        ServiceEnvironment, on_delete=models.CASCADE, related_name="capacity_limits"
    )
    instance_type = models.ForeignKey(InstanceType, on_delete=models.PROTECT, related_name="+")
    max_capacity = models.PositiveIntegerField()

    class Meta:
        verbose_name_plural = "environment capacities"
        ordering = ["instance_type__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["service_environment", "instance_type"], name="environment_capacity_unique_type"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.instance_type} x{self.max_capacity}"


class IdleCapacityAssignment(models.TextChoices):
    # The codes are the product's words (as Ordering's and Strategy's): Django would make "Fifo" of FIFO.
    FIFO = "FIFO", "FIFO"
    FAIR_SHARE = "FAIR_SHARE", "FAIR_SHARE"


# Settings a form may leave out: left blank, they keep the model's default (or the value already saved).
OPTIONAL_SETTINGS = (
    "idle_capacity_assignment",
    "preemption_min_runtime_seconds",
    "relocation_min_runtime_seconds",
    "fair_share_weight",
    "budget_period",
    "budget_scope",
)

IDLE_CAPACITY_ASSIGNMENT_HELP = (
    "Who gets idle capacity among borrowers: FIFO = earliest submission (AWS); "
    "FAIR_SHARE = the share borrowing least for its fair-share weight."
)
MAX_RELOCATION_MIN_RUNTIME_SECONDS = 86_400
RELOCATION_MIN_RUNTIME_HELP = (
    "Seconds a job that may be relocated runs on an attempt before it may move to an earlier entry of its "
    "list (0..86,400)."
)
RELOCATE_HELP = (
    "When it runs on a later entry of its list, the job may be stopped gracefully and moved to an earlier "
    "one once that entry has room nobody waiting asks for (it should checkpoint and resume)."
)
PREEMPTION_MIN_RUNTIME_HELP = (
    "Seconds a job runs after it is scheduled before reclaim or in-share preemption may stop it "
    "(0 = at once); plan drains and lowered capacity ignore it."
)
FAIR_SHARE_WEIGHT_HELP = (
    "Under FAIR_SHARE, this share's claim on idle capacity: weight 2 borrows twice as much as weight 1."
)
LENDING_LIMIT_HELP = (
    "Most of this limit a LEND or LEND_AND_BORROW share lends when idle; the rest it keeps as RESERVE "
    "does. Empty = lends all of it."
)


class JobQueue(models.Model):
    class Ordering(models.TextChoices):
        BEST_EFFORT_FIFO = "BEST_EFFORT_FIFO", "BEST_EFFORT_FIFO"
        STRICT_FIFO = "STRICT_FIFO", "STRICT_FIFO"

    name = models.CharField(max_length=128, unique=True, validators=[name_validator])
    priority = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(1000)])
    state = models.CharField(max_length=16, choices=State.choices, default=State.ENABLED)
    # One environment per queue, never shared with another queue: the database holds that rule.
    service_environment = models.OneToOneField(
        ServiceEnvironment, on_delete=models.PROTECT, related_name="job_queue"
    )
    ordering = models.CharField(max_length=20, choices=Ordering.choices, default=Ordering.BEST_EFFORT_FIFO)
    idle_capacity_assignment = models.CharField(
        max_length=20,
        choices=IdleCapacityAssignment.choices,
        default=IdleCapacityAssignment.FIFO,
        help_text=IDLE_CAPACITY_ASSIGNMENT_HELP,
    )
    preemption_min_runtime_seconds = models.PositiveIntegerField(
        default=0, help_text=PREEMPTION_MIN_RUNTIME_HELP
    )
    relocation_min_runtime_seconds = models.PositiveIntegerField(
        default=600,
        validators=[MaxValueValidator(MAX_RELOCATION_MIN_RUNTIME_SECONDS)],
        help_text=RELOCATION_MIN_RUNTIME_HELP,
    )

    class Meta:
        ordering = ["-priority", "name"]
        constraints = [
            models.CheckConstraint(condition=Q(priority__lte=1000), name="job_queue_priority_range")
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def enabled(self) -> bool:
        return self.state == State.ENABLED and self.service_environment.state == State.ENABLED


class BudgetPeriod(models.TextChoices):
    DAY = "DAY", "DAY"
    WEEK = "WEEK", "WEEK"
    MONTH = "MONTH", "MONTH"


class BudgetScope(models.TextChoices):
    ALL = "ALL", "ALL"
    BORROWED = "BORROWED", "BORROWED"


BUDGET_HELP = (
    "GPU-hours the share may spend on on-demand capacity per calendar period (UTC; weeks start on Monday); "
    "once spent, it starts no new job (scope ALL) or borrows no more (scope BORROWED) until the period ends. "
    "Empty: no budget."
)
MAX_BUDGET_GPU_HOURS = Decimal("999999999.999")


class QuotaShare(models.Model):
    class Strategy(models.TextChoices):
        RESERVE = "RESERVE", "RESERVE"
        LEND = "LEND", "LEND"
        LEND_AND_BORROW = "LEND_AND_BORROW", "LEND_AND_BORROW"

    name = models.CharField(max_length=128, validators=[name_validator])
    job_queue = models.ForeignKey(JobQueue, on_delete=models.CASCADE, related_name="quota_shares")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="quota_shares")
    strategy = models.CharField(max_length=20, choices=Strategy.choices, default=Strategy.RESERVE)
    borrow_limit = models.IntegerField(
        default=-1,
        validators=[MinValueValidator(-1)],
        help_text="Percent of the share's limit it may borrow above it; -1 = unlimited. LEND_AND_BORROW only.",
    )
    in_share_preemption = models.BooleanField(default=False)
    fair_share_weight = models.DecimalField(
        max_digits=8,
        decimal_places=3,
        default=Decimal(1),
        validators=[MinValueValidator(Decimal("0.001"))],
        help_text=FAIR_SHARE_WEIGHT_HELP,
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.ENABLED)
    budget_gpu_hours = models.DecimalField(
        max_digits=12,
        decimal_places=3,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0.001")), MaxValueValidator(MAX_BUDGET_GPU_HOURS)],
        help_text=BUDGET_HELP,
    )
    budget_period = models.CharField(max_length=8, choices=BudgetPeriod.choices, default=BudgetPeriod.MONTH)
    budget_scope = models.CharField(max_length=8, choices=BudgetScope.choices, default=BudgetScope.ALL)

    class Meta:
        ordering = ["job_queue__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["job_queue", "name"], name="quota_share_unique_name_per_queue"),
            models.CheckConstraint(condition=Q(borrow_limit__gte=-1), name="quota_share_borrow_limit_range"),
            models.CheckConstraint(
                condition=Q(borrow_limit=-1) | Q(strategy="LEND_AND_BORROW"),
                name="quota_share_borrow_limit_only_when_borrowing",
            ),
            models.CheckConstraint(condition=Q(fair_share_weight__gt=0), name="quota_share_weight_positive"),
            models.CheckConstraint(
                condition=Q(budget_gpu_hours__isnull=True) | Q(budget_gpu_hours__gt=0),
                name="quota_share_budget_positive",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def enabled(self) -> bool:
        return self.state == State.ENABLED

    @property
    def budget(self) -> dict | None:
        """The budget as the API spells it (None: no budget)."""
        if self.budget_gpu_hours is None:
            return None
        return {"gpu_hours": self.budget_gpu_hours, "period": self.budget_period, "scope": self.budget_scope}


class ShareCapacityLimit(models.Model):
    quota_share = models.ForeignKey(QuotaShare, on_delete=models.CASCADE, related_name="capacity_limits")
    instance_type = models.ForeignKey(InstanceType, on_delete=models.PROTECT, related_name="+")
    max_capacity = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    lending_limit = models.PositiveIntegerField(null=True, blank=True, help_text=LENDING_LIMIT_HELP)

    class Meta:
        ordering = ["instance_type__name"]
        constraints = [
            models.UniqueConstraint(fields=["quota_share", "instance_type"], name="share_limit_unique_type"),
            models.CheckConstraint(condition=Q(max_capacity__gte=1), name="share_limit_at_least_one"),
            models.CheckConstraint(
                condition=Q(lending_limit__isnull=True) | Q(lending_limit__lte=F("max_capacity")),
                name="share_limit_lending_within_max_capacity",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.instance_type} x{self.max_capacity}"


class TrainingPlan(models.Model):
    class Status(models.TextChoices):
        SCHEDULED = "SCHEDULED", "SCHEDULED"
        ACTIVE = "ACTIVE", "ACTIVE"
        EXPIRED = "EXPIRED", "EXPIRED"

    name = models.CharField(max_length=128, unique=True, validators=[name_validator])
    job_queue = models.ForeignKey(JobQueue, on_delete=models.CASCADE, related_name="training_plans")
    instance_type = models.ForeignKey(InstanceType, on_delete=models.PROTECT, related_name="+")
    instance_count = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    start_time = models.DateTimeField()
    end_time = models.DateTimeField()
    quota_shares = models.ManyToManyField(
        QuotaShare,
        blank=True,
        related_name="training_plans",
        help_text="Shares that may draw on this plan; none selected = every share of the queue.",
    )

    class Meta:
        ordering = ["start_time", "name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(end_time__gt=models.F("start_time")), name="plan_ends_after_start"
            ),
            models.CheckConstraint(condition=Q(instance_count__gte=1), name="plan_at_least_one_instance"),
        ]

    def __str__(self) -> str:
        return self.name

    def status_at(self, now) -> str:
        if now < self.start_time:
            return self.Status.SCHEDULED
        if now < self.end_time:
            return self.Status.ACTIVE
        return self.Status.EXPIRED

    @property
    def status(self) -> str:
        return self.status_at(timezone.now())


class JobStatus(models.TextChoices):
    RUNNABLE = "RUNNABLE", "RUNNABLE"
    SCHEDULED = "SCHEDULED", "SCHEDULED"
    STARTING = "STARTING", "STARTING"
    RUNNING = "RUNNING", "RUNNING"
    SUCCEEDED = "SUCCEEDED", "SUCCEEDED"
    FAILED = "FAILED", "FAILED"
    CANCELLED = "CANCELLED", "CANCELLED"
    STOPPING = "STOPPING", "STOPPING"


PLACED_STATUSES = (JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING)
# What holds capacity: a STOPPING job keeps its instances until it is STOPPED or its grace period ends.
HOLDING_STATUSES = (*PLACED_STATUSES, JobStatus.STOPPING)
UNFINISHED_STATUSES = (JobStatus.RUNNABLE, *HOLDING_STATUSES)


class StopOutcome(models.TextChoices):
    """What a STOPPING job becomes once it is STOPPED (or its grace period ends)."""

    RUNNABLE = "RUNNABLE"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    # Rank 0 of a job on several hosts exited 0: the other ranks have the grace period to finish (no stop is
    # sent them before it ends).
    SUCCEEDED = "SUCCEEDED"


FINISHED_STATUSES = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


class Job(models.Model):
    name = models.CharField(max_length=128, validators=[name_validator])
    # The (x, status) indexes in Meta serve these foreign keys too: every index is work for each pass's writes.
    # A job outlives its queue and share (behaviour.md#what-there-is: deleting them cancels it, and it stays readable):
    # the link goes, the name stays (`*_name`, written at submission and on a rename). An unfinished job always has
    # both links (constraint below). Its team is for good: a team with jobs cannot be deleted.
    job_queue = models.ForeignKey(
        JobQueue, on_delete=models.SET_NULL, null=True, blank=True, related_name="jobs", db_index=False
    )
    job_queue_name = models.CharField(max_length=128)
    quota_share = models.ForeignKey(
        QuotaShare, on_delete=models.SET_NULL, null=True, blank=True, related_name="jobs", db_index=False
    )
    quota_share_name = models.CharField(max_length=128)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="jobs", db_index=False)
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="jobs"
    )
    scheduling_priority = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(9999)])
    retry_attempts = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(10)]
    )
    preemption_retries_before_termination = models.PositiveIntegerField(null=True, blank=True)
    max_pending_seconds = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)]
    )
    duration_seconds = models.PositiveIntegerField(null=True, blank=True)
    relocate = models.BooleanField(default=False, help_text=RELOCATE_HELP)
    attempt_duration_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_ATTEMPT_DURATION_SECONDS)],
        help_text="An attempt placed longer than this is stopped and counts as failed (ATTEMPT_TIMEOUT).",
    )
    # On a failed attempt the first matching rule decides: [{"action": "RETRY"|"EXIT", "on_status_reason",
    # "on_reason", "on_exit_code": glob}] (AWS Batch's evaluateOnExit; `scheduling.retry`).
    retry_rules = models.JSONField(default=list, blank=True)
    # Where it was submitted: "" (the pages or /api/v1/) or "aws" (the AWS-compatible API).
    submitted_via = models.CharField(max_length=16, blank=True, default="")
    payload = models.JSONField(default=dict, blank=True)
    # NULL, not "": jobs without a token must not collide under the per-user unique constraint.
    client_token = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001

    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.RUNNABLE)
    status_reason = models.TextField(blank=True, default="")
    selected_instance_type = models.ForeignKey(
        InstanceType, on_delete=models.PROTECT, null=True, blank=True, related_name="+", db_index=False
    )
    selected_instance_count = models.PositiveIntegerField(null=True, blank=True)
    selected_training_plan = models.ForeignKey(
        TrainingPlan, on_delete=models.SET_NULL, null=True, blank=True, related_name="jobs"
    )
    borrowed_instances = models.PositiveIntegerField(default=0)
    preemption_count = models.PositiveIntegerField(default=0)
    failed_attempts = models.PositiveSmallIntegerField(default=0)

    created_at = models.DateTimeField(default=timezone.now)
    runnable_since = models.DateTimeField(default=timezone.now)
    scheduled_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)

    # The executor protocol (behaviour.md#a-jobs-life). `attempt` numbers placements from 1; a report names the one it
    # is about.
    attempt = models.PositiveIntegerField(default=0)
    taken_by = models.ForeignKey(
        "Executor", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )
    taken_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    stop_deadline = models.DateTimeField(null=True, blank=True)
    stop_outcome = models.CharField(max_length=16, choices=StopOutcome.choices, blank=True, default="")
    stop_reason = models.TextField(blank=True, default="")
    nominated_entry = models.PositiveSmallIntegerField(null=True, blank=True)
    nominated_victims = models.JSONField(default=list, blank=True)
    # Jobs on several executors (multi-host.md): when the last task was claimed and the roster handed out (None:
    # still gathering); how often the job was placed and not started in time; and the backoff that follows,
    # before which no pass places it again.
    roster_at = models.DateTimeField(null=True, blank=True)
    start_timeouts = models.PositiveIntegerField(default=0)
    not_before = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [("report_job_status", "Can report job status as an executor")]
        indexes = [
            models.Index(fields=["job_queue", "status"], name="job_queue_status_idx"),
            models.Index(fields=["quota_share", "status"], name="job_share_status_idx"),
            models.Index(fields=["team", "status"], name="job_team_status_idx"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(scheduling_priority__lte=9999), name="job_priority_range"),
            models.CheckConstraint(
                condition=Q(retry_attempts__gte=1, retry_attempts__lte=10), name="job_retry_attempts_range"
            ),
            models.CheckConstraint(
                condition=Q(max_pending_seconds__isnull=True) | Q(max_pending_seconds__gte=1),
                name="job_max_pending_positive",
            ),
            models.CheckConstraint(
                condition=Q(attempt_duration_seconds__isnull=True)
                | Q(
                    attempt_duration_seconds__gte=1,
                    attempt_duration_seconds__lte=MAX_ATTEMPT_DURATION_SECONDS,
                ),
                name="job_attempt_duration_range",
            ),
            models.UniqueConstraint(
                fields=["submitted_by", "client_token"],
                condition=Q(client_token__isnull=False),
                name="job_client_token_unique",
            ),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in JobStatus]), name="job_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in FINISHED_STATUSES])
                | Q(job_queue__isnull=False, quota_share__isnull=False),
                name="job_unfinished_has_queue_and_share",
            ),
            models.CheckConstraint(
                condition=~Q(status="STOPPING")
                | Q(stop_deadline__isnull=False, stop_outcome__in=[o.value for o in StopOutcome]),
                name="job_stopping_has_deadline_and_outcome",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    @property
    def relocating_to(self) -> int | None:
        """The 1-based preference a relocated job moves to while it stops and waits for it (None otherwise)."""
        if self.nominated_entry is not None and self.nominated_victims == [self.pk]:
            return self.nominated_entry + 1
        return None

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def taken(self) -> bool:
        """The executor has taken the job: it may be running a process, so stopping it takes time."""
        return self.taken_at is not None

    @property
    def waiting(self) -> PendingState | None:
        """The last pass's verdict on a RUNNABLE job (load with `select_related("pending")`), else None."""
        if self.status != JobStatus.RUNNABLE:
            return None
        try:
            return self.pending
        except PendingState.DoesNotExist:
            return None

    @property
    def current_reason(self) -> str:
        """What the API and pages call `status_reason`: why it waits if RUNNABLE, else its last transition's reason."""
        waiting = self.waiting
        return waiting.status_reason if waiting is not None else self.status_reason

    @property
    def queue_position(self) -> int | None:
        waiting = self.waiting
        return waiting.queue_position if waiting is not None else None

    @property
    def estimated_start(self) -> dict | None:
        """behaviour.md#why-pending-and-when-it-will-start: {earliest, latest, basis} of a RUNNABLE job once an estimate
        run has reached it, else None."""
        waiting = self.waiting
        if waiting is None or waiting.estimated_at is None:
            return None
        return {
            "earliest": waiting.estimated_earliest,
            "latest": waiting.estimated_latest,
            "basis": waiting.estimate_basis,
        }


class PendingState(models.Model):
    """Why a RUNNABLE job waits and its place in its share's queue, as the last pass found them.

    A pass rewrites thousands of these; kept apart from Job they are narrow rows with one index, not new
    versions of wide job rows with seven. A pass deletes the row once the job leaves RUNNABLE; so does a
    cancellation. `Job.status_reason` keeps the reason of the job's last transition (preempted, retrying...).

    The reason is stored as what it is made of: `clauses` names, in order, the `PendingClause`s (an entry's
    verdict, `ml.p5.48xlarge x4: share nlp at its limit 8/8 ...`) that `status_reason` joins with "; ". Jobs
    that wait for the same reasons share the clauses, so a pass writes a few bytes per job, not the sentence.
    """

    job = models.OneToOneField(Job, on_delete=models.CASCADE, primary_key=True, related_name="pending")
    clauses = models.TextField()  # `PendingClause` ids in hexadecimal, space-separated, in reading order
    queue_position = models.PositiveIntegerField()
    # behaviour.md#why-pending-and-when-it-will-start, written off the pass's hot path by
    # `scheduling.services.estimates` (null until the first estimate after the pass wrote the row; both times null with
    # a basis saying why when it never starts).
    estimated_earliest = models.DateTimeField(null=True, blank=True)
    estimated_latest = models.DateTimeField(null=True, blank=True)
    estimate_basis = models.TextField(blank=True, default="")
    estimated_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"job {self.job_id} #{self.queue_position}: {self.status_reason}"

    @property
    def status_reason(self) -> str:
        """The sentence a person reads: the clauses' words joined by "; "."""
        return pending_words([self.clauses])[0]


class PendingClause(models.Model):
    """One clause of the pending reasons of a queue's jobs, written once however many jobs it explains.

    Its id is a digest of its queue and words (`pending_clause_id`), so an id names the same words for as long
    as it exists and a pass finds the id of a clause without asking. A pass adds the clauses it needs and
    removes those that no pending row of the queue has used since the pass before it (a page that read a row
    just before a pass still finds that row's clauses).
    """

    id = models.BigIntegerField(primary_key=True)
    job_queue = models.ForeignKey(JobQueue, on_delete=models.CASCADE, related_name="+")
    text = models.TextField()

    def __str__(self) -> str:
        return self.text


CLAUSE_SEPARATOR = "; "
_clause_words: dict[int, str] = {}  # id -> words: an id always names the same words (see PendingClause)
_CLAUSE_WORDS_KEPT = 50_000


def pending_clause_id(job_queue_id: int, text: str) -> int:
    """A clause's id: the first 63 bits of the BLAKE2b digest of its queue and its words."""
    digest = hashlib.blake2b(f"{job_queue_id}\n{text}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def pending_words(clause_lists: list[str]) -> list[str]:
    """The sentences of `PendingState.clauses` values, in order: the words of clauses already read in this
    process are kept, the others read in one query."""
    known = _clause_words
    ids = [[int(part, 16) for part in clauses.split()] for clauses in clause_lists]
    missing = {clause_id for found in ids for clause_id in found if clause_id not in known}
    # What this call read is used from its own dict: another thread may empty the shared one meanwhile.
    fetched = dict(PendingClause.objects.filter(pk__in=missing).values_list("id", "text")) if missing else {}
    if fetched:
        if len(known) + len(fetched) > _CLAUSE_WORDS_KEPT:
            known.clear()
        known.update(fetched)
    # A clause removed between the read of its row and this one (two passes later) reads as nothing.
    return [
        CLAUSE_SEPARATOR.join(fetched.get(clause_id) or known.get(clause_id, "") for clause_id in found)
        for found in ids
    ]


def pending_words_load(jobs) -> None:
    """Read the clauses of these jobs' pending rows (loaded with `select_related("pending")`) in one query, so
    that showing each job's reason asks nothing more."""
    pending_words([job.pending.clauses for job in jobs if job.waiting is not None])


class JobPreference(models.Model):
    """One entry of a job's ordered instance preference list."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="instance_preferences")
    position = models.PositiveSmallIntegerField(validators=[MaxValueValidator(MAX_PREFERENCES - 1)])
    instance_type = models.ForeignKey(InstanceType, on_delete=models.PROTECT, related_name="+")
    instance_count = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    training_plan = models.ForeignKey(
        TrainingPlan, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["job_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["job", "position"], name="preference_unique_position"),
            models.UniqueConstraint(
                fields=["job", "instance_type", "training_plan"], name="preference_unique_type_plan"
            ),
            models.UniqueConstraint(
                fields=["job", "instance_type"],
                condition=Q(training_plan__isnull=True),
                name="preference_unique_on_demand_type",
            ),
            models.CheckConstraint(
                condition=Q(position__lt=MAX_PREFERENCES), name="preference_position_range"
            ),
            models.CheckConstraint(condition=Q(instance_count__gte=1), name="preference_count_positive"),
        ]

    def __str__(self) -> str:
        plan = f" on {self.training_plan}" if self.training_plan_id else ""
        return f"{self.instance_type} x{self.instance_count}{plan}"


class ShareMeter(models.Model):
    """Where a share's GPU-hour consumption was last brought up to date, and at what rate it runs since.

    Each pass adds `held` (per type: on-demand instances held, and those above the share's limit, once the
    pass's decisions are applied) times the time since `metered_until` to `ShareConsumption`, then sets
    both anew: consumption is kept as jobs hold instances, never worked out from the job history.
    `warned_period` / `exhausted_period`: the start of the budget period for which BUDGET_WARNING /
    BUDGET_EXHAUSTED were recorded (once a period each).
    """

    quota_share = models.OneToOneField(
        QuotaShare, on_delete=models.CASCADE, primary_key=True, related_name="meter"
    )
    metered_until = models.DateTimeField()
    # type name -> [instances held, instances above the limit]
    held = models.JSONField(default=dict, blank=True)
    warned_period = models.DateTimeField(null=True, blank=True)
    exhausted_period = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"meter of share {self.quota_share_id} until {self.metered_until:%Y-%m-%d %H:%M:%S}"


class ShareConsumption(models.Model):
    """GPU-hours a share's jobs held on on-demand capacity of one type on one UTC day (training plans not
    counted), and the part of it above the share's limit."""

    quota_share = models.ForeignKey(QuotaShare, on_delete=models.CASCADE, related_name="consumption")
    instance_type = models.ForeignKey(InstanceType, on_delete=models.PROTECT, related_name="+")
    day = models.DateField()
    gpu_hours = models.DecimalField(max_digits=16, decimal_places=6, default=Decimal(0))
    borrowed_gpu_hours = models.DecimalField(max_digits=16, decimal_places=6, default=Decimal(0))

    class Meta:
        ordering = ["quota_share_id", "day", "instance_type_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["quota_share", "day", "instance_type"], name="share_consumption_unique_day_type"
            ),
        ]

    def __str__(self) -> str:
        return f"share {self.quota_share_id} {self.day}: {self.gpu_hours} GPU-hours"


class JobAttempt(models.Model):
    """One placement of a job, from SCHEDULED until it stopped (finished, preempted, drained or cancelled)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempts")
    instance_type = models.ForeignKey(InstanceType, on_delete=models.PROTECT, related_name="+")
    instance_count = models.PositiveIntegerField()
    training_plan = models.ForeignKey(
        TrainingPlan, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    borrowed_instances = models.PositiveIntegerField(default=0)
    scheduled_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    status_reason = models.TextField(blank=True, default="")
    attempt = models.PositiveIntegerField(default=1)
    exit_code = models.IntegerField(null=True, blank=True)
    output_tail = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["job_id", "scheduled_at", "id"]

    def __str__(self) -> str:
        return f"attempt of job {self.job_id} on {self.instance_type_id} x{self.instance_count}"

    @property
    def attempt_tasks(self) -> list[JobTask]:
        """The attempt's tasks by rank (none for a job taken whole): from the job's `tasks`, which readers
        prefetch (`scheduling.selectors.jobs.jobs_in_full`)."""
        return [task for task in self.job.tasks.all() if task.attempt == self.attempt]


class TaskState(models.TextChoices):
    WAITING = "WAITING"  # claimed, its slots held, nothing started: the gang gathers, or the roster is out
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    LOST = "LOST"  # its executor went silent for lease_seconds
    RELEASED = "RELEASED"  # the claim was given up before anything ran: its instances may be claimed again


LIVE_TASK_STATES = (TaskState.WAITING, TaskState.RUNNING)


class JobTask(models.Model):
    """One executor's claim of some of an attempt's instances (multi-host.md): its rank is its index, 0 first.

    A job taken whole through the task protocol has one task; a job taken by an executor that does not ask for
    tasks has none (`Job.taken_by` holds it). Each task holds its own lease; `Job.lease_expires_at` is the
    earliest of its live tasks' leases.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="tasks")
    attempt = models.PositiveIntegerField()
    rank = models.PositiveIntegerField()
    instances = models.PositiveIntegerField()
    executor = models.ForeignKey(
        Executor, on_delete=models.SET_NULL, null=True, blank=True, related_name="tasks", db_index=False
    )
    executor_name = models.CharField(max_length=128)
    address = models.CharField(max_length=255, blank=True, default="")
    port = models.PositiveIntegerField(null=True, blank=True)  # rank 0's: the job's main port
    state = models.CharField(max_length=16, choices=TaskState.choices, default=TaskState.WAITING)
    claimed_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    output_tail = models.TextField(blank=True, default="")
    reason = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["job_id", "attempt", "rank", "id"]
        indexes = [models.Index(fields=["executor", "state"], name="task_executor_state_idx")]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "attempt", "rank"],
                condition=~Q(state="RELEASED"),
                name="task_unique_live_rank",
            ),
            models.CheckConstraint(
                condition=Q(state__in=[s.value for s in TaskState]), name="task_state_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} rank {self.rank} on {self.executor_name}"

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_TASK_STATES


class EventKind(models.TextChoices):
    """The code is what the API and the logs carry; the label is how a person reads it."""

    SUBMITTED = "SUBMITTED", "submitted"
    ADMITTED = "ADMITTED", "placed"
    BORROWED = "BORROWED", "borrowed"
    PREEMPTED_RECLAIM = "PREEMPTED_RECLAIM", "preempted by a reclaim"
    PREEMPTED_IN_SHARE = "PREEMPTED_IN_SHARE", "preempted within its share"
    PREEMPTED_LIMIT_REDUCED = "PREEMPTED_LIMIT_REDUCED", "preempted by a lowered limit"
    PLAN_EXPIRING = "PLAN_EXPIRING", "training plan expiring"
    FALLBACK = "FALLBACK", "fell back to a later preference"
    STARTED = "STARTED", "started"
    STOPPING = "STOPPING", "asked to stop"
    STOPPED = "STOPPED", "stopped"
    EXECUTOR_LOST = "EXECUTOR_LOST", "lost by its executor"
    SUCCEEDED = "SUCCEEDED", "succeeded"
    FAILED = "FAILED", "failed"
    CANCELLED = "CANCELLED", "cancelled"
    CONFIG_CHANGED = "CONFIG_CHANGED", "configuration changed"
    ATTEMPT_TIMEOUT = "ATTEMPT_TIMEOUT", "attempt timed out"
    START_TIMEOUT = "START_TIMEOUT", "not started in time"
    TASK_LOST = "TASK_LOST", "task lost by its executor"
    BUDGET_WARNING = "BUDGET_WARNING", "budget 80% spent"
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED", "budget spent"
    RELOCATING = "RELOCATING", "moving to an earlier preference"


PREEMPTION_KINDS = (
    EventKind.PREEMPTED_RECLAIM,
    EventKind.PREEMPTED_IN_SHARE,
    EventKind.PREEMPTED_LIMIT_REDUCED,
)


class Event(models.Model):
    """What happened, for people and for the audit log. Never updated once written."""

    kind = models.CharField(max_length=32, choices=EventKind.choices)
    # The team whose job the event is about, for good (the job's team); None for configuration and queue
    # events. Who may read an event is decided by it (`scheduling.selectors.events`), never through links
    # that a deleted share or queue sets to NULL.
    team = models.ForeignKey(Team, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    # Only the indexes the event log reads by are kept: a pass writes thousands of events at once.
    job_queue = models.ForeignKey(
        JobQueue, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )
    job = models.ForeignKey(Job, on_delete=models.SET_NULL, null=True, blank=True, related_name="events")
    quota_share = models.ForeignKey(
        QuotaShare, on_delete=models.SET_NULL, null=True, blank=True, related_name="events", db_index=False
    )
    other_job = models.ForeignKey(
        Job, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )
    other_share = models.ForeignKey(
        QuotaShare, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )
    instance_type = models.ForeignKey(
        InstanceType, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )
    instances = models.PositiveIntegerField(null=True, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    message = models.TextField()
    # For CONFIG_CHANGED: {"object": ..., "id": ..., "before": {...}, "after": {...}}.
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["kind", "created_at"], name="event_kind_created_idx"),
            # The API's newest-first pages filtered by kind seek here, however rare or old the kind's events.
            models.Index(fields=["kind", "id"], name="event_kind_id_idx"),
            models.Index(fields=["quota_share", "created_at"], name="event_share_created_idx"),
            models.Index(fields=["job_queue", "created_at"], name="event_queue_created_idx"),
            # Deleting jobs makes PostgreSQL check, per job, that no event still names it as `other_job`:
            # without an index that is a scan of the whole event log per deleted job. Only preemption events
            # name another job, so the partial index stays small and most event inserts never touch it.
            models.Index(
                fields=["other_job"],
                name="event_other_job_idx",
                condition=models.Q(other_job__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


class Heartbeat(models.Model):
    """When a part of the scheduler last showed it is alive: the beat when it sends the heartbeat task, a worker
    when it runs it. A settled queue rightly runs no pass for hours, so a pass's age says nothing of this."""

    class Component(models.TextChoices):
        BEAT = "beat"
        WORKER = "worker"

    component = models.CharField(max_length=16, choices=Component.choices, primary_key=True)
    seen_at = models.DateTimeField()
    # The worker's name (celery's hostname) that ran the last heartbeat.
    detail = models.CharField(max_length=255, blank=True, default="")

    def __str__(self) -> str:
        return f"{self.component} seen at {self.seen_at:%Y-%m-%d %H:%M:%S}"


class SchedulingPass(models.Model):
    """The record of one scheduling pass over one queue: what the pages and /metrics show."""

    job_queue = models.ForeignKey(JobQueue, on_delete=models.CASCADE, related_name="passes")
    started_at = models.DateTimeField()
    duration_ms = models.FloatField()
    engine_ms = models.FloatField(default=0)
    jobs_considered = models.PositiveIntegerField(default=0)
    placed_within_quota = models.PositiveIntegerField(default=0)
    placed_borrowing = models.PositiveIntegerField(default=0)
    placed_on_plan = models.PositiveIntegerField(default=0)
    fallbacks = models.PositiveIntegerField(default=0)
    preempted_reclaim = models.PositiveIntegerField(default=0)
    preempted_in_share = models.PositiveIntegerField(default=0)
    preempted_limit_reduced = models.PositiveIntegerField(default=0)
    plan_drains = models.PositiveIntegerField(default=0)
    timeouts = models.PositiveIntegerField(default=0)
    relocations = models.PositiveIntegerField(default=0)
    trigger = models.CharField(max_length=32, default="beat")

    class Meta:
        verbose_name_plural = "scheduling passes"
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["job_queue", "started_at"], name="pass_queue_started_idx")]

    def __str__(self) -> str:
        return f"pass on {self.job_queue_id} at {self.started_at:%H:%M:%S}"


class ShareUsageSample(models.Model):
    """Per share and type after a pass: owned, borrowed and lent instances, for the utilization charts."""

    quota_share = models.ForeignKey(QuotaShare, on_delete=models.CASCADE, related_name="usage_samples")
    instance_type = models.ForeignKey(InstanceType, on_delete=models.CASCADE, related_name="+")
    taken_at = models.DateTimeField(db_index=True)
    limit = models.PositiveIntegerField()
    usage = models.PositiveIntegerField()
    borrowed = models.PositiveIntegerField()
    lent = models.PositiveIntegerField()
    pending = models.PositiveIntegerField()

    class Meta:
        ordering = ["taken_at"]
        indexes = [models.Index(fields=["quota_share", "taken_at"], name="sample_share_taken_idx")]

    def __str__(self) -> str:
        return f"share {self.quota_share_id} type {self.instance_type_id} at {self.taken_at:%H:%M:%S}"


class PassHistogramBucket(models.Model):
    """Cumulative count of a queue's passes that took at most `le` seconds (`le` NULL: all, with their sum)."""

    job_queue = models.ForeignKey(JobQueue, on_delete=models.CASCADE, related_name="+")
    le = models.FloatField(null=True, blank=True)
    count = models.BigIntegerField(default=0)
    sum_seconds = models.FloatField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job_queue", "le"], name="pass_bucket_unique_le"),
            models.UniqueConstraint(
                fields=["job_queue"], condition=Q(le__isnull=True), name="pass_bucket_unique_total"
            ),
        ]

    def __str__(self) -> str:
        return f"queue {self.job_queue_id} passes <= {self.le if self.le is not None else '+Inf'} s"
