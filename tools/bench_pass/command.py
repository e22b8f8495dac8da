"""Benchmark one scheduling pass on the configured database. Prints figures; asserts nothing about time.

It writes a seeded synthetic queue (`engine.synthetic`) into the database under a `bench-` prefix (on
PostgreSQL then vacuums the tables a pass touches, so no earlier run's dead rows are read), measures, and
deletes it again. Figures, each the median of --repeat runs:
- engine: `schedule()` alone on the loaded snapshot;
- floor: the pass's own 9 reads executed raw (rows fetched, no model or dataclass built): reading the same
  rows once, which no pass can beat;
- pass: the whole pass (lock, load, engine, bulk writes, pass record), rolled back after each run so every run
  decides on the same state, taking turns with the engine and the floor; then "steady" passes after the first
  one has committed, when most reasons stand (each rolled back too);
- queries: the SQL statements of one pass, at the full size and at a tenth of it, and the engine's time at
  a tenth (same repeat, same run) to show how it grows;
- memory: the Python allocations of one more pass (tracemalloc: peak, and what is alive when the writes
  begin, by line), untimed, and the process's peak resident size.
"""

from __future__ import annotations

import gc
import logging
import resource
import statistics
import sys
import time
import tracemalloc
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import engine
from engine import synthetic
from scheduling.models import (
    EnvironmentCapacity,
    Event,
    InstanceType,
    Job,
    JobAttempt,
    JobPreference,
    JobQueue,
    JobTask,
    PendingClause,
    PendingState,
    QuotaShare,
    ServiceEnvironment,
    ShareCapacityLimit,
    Team,
    TrainingPlan,
)
from scheduling.passes import run as passes
from scheduling.passes import snapshot
from tools.cli import log_quieted
from tools.guard import require_scratch_database

PREFIX = "bench-"


class _Rollback(Exception):
    pass


