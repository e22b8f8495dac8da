"""Benchmark the API's event list at two million events. Prints figures; asserts nothing about time.

It writes a queue, 20 shares, a team with one member and --jobs jobs under a `bench-events` prefix, then
--events events (COPY on PostgreSQL, bulk_create elsewhere) spread over the last 90 days, oldest first by id
as the passes write them; VACUUM ANALYZE, as autovacuum would after such a load. Then it reads
`/api/v1/events/` through DRF's test client as the member, signed in by token, each figure the median of
--repeat runs: the first page, deep cursors, the capped page numbers, the `since`/`since_id` tails and the
filters; and --parallel threads reading `?since=1970-...` at once. It deletes everything it wrote at the end
(and any leftovers of an interrupted run at the start). `--explain` prints PostgreSQL's plan of each read.
"""

from __future__ import annotations

import logging
import statistics
import time
from base64 import b64encode
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scheduling.models import (
    Event,
    EventKind,
    InstanceType,
    Job,
    JobQueue,
    JobStatus,
    Membership,
    QuotaShare,
    ServiceEnvironment,
    Team,
)
from tools.cli import log_quieted
from tools.guard import require_scratch_database

PREFIX = "bench-events"
EVENTS = "/api/v1/events/"
SPAN = timedelta(days=90)
# Each job's life, in the order the passes and executors write it; one event in CONFIG_EVERY is a
# configuration change (no job): the rare kind.
LIFE = [
    EventKind.SUBMITTED,
    EventKind.ADMITTED,
    EventKind.STARTED,
    EventKind.PREEMPTED_RECLAIM,
    EventKind.ADMITTED,
    EventKind.FALLBACK,
    EventKind.STARTED,
    EventKind.SUCCEEDED,
]
CONFIG_EVERY = 5_000
SHARES = 20
# Events of one job lie within a window of this many consecutive events (jobs overlap in time).
WINDOW = 400


