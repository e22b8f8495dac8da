"""Benchmark the notification scan: a storm of events against many subscriptions. Prints figures; asserts
nothing about time.

It writes a team with --members members, a queue and a share under a `bench-notify` prefix, --subscriptions
webhook subscriptions spread over the members (each to failed and preempted jobs, and starved shares), --jobs
jobs, then --events events past the scan's cursor, one in five of a kind that notifies (FAILED or
PREEMPTED_RECLAIM). Then it runs scans until the cursor has passed them all, as the beat would, timing each
(wall seconds and queries). Deliveries are made, not sent: sending is a task of its own per delivery. It
deletes everything it wrote at the end (and any leftovers of an interrupted run at the start).
"""

from __future__ import annotations

import statistics
import time
from unittest import mock

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from notifications import services
from notifications.models import Delivery, EventCursor, Subscription, Trigger
from scheduling.models import (
    Event,
    EventKind,
    Job,
    JobQueue,
    Membership,
    QuotaShare,
    ServiceEnvironment,
    Team,
)
from tools.guard import require_scratch_database

PREFIX = "bench-notify"
# One event in five notifies; the others are what passes write most (placements, starts, successes).
KINDS = [
    EventKind.ADMITTED,
    EventKind.STARTED,
    EventKind.FAILED,
    EventKind.SUCCEEDED,
    EventKind.PREEMPTED_RECLAIM,
]


class Command(BaseCommand):
    help = "Time the notification scan over a storm of events and many subscriptions."

    def add_arguments(self, parser):
        parser.add_argument("--events", type=int, default=20_000)
        parser.add_argument("--subscriptions", type=int, default=20)
        parser.add_argument("--members", type=int, default=5)
        parser.add_argument("--jobs", type=int, default=500)

    def handle(self, *args, events, subscriptions, members, jobs, **options):
        if events < 1 or subscriptions < 1 or members < 1 or jobs < 1:
            raise CommandError("--events, --subscriptions, --members and --jobs must each be at least 1")
        require_scratch_database()
        bench_cleanup()
        try:
            materialize(n_events=events, n_subscriptions=subscriptions, n_members=members, n_jobs=jobs)
            self.measure(events=events, subscriptions=subscriptions)
        finally:
            bench_cleanup()

    def measure(self, *, events: int, subscriptions: int) -> None:
        scans = []
        # The enqueueing after commit is left out: one task per delivery, not the scan's own work.
        cursor = None
        with mock.patch.object(services, "_send_after_commit"):
            while True:
                with CaptureQueriesContext(connection) as queries:
                    start = time.perf_counter()
                    result = services.notifications_scan()
                    seconds = time.perf_counter() - start
                if result.cursor == cursor:  # nothing left past the cursor: the storm is read
                    break
                cursor = result.cursor
                scans.append((seconds, result.deliveries, len(queries.captured_queries)))
        made = Delivery.objects.filter(subscription__name__startswith=PREFIX).count()
        total = sum(s for s, _, _ in scans)
        self.stdout.write(
            f"notification scan on {connection.vendor}: {events} events ({notifying(events)} that "
            f"notify), {subscriptions} subscriptions -> {made} deliveries in {len(scans)} scans of at most "
            f"{services.settings.NOTIFY_SCAN_BATCH} events: {total:.2f} s in all, median scan "
            f"{statistics.median(s for s, _, _ in scans) * 1000:.0f} ms, slowest "
            f"{max(s for s, _, _ in scans) * 1000:.0f} ms, at most {max(q for _, _, q in scans)} queries a scan"
        )


def notifying(n_events: int) -> int:
    return sum(
        KINDS[i % len(KINDS)] in (EventKind.FAILED, EventKind.PREEMPTED_RECLAIM) for i in range(n_events)
    )


def materialize(*, n_events: int, n_subscriptions: int, n_members: int, n_jobs: int) -> None:
    users = get_user_model().objects
    team = Team.objects.create(name=f"{PREFIX}-team", slug=f"{PREFIX}-team")
    environment = ServiceEnvironment.objects.create(name=f"{PREFIX}-env", executor="external")
    queue = JobQueue.objects.create(name=f"{PREFIX}-queue", service_environment=environment)
    share = QuotaShare.objects.create(name=f"{PREFIX}-share", job_queue=queue, team=team)
    members = [users.create_user(username=f"{PREFIX}-{i}") for i in range(n_members)]
    Membership.objects.bulk_create(Membership(team=team, user=member) for member in members)
    Subscription.objects.bulk_create(
        Subscription(
            owner=members[i % n_members],
            name=f"{PREFIX}-{i}",
            channel="WEBHOOK",
            target=f"https://{PREFIX}.invalid/{i}",
            secret="0" * 64,
            triggers=[Trigger.JOB_FAILED, Trigger.JOB_PREEMPTED, Trigger.SHARE_STARVED],
        )
        for i in range(n_subscriptions)
    )
    jobs = Job.objects.bulk_create(
        Job(
            name=f"{PREFIX}-{i}",
            job_queue=queue,
            job_queue_name=queue.name,
            quota_share=share,
            quota_share_name=share.name,
            team=team,
            submitted_by=members[i % n_members],
        )
        for i in range(n_jobs)
    )
    EventCursor.objects.get_or_create(name=services.CURSOR)
    Event.objects.bulk_create(
        (
            Event(
                kind=KINDS[i % len(KINDS)],
                team=team,
                job_queue=queue,
                quota_share=share,
                job=jobs[i % n_jobs],
                message=f"{PREFIX} event {i}",
            )
            for i in range(n_events)
        ),
        batch_size=5_000,
    )


def bench_cleanup() -> None:
    Subscription.objects.filter(name__startswith=PREFIX).delete()
    Event.objects.filter(team__slug__startswith=PREFIX).delete()
    Job.objects.filter(name__startswith=PREFIX).delete()
    QuotaShare.objects.filter(name__startswith=PREFIX).delete()
    JobQueue.objects.filter(name__startswith=PREFIX).delete()
    ServiceEnvironment.objects.filter(name__startswith=PREFIX).delete()
    Team.objects.filter(slug__startswith=PREFIX).delete()
    get_user_model().objects.filter(username__startswith=PREFIX).delete()
