"""Prometheus metrics, read from the database at scrape time so every worker on every machine is counted.

Names follow Kueue's style (`kueue_cluster_queue_resource_usage` -> `quotaportal_share_usage`). The pass
duration histogram is kept cumulatively in the database by each pass
(`scheduling.passes.histogram.pass_histogram_observe`), since the passes run in Celery workers that the web
process cannot see; this module only reads it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from django.db.models import Count, DurationField, ExpressionWrapper, F, OuterRef, Q, Subquery, Sum
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from scheduling.models import (
    PLACED_STATUSES,
    PREEMPTION_KINDS,
    Event,
    EventKind,
    Job,
    JobAttempt,
    JobQueue,
    JobTask,
    PassHistogramBucket,
    QuotaShare,
    ShareCapacityLimit,
)
from scheduling.selectors.budgets import share_budgets
from scheduling.selectors.usage import queue_usage

CLAIM_TO_RUNNING_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800)


class QuotaportalCollector(Collector):
    """Per share and type usage, limit, borrowed, lent; pending; preemptions by kind; pass durations."""

    def collect(self) -> Iterator:
        share_labels = ["queue", "share", "instance_type"]
        usage = GaugeMetricFamily(
            "quotaportal_share_usage",
            "Instances in use by a share on on-demand capacity",
            labels=share_labels,
        )
        limit = GaugeMetricFamily(
            "quotaportal_share_limit", "A share's max_capacity for an instance type", labels=share_labels
        )
        borrowed = GaugeMetricFamily(
            "quotaportal_share_borrowed", "Instances a share uses above its limit", labels=share_labels
        )
        lent = GaugeMetricFamily(
            "quotaportal_share_lent", "A share's idle instances in use by borrowers", labels=share_labels
        )
        pending = GaugeMetricFamily(
            "quotaportal_share_pending_jobs", "RUNNABLE jobs of a share", labels=["queue", "share"]
        )
        capacity = GaugeMetricFamily(
            "quotaportal_queue_capacity",
            "On-demand instances of the queue's environment",
            labels=["queue", "instance_type"],
        )
        plan_use = GaugeMetricFamily(
            "quotaportal_training_plan_in_use",
            "Instances in use on a training plan",
            labels=["queue", "training_plan", "instance_type"],
        )
        queues = list(JobQueue.objects.select_related("service_environment").order_by("name"))
        for queue in queues:
            summary = queue_usage(job_queue=queue)
            for share in summary.shares:
                pending.add_metric([queue.name, share.name], share.pending)
                for row in share.rows:
                    labels = [queue.name, share.name, row.instance_type]
                    usage.add_metric(labels, row.usage)
                    limit.add_metric(labels, row.limit)
                    borrowed.add_metric(labels, row.borrowed)
                    lent.add_metric(labels, row.lent)
            for type_usage in summary.types:
                capacity.add_metric([queue.name, type_usage.instance_type], type_usage.capacity)
            for plan in summary.plans:
                plan_use.add_metric(
                    [queue.name, plan["name"], plan["instance_type"]], plan["in_use_instance_count"]
                )
        yield from (usage, limit, borrowed, lent, pending, capacity, plan_use)
        yield self._lending_limits()
        yield from self._budgets()
        yield self._protected_jobs(queues)
        yield self._preemptions()
        yield from self._pass_durations()
        yield self._event_counter(
            "quotaportal_start_timeouts",
            "Placed jobs not started by all their executors in time (START_TIMEOUT)",
            EventKind.START_TIMEOUT,
        )
        yield self._event_counter(
            "quotaportal_tasks_lost",
            "Tasks of jobs on several hosts lost by their executors",
            EventKind.TASK_LOST,
        )
        yield self._event_counter(
            "quotaportal_relocations",
            "Running jobs moved to an earlier entry of their preference list (RELOCATING)",
            EventKind.RELOCATING,
        )
        yield self._claim_to_running()

    def _lending_limits(self) -> GaugeMetricFamily:
        gauge = GaugeMetricFamily(
            "quotaportal_share_lending_limit",
            "Most of a share's limit it lends when idle (only for shares that set one)",
            labels=["queue", "share", "instance_type"],
        )
        rows = (
            ShareCapacityLimit.objects.filter(lending_limit__isnull=False)
            .values_list(
                "quota_share__job_queue__name", "quota_share__name", "instance_type__name", "lending_limit"
            )
            .order_by("quota_share__job_queue__name", "quota_share__name", "instance_type__name")
        )
        for queue, share, instance_type, lending_limit in rows:
            gauge.add_metric([queue, share, instance_type], lending_limit)
        return gauge

    def _budgets(self) -> Iterator[GaugeMetricFamily]:
        """Each budgeted share's budget and what it has spent of it in the current period (4 queries)."""
        labels = ["queue", "share", "period", "scope"]
        budget = GaugeMetricFamily(
            "quotaportal_share_budget_gpu_hours", "A share's GPU-hour budget per period", labels=labels
        )
        spent = GaugeMetricFamily(
            "quotaportal_share_budget_spent_gpu_hours",
            "GPU-hours a share has spent of its budget in the current period",
            labels=labels,
        )
        shares = list(
            QuotaShare.objects.filter(budget_gpu_hours__isnull=False)
            .select_related("job_queue")
            .order_by("job_queue__name", "name")
        )
        readings = share_budgets(shares=shares, now=timezone.now())
        for share in shares:
            reading = readings[share.pk]
            values = [share.job_queue.name, share.name, share.budget_period, share.budget_scope]
            budget.add_metric(values, float(reading.gpu_hours))
            spent.add_metric(values, float(reading.used_gpu_hours))
        yield from (budget, spent)

    def _protected_jobs(self, queues: list[JobQueue]) -> GaugeMetricFamily:
        gauge = GaugeMetricFamily(
            "quotaportal_share_protected_jobs",
            "Placed on-demand jobs still within the queue's preemption_min_runtime_seconds",
            labels=["queue", "share"],
        )
        now = timezone.now()
        for queue in (queue for queue in queues if queue.preemption_min_runtime_seconds > 0):
            since = now - timedelta(seconds=queue.preemption_min_runtime_seconds)
            counts = (
                Job.objects.filter(
                    job_queue=queue,
                    status__in=PLACED_STATUSES,
                    selected_training_plan__isnull=True,
                    scheduled_at__gt=since,
                )
                .values_list("quota_share_name")
                .annotate(n=Count("id"))
                .order_by("quota_share_name")
            )
            for share, n in counts:
                gauge.add_metric([queue.name, share], n)
        return gauge

    def _preemptions(self) -> CounterMetricFamily:
        counter = CounterMetricFamily(
            "quotaportal_preemptions", "Jobs preempted, by kind", labels=["queue", "kind"]
        )
        names = dict(JobQueue.objects.values_list("id", "name"))
        counts = (
            Event.objects.filter(kind__in=PREEMPTION_KINDS)
            .values_list("job_queue_id", "kind")
            .annotate(n=Count("id"))
            .order_by()
        )
        seen = set()
        for queue_id, kind, n in counts:
            if queue_id in names:
                counter.add_metric([names[queue_id], kind], n)
                seen.add((queue_id, kind))
        for queue_id, name in names.items():
            for kind in PREEMPTION_KINDS:
                if (queue_id, kind) not in seen:
                    counter.add_metric([name, EventKind(kind).value], 0)
        return counter

    def _event_counter(self, name: str, documentation: str, kind: str) -> CounterMetricFamily:
        """How many events of the kind each queue has had (0 for a queue without any)."""
        counter = CounterMetricFamily(name, documentation, labels=["queue"])
        counts = dict(
            Event.objects.filter(kind=kind, job_queue__isnull=False)
            .values_list("job_queue_id")
            .annotate(n=Count("id"))
            .order_by()
        )
        for queue_id, queue_name in JobQueue.objects.values_list("id", "name").order_by("name"):
            counter.add_metric([queue_name], counts.get(queue_id, 0))
        return counter

    def _claim_to_running(self) -> HistogramMetricFamily:
        """From an attempt's first claim to RUNNING (every task running), for jobs run as tasks. One query."""
        histogram = HistogramMetricFamily(
            "quotaportal_claim_to_running_seconds",
            "From the first claim of an attempt run as tasks to all its tasks running",
            labels=[],
        )
        first_claim = (
            JobTask.objects.filter(job_id=OuterRef("job_id"), attempt=OuterRef("attempt"))
            .order_by("claimed_at")
            .values("claimed_at")[:1]
        )
        waits = JobAttempt.objects.filter(started_at__isnull=False).annotate(
            wait=ExpressionWrapper(F("started_at") - Subquery(first_claim), output_field=DurationField())
        )
        buckets = {
            f"le_{i}": Count("id", filter=Q(wait__lte=timedelta(seconds=le)))
            for i, le in enumerate(CLAIM_TO_RUNNING_BUCKETS)
        }
        totals = waits.filter(wait__isnull=False).aggregate(count=Count("id"), total=Sum("wait"), **buckets)
        histogram.add_metric(
            [],
            [(repr(float(le)), totals[f"le_{i}"]) for i, le in enumerate(CLAIM_TO_RUNNING_BUCKETS)]
            + [("+Inf", totals["count"])],
            sum_value=totals["total"].total_seconds() if totals["total"] is not None else 0.0,
        )
        return histogram

    def _pass_durations(self) -> Iterator[HistogramMetricFamily]:
        histogram = HistogramMetricFamily(
            "quotaportal_pass_duration_seconds",
            "Duration of scheduling passes (lock, load, decide, write)",
            labels=["queue"],
        )
        rows: dict[str, list[PassHistogramBucket]] = {}
        for bucket in PassHistogramBucket.objects.select_related("job_queue").order_by("job_queue_id", "le"):
            rows.setdefault(bucket.job_queue.name, []).append(bucket)
        for name, buckets in sorted(rows.items()):
            finite = [b for b in buckets if b.le is not None]
            total = next(b for b in buckets if b.le is None)
            histogram.add_metric(
                [name],
                [(repr(b.le), b.count) for b in finite] + [("+Inf", total.count)],
                sum_value=total.sum_seconds,
            )
        yield histogram