class Command(BaseCommand):
    help = "Time GET /api/v1/events/ (first page, deep cursors, page numbers, tails, filters) at 2M events."

    def add_arguments(self, parser):
        parser.add_argument("--events", type=int, default=2_000_000)
        parser.add_argument("--jobs", type=int, default=50_000)
        parser.add_argument("--repeat", type=int, default=5)
        parser.add_argument("--parallel", type=int, default=30)
        parser.add_argument("--explain", action="store_true", help="print PostgreSQL's plan of each read")
        parser.add_argument(
            "--keep", action="store_true", help="leave the rows in place (for EXPLAIN by hand)"
        )

    def handle(self, *args, events, jobs, repeat, parallel, explain, keep, **options):
        if events < 10_000 or jobs < 10 or events < jobs * len(LIFE) or repeat < 1 or parallel < 0:
            raise CommandError("need --events >= 10000, --jobs >= 10, --events >= 8 x --jobs, --repeat >= 1")
        require_scratch_database()
        self.explain = explain and connection.vendor == "postgresql"
        self.stdout.write(f"database: {connection.vendor}; median of {repeat}")
        bench_cleanup()
        with log_quieted("django.request", logging.ERROR):  # the 400 of the capped page, expected
            try:
                started = time.perf_counter()
                world = materialize(n_events=events, n_jobs=jobs)
                self.stdout.write(
                    f"wrote {events:,} events of {jobs:,} jobs in {time.perf_counter() - started:.0f} s "
                    f"(ids {world['first_id']}..{world['last_id']})"
                )
                self.measure(world, repeat=repeat, parallel=parallel)
            finally:
                if not keep:
                    started = time.perf_counter()
                    bench_cleanup()
                    self.stdout.write(f"cleaned up in {time.perf_counter() - started:.0f} s")

    def measure(self, world: dict, *, repeat: int, parallel: int) -> None:
        client = member_client(world["token"])
        now = timezone.now()
        first, middle = world["first_id"], (world["first_id"] + world["last_id"]) // 2
        share, job = world["share"], world["job"]
        since_1970 = {"since": "1970-01-01T00:00:00Z"}
        reads = [
            ("first page (newest 50)", {}),
            (f"cursor at the middle (row ~{(middle - first):,})", {"cursor": cursor_at(middle)}),
            ("cursor at the oldest (last page)", {"cursor": cursor_at(first + 30)}),
            ("?page=200 (the last numbered page)", {"page": 200}),
            ("?page=40000 (past the cap: 400)", {"page": 40_000}),
            ("?since=1970-01-01T00:00:00Z (tail from the start)", since_1970),
            ("?since=45 days ago (tail from the middle)", {"since": iso(now - SPAN / 2)}),
            ("?since=1 hour ago", {"since": iso(now - timedelta(hours=1))}),
            ("?since_id=<middle id>", {"since_id": middle}),
            ("tail cursor from the middle, oldest first", {"since_id": first, "cursor": cursor_at(middle)}),
            (f"?job=<a job> (~{world['events_per_job']} events)", {"job": job}),
            ("?quota_share=<one of 20>", {"quota_share": share}),
            ("?quota_share= + cursor at the middle", {"quota_share": share, "cursor": cursor_at(middle)}),
            ("?kind=SUCCEEDED", {"kind": "SUCCEEDED"}),
            ("?kind=CONFIG_CHANGED (rare)", {"kind": "CONFIG_CHANGED"}),
            (
                "?kind=CONFIG_CHANGED + cursor at the middle",
                {"kind": "CONFIG_CHANGED", "cursor": cursor_at(middle)},
            ),
            ("?quota_share= &kind=SUCCEEDED", {"quota_share": share, "kind": "SUCCEEDED"}),
            ("?kind=CONFIG_CHANGED &since=1970-...", {"kind": "CONFIG_CHANGED", **since_1970}),
            ("?quota_share= &since=45 days ago", {"quota_share": share, "since": iso(now - SPAN / 2)}),
        ]
        rows = []
        for label, params in reads:
            times, status, n = [], None, 0
            for _ in range(repeat + 1):  # the first run warms the caches and is not counted
                started = time.perf_counter()
                response = client.get(EVENTS, params)
                times.append(time.perf_counter() - started)
                status = response.status_code
                n = len(response.json().get("results", ())) if status == 200 else 0
            median = statistics.median(times[1:])
            rows.append((label, f"{median:.3f} s", f"{status}, {n} rows"))
            if self.explain:
                self.print_plan(client, label, params)
        slowest = max(float(value.split()[0]) for _, value, _ in rows)
        if parallel:
            median, worst, wall = read_in_parallel(world["token"], since_1970, parallel)
            rows.append(
                (
                    f"{parallel} x ?since=1970-... at once (threads of one process, one GIL)",
                    f"{median:.3f} s",
                    f"each (slowest {worst:.3f} s, all {wall:.3f} s)",
                )
            )
        width = max(len(label) for label, _, _ in rows)
        for label, value, note in rows:
            self.stdout.write(f"  {label.ljust(width)}  {value:>8}  {note}")
        self.stdout.write(f"slowest single read: {slowest:.3f} s (target: under 0.5 s)")

    def print_plan(self, client, label: str, params: dict) -> None:
        with CaptureQueriesContext(connection) as captured:
            client.get(EVENTS, params)
        event_table = Event._meta.db_table
        reads = [q["sql"] for q in captured if f'FROM "{event_table}"' in q["sql"]]
        if not reads:
            return
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {reads[-1]}")
            plan = "\n".join(f"      {row[0]}" for row in cursor.fetchall())
        self.stdout.write(f"  -- {label}\n{plan}")


def iso(moment) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def cursor_at(event_id: int) -> str:
    """The cursor DRF would hand out for a page ending at `event_id`, built by hand to jump there."""
    return b64encode(f"p={event_id}".encode()).decode()


def member_client(token: str) -> APIClient:
    client = APIClient(HTTP_HOST="localhost")  # a host every ALLOWED_HOSTS default names
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def read_in_parallel(token: str, params: dict, n: int) -> tuple[float, float, float]:
    """n threads, each its own client and database connection, reading at once: median, slowest, wall."""

    def read(_):
        try:
            started = time.perf_counter()
            member_client(token).get(EVENTS, params)
            return time.perf_counter() - started
        finally:
            connection.close()

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=n) as pool:
        times = list(pool.map(read, range(n)))
    return statistics.median(times), max(times), time.perf_counter() - started