class Command(BaseCommand):
    help = "Time one scheduling pass (engine, full pass, floor, query count) on a synthetic busy queue."

    def add_arguments(self, parser):
        # --jobs: the word for the RUNNABLE jobs (`--jobs 100000 --placed 20000`, ten times the default)
        parser.add_argument("--runnable", "--jobs", dest="runnable", type=int, default=10_000)
        parser.add_argument("--placed", type=int, default=2_000)
        parser.add_argument("--shares", type=int, default=20)
        parser.add_argument("--types", type=int, default=5)
        parser.add_argument("--repeat", type=int, default=7)
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--no-memory", dest="memory", action="store_false", help="skip the traced pass")
        parser.add_argument(
            "--engine-only",
            action="store_true",
            help="time schedule() on the synthetic snapshot itself at a tenth and the full size; no database",
        )

    def handle(self, *args, runnable, placed, shares, types, repeat, seed, memory, **options):
        if not 1 <= shares <= 20 or not 1 <= types <= 8 or runnable < 1 or placed < 0 or repeat < 1:
            raise CommandError(
                "need 1 <= --shares <= 20, 1 <= --types <= 8, --runnable >= 1, --placed >= 0, --repeat >= 1"
            )
        if options.get("engine_only"):
            self.engine_only(
                runnable=runnable, placed=placed, shares=shares, types=types, repeat=repeat, seed=seed
            )
            return
        require_scratch_database()
        self.stdout.write(
            f"database: {connection.vendor}; {runnable} RUNNABLE + {placed} placed jobs, "
            f"{shares} shares, {types} types, median of {repeat}"
        )
        bench_cleanup()
        # A line per decision would bury the figures.
        with log_quieted("quotaportal.scheduling", logging.WARNING):
            try:
                small = self.measure(
                    runnable=max(1, runnable // 10),
                    placed=placed // 10,
                    shares=shares,
                    types=types,
                    repeat=repeat,
                    seed=seed,
                )
                bench_cleanup()
                full = self.measure(
                    runnable=runnable,
                    placed=placed,
                    shares=shares,
                    types=types,
                    repeat=repeat,
                    seed=seed,
                    memory=memory,
                )
            finally:
                bench_cleanup()
        rows = [
            ("engine decision time", f"{full['engine_s']:.3f} s"),
            (
                f"engine at a tenth ({small['jobs']} jobs)",
                f"{small['engine_s']:.3f} s  (full size: {full['engine_s'] / small['engine_s']:.1f}x)",
            ),
            ("floor: read the same rows once", f"{full['floor_s']:.3f} s"),
            (
                "full pass (first, writes every reason)",
                f"{full['pass_s']:.3f} s  = {full['pass_s'] / full['floor_s']:.2f}x floor",
            ),
            (
                "full pass (steady, after one pass)",
                f"{full['steady_s']:.3f} s  = {full['steady_s'] / full['floor_s']:.2f}x floor",
            ),
            (
                "decisions",
                f"{full['admitted']} admitted, {full['preempted']} preempted, {full['pending']} pending",
            ),
            (
                "SQL queries per pass",
                f"{full['queries']} at {runnable + placed} jobs, {small['queries']} at {small['jobs']} jobs",
            ),
        ]
        if memory:
            rows += [
                ("pass memory: Python peak (tracemalloc)", f"{full['peak_mb']:.0f} MB"),
                ("process peak RSS (setup included)", f"{peak_rss_mb():.0f} MB"),
            ]
        width = max(len(label) for label, _ in rows)
        for label, value in rows:
            self.stdout.write(f"  {label.ljust(width)}  {value}")
        if memory:
            self.stdout.write("  alive when the writes begin, by line (tracemalloc):")
            for line in full["top"]:
                self.stdout.write(f"    {line}")

    def engine_only(self, *, runnable, placed, shares, types, repeat, seed) -> None:
        """`schedule()` on the snapshot `engine.synthetic` builds, no database: how the engine alone grows."""
        self.stdout.write(
            f"engine only: {runnable} RUNNABLE + {placed} placed jobs and a tenth of that, {shares} shares, "
            f"{types} types, median of {repeat}, the cyclic garbage collector held off as in a pass"
        )
        times = {}
        for size in (10, 1):
            snap = synthetic.build_synthetic_snapshot(
                runnable=max(1, runnable // size),
                placed=placed // size,
                shares=shares,
                types=types,
                seed=seed,
            )
            runs, cpu = [], []
            for _ in range(repeat):
                # With the cyclic collector held off, as a pass holds it (`scheduling.passes.run`): its full
                # collections walk every live object, so at 120,000 jobs they would add a seventh.
                gc.disable()
                try:
                    started, started_cpu = time.perf_counter(), time.process_time()
                    decisions = engine.schedule(snap)
                    runs.append(time.perf_counter() - started)
                    cpu.append(time.process_time() - started_cpu)
                finally:
                    gc.enable()
            times[size] = statistics.median(runs), statistics.median(cpu)
            self.stdout.write(
                f"  {len(snap.jobs)} jobs: engine {times[size][0]:.3f} s, CPU {times[size][1]:.3f} s "
                f"({len(decisions.admissions)} admitted, {len(decisions.preemptions)} preempted)"
            )
        # CPU time as well: on a shared machine the process's own CPU is steadier than the clock.
        self.stdout.write(
            f"  full / tenth: {times[1][0] / times[10][0]:.1f}x (CPU {times[1][1] / times[10][1]:.1f}x) "
            "for 10x the jobs"
        )

    def measure(self, *, runnable, placed, shares, types, repeat, seed, memory=False) -> dict:
        snap = synthetic.build_synthetic_snapshot(
            runnable=runnable, placed=placed, shares=shares, types=types, seed=seed
        )
        queue = materialize(snap)
        tables_vacuumed()
        loaded, _ = snapshot.snapshot_load(job_queue=queue, now=timezone.now())
        engine_times, floor_times, pass_times = [], [], []
        queries = 0
        # Engine, floor and pass take turns, so a slow spell of a shared machine weighs on all three alike.
        for _ in range(repeat):
            started = time.perf_counter()
            decisions = engine.schedule(loaded)
            engine_times.append(time.perf_counter() - started)
            floor_times.append(read_floor(queue))
            try:
                with transaction.atomic():
                    with CaptureQueriesContext(connection) as captured:
                        started = time.perf_counter()
                        passes.queue_pass_run(job_queue_id=queue.pk, trigger="bench")
                        pass_times.append(time.perf_counter() - started)
                    queries = len(captured)
                    raise _Rollback
            except _Rollback:
                pass
        passes.queue_pass_run(job_queue_id=queue.pk, trigger="bench")  # committed: the next ones are steady
        steady_times = []
        for _ in range(repeat):
            try:
                with transaction.atomic():
                    started = time.perf_counter()
                    passes.queue_pass_run(job_queue_id=queue.pk, trigger="bench")
                    steady_times.append(time.perf_counter() - started)
                    raise _Rollback
            except _Rollback:
                pass
        peak_mb, top = traced_pass(queue) if memory else (0.0, [])
        return {
            "peak_mb": peak_mb,
            "top": top,
            "jobs": runnable + placed,
            "engine_s": statistics.median(engine_times),
            "floor_s": statistics.median(floor_times),
            "pass_s": statistics.median(pass_times),
            "steady_s": statistics.median(steady_times),
            "queries": queries,
            "admitted": len(decisions.admissions),
            "preempted": len(decisions.preemptions),
            "pending": len(decisions.pending),
        }


def traced_pass(queue: JobQueue) -> tuple[float, list[str]]:
    """One more pass (rolled back) under tracemalloc: its peak in MB, and the largest allocations alive when the
    writes begin (snapshot, index and decisions all held then), by line."""
    taken = {}
    decisions_write = passes.decisions_write

    def write_traced(**kwargs):
        taken["snapshot"] = tracemalloc.take_snapshot()
        return decisions_write(**kwargs)

    passes.decisions_write = write_traced
    tracemalloc.start()
    try:
        with transaction.atomic():
            passes.queue_pass_run(job_queue_id=queue.pk, trigger="bench")
            raise _Rollback
    except _Rollback:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        passes.decisions_write = decisions_write
    stats = taken["snapshot"].statistics("lineno")
    top = [
        f"{stat.size / 2**20:7.1f} MB  {stat.count:>9,} blocks  "
        f"{stat.traceback[0].filename.rsplit('site-packages/', 1)[-1]}:{stat.traceback[0].lineno}"
        for stat in stats[:8]
    ]
    return peak / 2**20, top


def peak_rss_mb() -> float:
    """The process's peak resident size (ru_maxrss is in kB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def read_floor(queue: JobQueue) -> float:
    """Seconds to run the pass's reads raw and fetch every row."""
    querysets = snapshot.snapshot_querysets(job_queue=queue)
    started = time.perf_counter()
    with connection.cursor() as cursor:
        snapshot.datetimes_loaded_in_c(cursor)  # as the pass's own read loads them
        for queryset in querysets.values():
            sql, params = queryset.query.sql_with_params()
            cursor.execute(sql, params)
            cursor.fetchall()
    return time.perf_counter() - started


@transaction.atomic
def materialize(snap: engine.Snapshot) -> JobQueue:
    """Write a synthetic snapshot as database rows, its times shifted to now."""
    shift = timezone.now() - snap.now
    types = {
        name: InstanceType.objects.get_or_create(name=name, defaults={"gpu_count": 8})[0]
        for name in snap.capacity
    }
    environment = ServiceEnvironment.objects.create(name=f"{PREFIX}env", executor="external")
    EnvironmentCapacity.objects.bulk_create(
        [
            EnvironmentCapacity(service_environment=environment, instance_type=types[name], max_capacity=n)
            for name, n in snap.capacity.items()
        ]
    )
    queue = JobQueue.objects.create(name=f"{PREFIX}queue", service_environment=environment)
    team = Team.objects.create(name=f"{PREFIX}team", slug=f"{PREFIX}team")
    share_ids = {}
    share_names = {share.id: share.name for share in snap.shares}
    for share in snap.shares:
        row = QuotaShare.objects.create(
            name=share.name,
            job_queue=queue,
            team=team,
            strategy=share.strategy.value,
            borrow_limit=share.borrow_limit,
            in_share_preemption=share.in_share_preemption,
        )
        share_ids[share.id] = row.pk
        ShareCapacityLimit.objects.bulk_create(
            [
                ShareCapacityLimit(quota_share=row, instance_type=types[t], max_capacity=n)
                for t, n in share.limits.items()
            ]
        )
    plans = {}
    for plan in snap.plans:
        row = TrainingPlan.objects.create(
            name=f"{PREFIX}{plan.name}",
            job_queue=queue,
            instance_type=types[plan.instance_type],
            instance_count=plan.instance_count,
            start_time=plan.start_time + shift,
            end_time=plan.end_time + shift,
        )
        row.quota_shares.set([share_ids[s] for s in plan.share_ids])
        plans[plan.name] = row
    jobs = Job.objects.bulk_create(
        [
            Job(
                name=f"job-{job.id}",
                job_queue=queue,
                job_queue_name=queue.name,
                quota_share_id=share_ids[job.share_id],
                quota_share_name=share_names[job.share_id],
                team=team,
                scheduling_priority=job.priority,
                created_at=job.submitted_at + shift,
                runnable_since=(job.runnable_since or job.submitted_at) + shift,
                status=job.status.value,
                max_pending_seconds=job.max_pending_seconds,
                preemption_count=job.preemption_count,
                **placement_fields(job, types, plans, shift),
            )
            for job in snap.jobs
        ],
        batch_size=1000,
    )
    JobPreference.objects.bulk_create(
        [
            JobPreference(
                job_id=row.pk,
                position=i,
                instance_type=types[entry.instance_type],
                instance_count=entry.instance_count,
                training_plan=plans[entry.training_plan] if entry.training_plan else None,
            )
            for job, row in zip(snap.jobs, jobs, strict=True)
            for i, entry in enumerate(job.entries)
        ],
        batch_size=2000,
    )
    JobAttempt.objects.bulk_create(
        [
            JobAttempt(
                job_id=row.pk,
                instance_type_id=row.selected_instance_type_id,
                instance_count=row.selected_instance_count,
                training_plan_id=row.selected_training_plan_id,
                scheduled_at=row.scheduled_at,
            )
            for row in jobs
            if row.scheduled_at is not None
        ],
        batch_size=2000,
    )
    return queue


def placement_fields(job: engine.Job, types, plans, shift: timedelta) -> dict:
    if job.placement is None:
        return {}
    placement = job.placement
    return {
        "selected_instance_type": types[placement.instance_type],
        "selected_instance_count": placement.instance_count,
        "selected_training_plan": plans[placement.training_plan] if placement.training_plan else None,
        "scheduled_at": placement.scheduled_at + shift,
    }


# The tables a pass reads or writes: a bench deletes everything it wrote, and on PostgreSQL the dead rows of a
# few large queues stay in them until a vacuum. A scan then reads them too, the floor more than anything
# (0.104 s against 0.077 s at 12,000 jobs on a database that had held a few queues of 120,000), so the ratios
# to the floor would look better than they are.
PASS_TABLES = (
    Job,
    JobPreference,
    JobAttempt,
    Event,
    JobTask,
    PendingState,
    PendingClause,
)


def tables_vacuumed() -> None:
    """On PostgreSQL, VACUUM ANALYZE the tables a pass touches, so every run measures tables without the dead
    rows of earlier runs and with the statistics of what they hold now. Not inside a transaction (VACUUM
    cannot run in one): then, and on SQLite, nothing."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return
    with connection.cursor() as cursor:
        for model in PASS_TABLES:
            cursor.execute(f"VACUUM ANALYZE {connection.ops.quote_name(model._meta.db_table)}")


def bench_cleanup() -> None:
    """Remove every row a benchmark wrote (a run that was interrupted included)."""
    with transaction.atomic():
        queues = JobQueue.objects.filter(name__startswith=PREFIX)
        # Events keep their job's team (PROTECT): they go before the teams do.
        Event.objects.filter(team__slug__startswith=PREFIX).delete()
        Job.objects.filter(job_queue__in=queues).delete()
        TrainingPlan.objects.filter(job_queue__in=queues).delete()
        QuotaShare.objects.filter(job_queue__in=queues).delete()
        environments = list(queues.values_list("service_environment_id", flat=True))
        queues.delete()
        ServiceEnvironment.objects.filter(pk__in=environments).delete()
        Team.objects.filter(slug__startswith=PREFIX).delete()
