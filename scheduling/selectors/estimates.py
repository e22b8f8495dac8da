"""What the estimator needs from rows (behaviour.md#why-pending-and-when-it-will-start): how long this queue's jobs run,
and the what-if of one job.

Runtimes are learned from the queue's recent SUCCEEDED jobs as the time they held capacity (scheduled to
stopped, the same clock a placed job's elapsed time is read on), by share and type, then by type for the
whole queue, then over the whole queue; the pure estimator (`simulator.estimate`) gets them as quantile
tables. Why quantiles and not a mean: GPU job runtimes are heavy-tailed (a few week-long runs among many
short ones), so a mean is pulled far past what most jobs do; quantiles are not, and the estimator reads
the quartiles (`simulator.estimate.TYPICAL`); a table also lets a running job be expected to end at the
quantile of the runs that
lasted as long as it already has.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings

from engine import types as et
from scheduling.models import UNFINISHED_STATUSES, Job, JobQueue, JobStatus
from scheduling.passes.budgets import budgets_apply, budgets_read
from scheduling.passes.snapshot import snapshot_load
from simulator.estimate import Estimate, Expectations, Runtime, what_if

LEARN_FROM_JOBS = 2000  # the queue's most recent SUCCEEDED jobs
LEAST_SAMPLE = 5  # fewer runs than this of a share and type say too little: the queue's figure is used


def runtime_expectations(*, job_queue: JobQueue) -> Expectations:
    """Declared durations of the queue's unfinished jobs, and runtimes learned from its finished ones (2 queries)."""
    declared = dict(
        Job.objects.filter(
            job_queue_id=job_queue.pk, status__in=UNFINISHED_STATUSES, duration_seconds__isnull=False
        ).values_list("id", "duration_seconds")
    )
    finished = (
        Job.objects.filter(
            job_queue_id=job_queue.pk,
            status=JobStatus.SUCCEEDED,
            scheduled_at__isnull=False,
            stopped_at__isnull=False,
            selected_instance_type__isnull=False,
        )
        .order_by("-stopped_at")
        .values_list("quota_share_id", "selected_instance_type__name", "scheduled_at", "stopped_at")[
            :LEARN_FROM_JOBS
        ]
    )
    by_share: dict[tuple[int, str], list[float]] = {}
    by_type: dict[str, list[float]] = {}
    every: list[float] = []
    for share_id, type_name, scheduled_at, stopped_at in finished:
        seconds = max(0.0, (stopped_at - scheduled_at).total_seconds())
        by_share.setdefault((share_id, type_name), []).append(seconds)
        by_type.setdefault(type_name, []).append(seconds)
        every.append(seconds)
    learned = {key: Runtime.of(runs) for key, runs in by_share.items() if len(runs) >= LEAST_SAMPLE}
    queue = {key: Runtime.of(runs) for key, runs in by_type.items() if len(runs) >= LEAST_SAMPLE}
    fields = {"default": Runtime.of(every)} if len(every) >= LEAST_SAMPLE else {}
    return Expectations(declared=declared, learned=learned, queue=queue, **fields)


def start_if_submitted_now(*, submission, now: datetime) -> Estimate:
    """When a validated `JobSubmission` would likely start if submitted now: a what-if of one job added to the
    queue's snapshot, cut off after ESTIMATE_WHATIF_SECONDS (13 queries: the snapshot's 8, the budgets' 3,
    the expectations' 2)."""
    job_queue = submission.job_queue
    entries = [
        et.Entry(p.instance_type.name, p.instance_count, p.training_plan.name if p.training_plan else None)
        for p in submission.instance_preferences
    ]
    quota_share_id = submission.quota_share.pk
    priority = submission.scheduling_priority
    duration_seconds = submission.duration_seconds
    snapshot, _index = snapshot_load(job_queue=job_queue, now=now)
    snapshot = budgets_apply(snapshot, budgets_read(job_queue_id=job_queue.pk, now=now))
    expectations = runtime_expectations(job_queue=job_queue)
    newcomer = et.Job(
        id=0, share_id=quota_share_id, priority=priority, submitted_at=now, entries=tuple(entries)
    )
    if duration_seconds is not None:
        newest = max((job.id for job in snapshot.jobs), default=0) + 1
        expectations = Expectations(
            declared={**expectations.declared, newest: duration_seconds},
            learned=expectations.learned,
            queue=expectations.queue,
            default=expectations.default,
        )
    return what_if(
        snapshot,
        expectations,
        newcomer,
        pass_interval=settings.PASS_INTERVAL_SECONDS,
        time_limit=settings.ESTIMATE_WHATIF_SECONDS,
    )