def materialize(*, n_events: int, n_jobs: int) -> dict:
    with transaction.atomic():
        environment = ServiceEnvironment.objects.create(name=f"{PREFIX}-env", executor="external")
        queue = JobQueue.objects.create(name=f"{PREFIX}-queue", service_environment=environment)
        team = Team.objects.create(name=f"{PREFIX}-team", slug=f"{PREFIX}-team")
        member = get_user_model().objects.create_user(username=f"{PREFIX}-member")
        Membership.objects.create(team=team, user=member)
        token = Token.objects.create(user=member).key
        instance_type, _ = InstanceType.objects.get_or_create(name=f"{PREFIX}.p5", defaults={"gpu_count": 8})
        shares = [
            QuotaShare.objects.create(name=f"{PREFIX}-{i}", job_queue=queue, team=team) for i in range(SHARES)
        ]
        jobs = Job.objects.bulk_create(
            [
                Job(
                    name=f"job-{i}",
                    job_queue=queue,
                    quota_share=shares[i % SHARES],
                    team=team,
                    status=JobStatus.SUCCEEDED,
                )
                for i in range(n_jobs)
            ],
            batch_size=5_000,
        )
    rows = event_rows(
        n_events=n_events,
        queue_id=queue.pk,
        job_ids=[job.pk for job in jobs],
        share_ids=[job.quota_share_id for job in jobs],
        instance_type_id=instance_type.pk,
    )
    if connection.vendor == "postgresql":
        copy_events(rows)
        with connection.cursor() as cursor:
            cursor.execute(f'VACUUM ANALYZE "{Event._meta.db_table}"')
    else:
        batch = []
        for row in rows:
            batch.append(Event(**dict(zip(COLUMNS, row, strict=True))))
            if len(batch) == 10_000:
                Event.objects.bulk_create(batch)
                batch = []
        Event.objects.bulk_create(batch)
    events = Event.objects.filter(job_queue=queue)
    first_id = events.order_by("id").values_list("id", flat=True)[0]
    last_id = events.order_by("-id").values_list("id", flat=True)[0]
    return {
        "token": token,
        "first_id": first_id,
        "last_id": last_id,
        "share": shares[7].name,
        "job": jobs[n_jobs // 2].pk,
        "events_per_job": n_events // n_jobs,
    }


COLUMNS = (
    "kind",
    "job_queue_id",
    "job_id",
    "quota_share_id",
    "instance_type_id",
    "instances",
    "message",
    "created_at",
)


def event_rows(*, n_events, queue_id, job_ids, share_ids, instance_type_id):
    """The events, oldest first: each job's LIFE spread over a window of WINDOW events; a configuration
    change every CONFIG_EVERY events; what is left over, more submissions."""
    start = timezone.now() - SPAN
    step = SPAN / n_events
    per_window = WINDOW // len(LIFE)  # jobs living in one window
    n_jobs = len(job_ids)
    for i in range(n_events):
        created_at = start + step * i
        if i % CONFIG_EVERY == CONFIG_EVERY - 1:
            yield (
                "CONFIG_CHANGED",
                queue_id,
                None,
                None,
                None,
                None,
                "bench configuration change",
                created_at,
            )
            continue
        window, offset = divmod(i, WINDOW)
        step_in_life, slot = divmod(offset, per_window)
        j = (window * per_window + slot) % n_jobs
        kind = LIFE[step_in_life] if step_in_life < len(LIFE) else EventKind.SUBMITTED
        placed = kind in (EventKind.ADMITTED, EventKind.STARTED, EventKind.PREEMPTED_RECLAIM)
        yield (
            str(kind),
            queue_id,
            job_ids[j],
            share_ids[j],
            instance_type_id if placed else None,
            2 if placed else None,
            f"job-{j} {kind.lower()}",
            created_at,
        )


def copy_events(rows) -> None:
    table = Event._meta.db_table
    columns = ", ".join([*COLUMNS, "other_job_id", "other_share_id", "actor_id", "data"])
    with transaction.atomic(), connection.cursor() as cursor:
        with cursor.connection.cursor().copy(f'COPY "{table}" ({columns}) FROM STDIN') as copy:
            for row in rows:
                copy.write_row((*row, None, None, None, "{}"))


def bench_cleanup() -> None:
    """Remove every row a run wrote (an interrupted run's included). The events go first, committed, and the
    table is vacuumed before the jobs are deleted: each deleted job has PostgreSQL check that no event names it
    as `other_job`, a column without an index, so a scan of the event table per job, dead rows included."""
    queues = list(JobQueue.objects.filter(name__startswith=PREFIX).values_list("pk", flat=True))
    if queues:
        jobs = Job.objects.filter(job_queue_id__in=queues)
        Event.objects.filter(job_queue_id__in=queues)._raw_delete(Event.objects.db)
        Event.objects.filter(job__in=jobs)._raw_delete(Event.objects.db)
        Event.objects.filter(other_job__in=jobs)._raw_delete(Event.objects.db)
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f'VACUUM "{Event._meta.db_table}"')
    with transaction.atomic():
        if queues:
            Job.objects.filter(job_queue_id__in=queues)._raw_delete(Job.objects.db)
            QuotaShare.objects.filter(job_queue_id__in=queues).delete()
            environments = list(
                JobQueue.objects.filter(pk__in=queues).values_list("service_environment_id", flat=True)
            )
            JobQueue.objects.filter(pk__in=queues).delete()
            ServiceEnvironment.objects.filter(pk__in=environments).delete()
        Team.objects.filter(slug__startswith=PREFIX).delete()
        get_user_model().objects.filter(username__startswith=PREFIX).delete()
        InstanceType.objects.filter(name__startswith=PREFIX).delete()
