"""Events past EVENT_RETENTION_DAYS are pruned by the beat, in batches; the audit log and the events of
unfinished jobs are kept whatever their age."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from quotaportal.celery import app
from scheduling import tasks
from scheduling.models import Event, EventKind, JobStatus
from scheduling.services import history
from tests.factories import JobQueueFactory, environment_with, job_in, share_with

pytestmark = pytest.mark.django_db

P5 = "ml.p5.48xlarge"


@pytest.fixture
def share():
    queue = JobQueueFactory(name="training")
    environment_with(queue, {P5: 8})
    return share_with(queue, "nlp", {P5: 4})


def event(share, kind=EventKind.SUBMITTED, *, days_old: int, job=None, other_job=None) -> Event:
    return Event.objects.create(
        kind=kind,
        job=job,
        other_job=other_job,
        quota_share=share,
        job_queue=share.job_queue,
        message=f"{kind} {days_old} days ago",
        created_at=timezone.now() - timedelta(days=days_old),
    )


def test_events_older_than_the_retention_are_pruned(share, settings):
    settings.EVENT_RETENTION_DAYS = 90
    finished = job_in(share, [(P5, 1)], status=JobStatus.SUCCEEDED)
    old = [event(share, days_old=91, job=finished), event(share, EventKind.ADMITTED, days_old=200)]
    recent = event(share, days_old=89, job=finished)

    assert history.events_prune() == 2

    assert list(Event.objects.values_list("pk", flat=True)) == [recent.pk]
    assert not Event.objects.filter(pk__in=[e.pk for e in old]).exists()


def test_an_unfinished_jobs_events_are_kept_whatever_their_age(share, settings):
    settings.EVENT_RETENTION_DAYS = 90
    waiting = job_in(share, [(P5, 1)], status=JobStatus.RUNNABLE)
    running = job_in(share, [(P5, 1)], status=JobStatus.RUNNING)
    finished = job_in(share, [(P5, 1)], status=JobStatus.CANCELLED)
    kept = [
        event(share, days_old=400, job=waiting),
        event(share, days_old=400, job=running),
        event(share, EventKind.PREEMPTED_RECLAIM, days_old=400, job=finished, other_job=running),
    ]
    event(share, days_old=400, job=finished)

    assert history.events_prune() == 1

    assert set(Event.objects.values_list("pk", flat=True)) == {e.pk for e in kept}


def test_configuration_changes_are_the_audit_log_and_kept(share, settings):
    settings.EVENT_RETENTION_DAYS = 1
    audit = event(share, EventKind.CONFIG_CHANGED, days_old=3650)

    assert history.events_prune() == 0

    assert Event.objects.filter(pk=audit.pk).exists()


def test_a_retention_of_zero_keeps_every_event(share, settings):
    settings.EVENT_RETENTION_DAYS = 0
    event(share, days_old=3650)

    assert history.events_prune() == 0
    assert Event.objects.count() == 1


def test_events_are_pruned_in_batches_and_a_run_stops_after_its_last_batch(share, settings):
    settings.EVENT_RETENTION_DAYS = 30
    unfinished = job_in(share, [(P5, 1)])
    for i in range(7):
        event(share, days_old=100 + i, job=unfinished if i % 2 else None)  # 3 kept, 4 expired

    assert history.events_prune(batch_size=1, max_batches=3) == 3
    assert history.events_prune(batch_size=1, max_batches=3) == 1
    assert history.events_prune(batch_size=1, max_batches=3) == 0
    assert Event.objects.count() == 3


def test_the_beat_prunes_events_hourly_through_a_thin_task(share, settings):
    settings.EVENT_RETENTION_DAYS = 30
    event(share, days_old=31)

    assert app.conf.beat_schedule["prune-events"]["task"] == "scheduling.tasks.prune_events"
    assert tasks.prune_events.apply().get() == 1
    assert not Event.objects.exists()
