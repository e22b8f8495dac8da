"""Many queues under the real beat and Celery workers: which get a pass, and what an idle one costs.

Writes `--queues` small queues (a few shares, tens of jobs each, under a `benchq-` prefix) into the configured
database (a scratch one), starts `--workers` Celery workers (one process each, `--pool solo`) and the beat on
the configured broker, and measures, from the SchedulingPass rows the workers write:
- cold: every queue has no record yet, so one beat sends a pass for each: passes per second until all ran;
- idle: nothing changes for `--idle` seconds: passes run, and the workers' CPU (utime + stime of their
  processes), per idle queue per hour;
- dirty: `--dirty` queues get a submission each (QUOTAPORTAL_AUTOPASS=0 in the benchmark's own process, so
  only the beat can notice): how long until each has had its pass, against the beat interval;
- the beat's own cost: `run_all_passes` timed in this process over the settled queues (median of 20).
Then stops the processes it started and deletes its rows.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.utils import timezone

from scheduling import rules
from scheduling.models import (
    EnvironmentCapacity,
    Event,
    InstanceType,
    Job,
    JobPreference,
    JobQueue,
    Membership,
    QuotaShare,
    SchedulingPass,
    ServiceEnvironment,
    ShareCapacityLimit,
    Team,
)
from scheduling.services import jobs as job_services
from tools.guard import require_scratch_database
from tools.processes import Processes, cpu_seconds

PREFIX = "benchq-"
TYPES = ("ml.p5.48xlarge", "ml.g5.12xlarge")


class Command(BaseCommand):
    help = "1,000 queues, the beat and 3 workers: passes per second, the beat's cost, an idle queue's CPU."

    def add_arguments(self, parser):
        parser.add_argument("--queues", type=int, default=1000)
        parser.add_argument("--shares", type=int, default=3, help="shares per queue")
        parser.add_argument("--jobs", type=int, default=30, help="jobs per queue")
        parser.add_argument("--workers", type=int, default=3)
        parser.add_argument("--idle", type=float, default=60.0, help="seconds of the idle window")
        parser.add_argument("--dirty", type=int, default=100, help="queues that get a submission")

    def handle(self, *args, queues, shares, jobs, workers, idle, dirty, **options):
        require_scratch_database()
        if connection.vendor != "postgresql" or not settings.CELERY_BROKER_URL.startswith("redis://"):
            raise CommandError(
                "needs PostgreSQL (DATABASE_URL) and a Redis broker (CELERY_BROKER_URL=redis://...)"
            )
        if not settings.PASS_SETTLED_SECONDS:
            raise CommandError("PASS_SETTLED_SECONDS is 0: the beat would pass every queue on every beat")
        interval = settings.PASS_INTERVAL_SECONDS
        settings.QUOTAPORTAL_AUTOPASS = False  # this process's submissions: only the beat may notice them
        from quotaportal.celery import app

        app.control.purge()
        cleanup()
        log_dir = Path(tempfile.mkdtemp(prefix="bench-queues-"))
        started = time.perf_counter()
        queue_ids, user = build(queues=queues, shares=shares, jobs=jobs)
        self.stdout.write(
            f"{queues} queues x {shares} shares x {jobs} jobs written in {time.perf_counter() - started:.1f} s; "
            f"{workers} workers, beat every {interval} s; logs in {log_dir}"
        )
        env = {**os.environ, "QUOTAPORTAL_AUTOPASS": "0"}
        with Processes(log_dir) as processes:
            # Solo workers: one that is busy with a task does not answer `inspect`, which counts as not idle.
            processes.start_workers(
                env, count=workers, prefix="benchq", options=("--pool", "solo", "--without-heartbeat")
            )
            processes.start_beat(env)
            since = timezone.now()
            begun = time.perf_counter()
            self.wait_for_passes(queue_ids, since, len(queue_ids), timeout=600, processes=processes)
            cold = time.perf_counter() - begun
            cold_passes = passes_since(queue_ids, since)
            self.stdout.write(
                f"  cold: {cold_passes} passes in {cold:.1f} s = {cold_passes / cold:.0f} passes/s"
            )
            time.sleep(2 * interval)  # the confirming passes after preemptions settle
            # Each pass that placed someone asked for its queue's start estimates ESTIMATE_INTERVAL_SECONDS
            # later: those are the cold start's work, not an idle queue's, so the idle window opens only once
            # the workers hold no task, due now or later.
            settling = time.perf_counter()
            cpu_before = cpu_seconds(processes.pids("worker"))
            self.wait_until_workers_idle(
                app, workers=len(processes.pids("worker")), timeout=settings.ESTIMATE_INTERVAL_SECONDS + 300
            )
            self.stdout.write(
                f"  settling: the cold start's estimates and confirming passes took "
                f"{time.perf_counter() - settling:.1f} s more, workers' CPU "
                f"{cpu_seconds(processes.pids('worker')) - cpu_before:.2f} s"
            )

            since = timezone.now()
            cpu_before = cpu_seconds(processes.pids("worker"))
            time.sleep(idle)
            cpu_idle = cpu_seconds(processes.pids("worker")) - cpu_before
            idle_passes = passes_since(queue_ids, since)
            per_queue_hour = cpu_idle / len(queue_ids) * 3600 / idle
            self.stdout.write(
                f"  idle {idle:.0f} s: {idle_passes} passes over {len(queue_ids)} queues; workers' CPU "
                f"{cpu_idle:.2f} s = {per_queue_hour * 1000:.1f} ms per idle queue per hour"
            )

            chosen = queue_ids[:: max(1, len(queue_ids) // dirty)][:dirty]
            since = timezone.now()
            for queue_id in chosen:
                submit(queue_id, user)
            begun = time.perf_counter()
            self.wait_for_passes(chosen, since, len(chosen), timeout=120, processes=processes)
            drained = time.perf_counter() - begun
            others = passes_since([q for q in queue_ids if q not in set(chosen)], since)
            # From the first of their passes to the end of the last: the drain itself, without the wait for
            # the beat's own clock (0 to one interval) that the time from the submissions includes.
            runs = list(
                SchedulingPass.objects.filter(job_queue_id__in=chosen, started_at__gte=since).values_list(
                    "started_at", "duration_ms"
                )
            )
            first = min(started for started, _ in runs)
            last_end = max(started + timedelta(milliseconds=ms) for started, ms in runs)
            self.stdout.write(
                f"  dirty: {len(chosen)} queues with a submission all passed {drained:.1f} s later "
                f"(beat interval {interval} s): the first of their passes began "
                f"{(first - since).total_seconds():.1f} s after the submissions began, the last ended "
                f"{(last_end - first).total_seconds():.1f} s after it; {others} passes on the other queues meanwhile"
            )
        beat_costs = []
        from unittest import mock

        from scheduling import tasks

        with mock.patch.object(tasks.run_queue_pass, "delay"):
            for _ in range(20):
                begun = time.perf_counter()
                tasks.run_all_passes()
                beat_costs.append(time.perf_counter() - begun)
        self.stdout.write(
            f"  the beat's own cost per interval (run_all_passes over {len(queue_ids)} settled queues): "
            f"{statistics.median(beat_costs) * 1000:.1f} ms (median of 20)"
        )
        cleanup()

    def wait_until_workers_idle(self, app, *, workers: int, timeout: float) -> None:
        """Until every worker answers that it has no task running, reserved or scheduled for later (countdowns),
        twice in a row. A solo worker busy with a task does not answer, which counts as not idle."""
        deadline = time.monotonic() + timeout
        quiet = 0
        while time.monotonic() < deadline:
            inspect = app.control.inspect(timeout=2.0)
            answers = [inspect.active(), inspect.reserved(), inspect.scheduled()]
            answered = all(len(answer or {}) >= workers for answer in answers)
            held = sum(len(tasks) for answer in answers for tasks in (answer or {}).values())
            quiet = quiet + 1 if answered and held == 0 else 0
            if quiet >= 2:
                return
            time.sleep(1.0)
        raise CommandError(f"the workers still held tasks after {timeout:.0f} s")

    def wait_for_passes(self, queue_ids, since, count, *, timeout, processes) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = (
                SchedulingPass.objects.filter(job_queue_id__in=queue_ids, started_at__gte=since)
                .values("job_queue_id")
                .distinct()
                .count()
            )
            if done >= count:
                return
            for name, process in processes.started.items():
                if process.poll() is not None:
                    raise CommandError(f"{name} exited with {process.returncode}")
            time.sleep(0.2)
        raise CommandError(f"only {done} of {count} queues had a pass within {timeout} s")


def passes_since(queue_ids, since) -> int:
    return SchedulingPass.objects.filter(job_queue_id__in=queue_ids, started_at__gte=since).count()


@transaction.atomic
def build(*, queues: int, shares: int, jobs: int):
    """The queues, each: its environment, `shares` shares (half its capacity each), `jobs` RUNNABLE jobs."""
    types = [InstanceType.objects.get_or_create(name=name, defaults={"gpu_count": 8})[0] for name in TYPES]
    team = Team.objects.create(name=f"{PREFIX}team", slug=f"{PREFIX}team")
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create(username=f"{PREFIX}user")
    Membership.objects.create(team=team, user=user, role=Membership.Role.MEMBER)
    environments = ServiceEnvironment.objects.bulk_create(
        [ServiceEnvironment(name=f"{PREFIX}env-{i}", executor="external") for i in range(queues)]
    )
    EnvironmentCapacity.objects.bulk_create(
        [
            EnvironmentCapacity(service_environment=e, instance_type=t, max_capacity=8)
            for e in environments
            for t in types
        ]
    )
    rows = JobQueue.objects.bulk_create(
        [JobQueue(name=f"{PREFIX}{i}", service_environment=e) for i, e in enumerate(environments)]
    )
    share_rows = QuotaShare.objects.bulk_create(
        [
            QuotaShare(name=f"s{j}", job_queue=q, team=team, strategy="LEND_AND_BORROW")
            for q in rows
            for j in range(shares)
        ]
    )
    ShareCapacityLimit.objects.bulk_create(
        [
            ShareCapacityLimit(quota_share=s, instance_type=t, max_capacity=4)
            for s in share_rows
            for t in types
        ]
    )
    now = timezone.now()
    job_rows = Job.objects.bulk_create(
        [
            Job(
                name=f"j{k}",
                job_queue_id=s.job_queue_id,
                job_queue_name=f"{PREFIX}q",
                quota_share=s,
                quota_share_name=s.name,
                team=team,
                created_at=now,
                runnable_since=now,
                status="RUNNABLE",
                max_pending_seconds=None if k % 3 else 86400,
            )
            for s in share_rows
            for k in range(jobs // shares)
        ],
        batch_size=2000,
    )
    JobPreference.objects.bulk_create(
        [
            JobPreference(job=j, position=0, instance_type=types[j.pk % 2], instance_count=1 + j.pk % 2)
            for j in job_rows
        ],
        batch_size=2000,
    )
    return [q.pk for q in rows], user


def submit(queue_id: int, user) -> None:
    queue = JobQueue.objects.get(pk=queue_id)
    share = QuotaShare.objects.filter(job_queue=queue).first()
    job_services.job_submit(
        user=user,
        submission=job_services.JobSubmission(
            name="late",
            job_queue=queue,
            quota_share=share,
            instance_preferences=[rules.PreferenceInput(InstanceType.objects.get(name=TYPES[0]), 1)],
            payload={"command": ["true"]},  # an external environment refuses a job without one
        ),
    )


def cleanup() -> None:
    with transaction.atomic():
        queues = JobQueue.objects.filter(name__startswith=PREFIX)
        Event.objects.filter(team__slug__startswith=PREFIX).delete()
        Job.objects.filter(job_queue__in=queues).delete()
        QuotaShare.objects.filter(job_queue__in=queues).delete()
        queues.delete()
        ServiceEnvironment.objects.filter(name__startswith=PREFIX).delete()
        Membership.objects.filter(team__slug__startswith=PREFIX).delete()
        Team.objects.filter(slug__startswith=PREFIX).delete()
        from django.contrib.auth import get_user_model

        get_user_model().objects.filter(username__startswith=PREFIX).delete()
