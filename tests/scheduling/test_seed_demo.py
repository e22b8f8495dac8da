"""seed_demo publishes its passwords: with DEBUG off it refuses unless forced, then makes random ones."""

from __future__ import annotations

import io
import re
from datetime import timedelta
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from scheduling import tasks
from scheduling.management.commands.seed_demo import ADMIN, DEMO_PASSWORD
from scheduling.models import PLACED_STATUSES, Event, EventKind, Job, JobQueue, JobStatus
from scheduling.passes.run import queue_pass_run
from scheduling.services import demo
from scheduling.services.executor import simulated_executor_tick

pytestmark = pytest.mark.django_db


def seed(**options) -> str:
    out = io.StringIO()
    call_command("seed_demo", jobs=2, stdout=out, **options)
    return out.getvalue()


def test_seed_demo_with_debug_off_refuses_without_force_and_creates_nothing(settings):
    settings.DEBUG = False

    with pytest.raises(CommandError, match="DEBUG is off.*--force"):
        seed()

    assert not get_user_model().objects.exists()


def test_seed_demo_forced_with_debug_off_gives_random_passwords_printed_once(settings):
    settings.DEBUG = False

    first = seed(force=True)
    again = seed(force=True)

    admin_password = re.search(rf"superuser {ADMIN[0]}, password \(shown only now\): (\S+)", first).group(1)
    member_password = re.search(r"ana, .*password \(shown only now\): (\S+)", first).group(1)
    admin = get_user_model().objects.get(username=ADMIN[0])
    ana = get_user_model().objects.get(username="ana")
    assert admin.is_superuser and admin.check_password(admin_password)
    assert not admin.check_password(ADMIN[1])
    assert ana.check_password(member_password) and not ana.check_password(DEMO_PASSWORD)
    assert admin_password not in again and member_password not in again
    assert "existing passwords are unchanged" in again


def test_seed_demo_with_debug_on_keeps_the_published_demo_passwords(settings):
    settings.DEBUG = True

    out = seed()

    assert f"{ADMIN[0]} / {ADMIN[1]}" in out
    assert get_user_model().objects.get(username=ADMIN[0]).check_password(ADMIN[1])
    assert get_user_model().objects.get(username="ana").check_password(DEMO_PASSWORD)


def test_seed_demo_borrows_at_once_and_the_lenders_jobs_sent_for_later_reclaim_it(
    settings, django_capture_on_commit_callbacks
):
    settings.DEBUG = True
    with mock.patch.object(tasks.demo_lenders_arrive, "apply_async") as sent:
        with django_capture_on_commit_callbacks(execute=True):
            call_command("seed_demo", stdout=io.StringIO())
    queue = JobQueue.objects.get(name="training")
    assert sent.call_args == mock.call(args=[queue.pk], countdown=demo.LENDERS_ARRIVE_AFTER_SECONDS)

    queue_pass_run(job_queue_id=queue.pk, trigger="test")  # the first pass, right after `make run` starts
    borrowing = Job.objects.filter(name__startswith="vision-long-", borrowed_instances__gt=0)
    assert borrowing.exists()
    assert not Event.objects.filter(kind=EventKind.PREEMPTED_RECLAIM).exists()

    simulated_executor_tick(job_queue_id=queue.pk, now=timezone.now() + timedelta(seconds=60))
    tasks.demo_lenders_arrive(queue.pk)  # what the worker runs when the countdown is over
    queue_pass_run(job_queue_id=queue.pk, trigger="test")

    reclaims = Event.objects.filter(kind=EventKind.PREEMPTED_RECLAIM)
    assert reclaims.filter(job__name__startswith="vision-long-").exists()
    # The borrowers had started, so they stop gracefully; the lender's jobs wait for them, nominated.
    assert Job.objects.filter(name__startswith="vision-long-", status=JobStatus.STOPPING).exists()
    assert Job.objects.filter(name__startswith="speech-urgent-", nominated_entry__isnull=False).exists()

    simulated_executor_tick(job_queue_id=queue.pk, now=timezone.now() + timedelta(seconds=120))  # stopped
    queue_pass_run(job_queue_id=queue.pk, trigger="test")
    assert Job.objects.filter(name__startswith="speech-urgent-", status__in=PLACED_STATUSES).exists()
    assert tasks.demo_lenders_arrive(queue.pk) == 0  # sent twice (a redelivery), it submits nothing new
