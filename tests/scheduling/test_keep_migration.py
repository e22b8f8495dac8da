"""Migration 0007's backfill: jobs get the names of their queue and share, events the team of their job."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from scheduling.models import Event, EventKind, Job
from scheduling.selectors.events import EventFilters, event_log
from scheduling.selectors.visibility import Viewer
from tests.factories import JobQueueFactory, environment_with, job_in, share_with

pytestmark = pytest.mark.django_db

backfill = importlib.import_module(
    "scheduling.migrations.0007_jobs_and_events_outlive_configuration"
).names_and_teams_backfill


def test_backfill_names_jobs_and_gives_events_their_jobs_team():
    queue = JobQueueFactory(name="training")
    environment_with(queue, {"ml.p5.48xlarge": 4})
    nlp = share_with(queue, "nlp", {"ml.p5.48xlarge": 4})
    job = job_in(nlp, [("ml.p5.48xlarge", 1)])
    Job.objects.filter(pk=job.pk).update(job_queue_name="", quota_share_name="")
    event = Event.objects.create(kind=EventKind.SUBMITTED, job=job, quota_share=nlp, message="x submitted")
    orphan = Event.objects.create(kind=EventKind.STARTED, quota_share=nlp, message="y started")

    backfill(apps, None)

    job.refresh_from_db()
    assert (job.job_queue_name, job.quota_share_name) == (queue.name, nlp.name)
    assert Event.objects.get(pk=event.pk).team_id == nlp.team_id
    assert Event.objects.get(pk=orphan.pk).team_id == nlp.team_id


def test_a_job_event_without_a_team_is_read_by_staff_only():
    Event.objects.create(kind=EventKind.STARTED, message="lost-job started")
    Event.objects.create(
        kind=EventKind.CONFIG_CHANGED,
        message="ana changed the priority of lost-job",
        data={"object": "scheduling.Job", "id": 1},
    )
    Event.objects.create(kind=EventKind.CONFIG_CHANGED, message="admin changed queue q", data={"object": "x"})
    member = Viewer(user_id=1, is_staff=False, team_ids=frozenset({1}))
    staff = Viewer(user_id=2, is_staff=True, team_ids=frozenset())

    assert [row.text for row in event_log(viewer=member, filters=EventFilters())] == ["admin changed queue q"]
    assert len(event_log(viewer=staff, filters=EventFilters())) == 3
