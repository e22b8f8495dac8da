"""The bulk writes of a pass: few rows in one statement, many through a staging table, the same rows either way."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.models import Job, JobAttempt, JobStatus
from scheduling.passes import bulk
from tests.factories import JobQueueFactory, environment_with, job_in, share_with

pytestmark = pytest.mark.django_db

P5 = "ml.p5.48xlarge"


@pytest.fixture
def jobs():
    queue = JobQueueFactory(name="training")
    environment_with(queue, {P5: 8})
    nlp = share_with(queue, "nlp", {P5: 4})
    return [job_in(nlp, [(P5, 1)], name=f"j{i}") for i in range(6)]


def changes(jobs, now):
    """Values of every kind a pass writes: a TextChoices member, text, a datetime, NULL, a JSON list."""
    return {
        job.pk: {
            "status": JobStatus.SCHEDULED if i % 2 else JobStatus.RUNNABLE,
            "status_reason": f"reason {i} with 'quotes'",
            "scheduled_at": now + timedelta(seconds=i) if i % 2 else None,
            "nominated_victims": [i, i + 1] if i % 3 else [],
        }
        for i, job in enumerate(jobs)
    }


def written(jobs):
    return list(
        Job.objects.filter(pk__in=[j.pk for j in jobs])
        .order_by("pk")
        .values_list("status", "status_reason", "scheduled_at", "nominated_victims")
    )


@pytest.mark.parametrize("small_rows", [0, bulk.SMALL_UPDATE_ROWS])
def test_rows_update_writes_every_kind_of_value_whichever_the_path(jobs, monkeypatch, small_rows):
    monkeypatch.setattr(bulk, "SMALL_UPDATE_ROWS", small_rows)  # 0: every update through the staging table
    now = timezone.now()
    rows = changes(jobs, now)
    bulk.rows_update(model=Job, fields=tuple(rows[jobs[0].pk]), rows=rows)
    assert written(jobs) == [
        (
            JobStatus.SCHEDULED if i % 2 else JobStatus.RUNNABLE,
            f"reason {i} with 'quotes'",
            now + timedelta(seconds=i) if i % 2 else None,
            [i, i + 1] if i % 3 else [],
        )
        for i in range(len(jobs))
    ]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the staging table is PostgreSQL's")
def test_a_small_update_is_one_statement_and_a_large_one_four(jobs, monkeypatch):
    rows = changes(jobs, timezone.now())
    with CaptureQueriesContext(connection) as small:
        bulk.rows_update(model=Job, fields=tuple(rows[jobs[0].pk]), rows=rows)
    monkeypatch.setattr(bulk, "SMALL_UPDATE_ROWS", len(rows) - 1)
    with CaptureQueriesContext(connection) as large:
        bulk.rows_update(model=Job, fields=tuple(rows[jobs[0].pk]), rows=rows)
    assert [q["sql"].split()[0] for q in small] == ["UPDATE"]
    assert [q["sql"].split()[0] for q in large] == ["CREATE", "COPY", "ANALYZE", "UPDATE", "DROP"]


@pytest.mark.parametrize("small_rows", [0, bulk.SMALL_UPDATE_ROWS])
def test_rows_update_by_job_closes_only_open_attempts(jobs, monkeypatch, small_rows):
    monkeypatch.setattr(bulk, "SMALL_UPDATE_ROWS", small_rows)
    before, now = timezone.now() - timedelta(hours=1), timezone.now()
    first, second = jobs[0], jobs[1]
    placed = dict(
        instance_type=first.instance_preferences.first().instance_type, instance_count=1, scheduled_at=before
    )
    closed = JobAttempt.objects.create(job=first, attempt=1, stopped_at=before, **placed)
    open_first = JobAttempt.objects.create(job=first, attempt=2, **placed)
    open_other = JobAttempt.objects.create(job=jobs[2], attempt=1, **placed)
    bulk.rows_update(
        model=JobAttempt,
        fields=("stopped_at", "status_reason"),
        rows={job.pk: {"stopped_at": now, "status_reason": f"stopped {job.name}"} for job in (first, second)},
        key="job_id",
        where_null="stopped_at",
    )
    for attempt in (closed, open_first, open_other):
        attempt.refresh_from_db()
    assert (closed.stopped_at, closed.status_reason) == (before, "")
    assert (open_first.stopped_at, open_first.status_reason) == (now, "stopped j0")
    assert open_other.stopped_at is None


def test_rows_insert_stores_json_and_datetimes_as_the_orm_reads_them(jobs):
    from scheduling.models import Event, EventKind

    now = timezone.now()
    job = jobs[0]
    base = dict(kind=str(EventKind.ADMITTED), job_id=job.pk, team_id=job.team_id, created_at=now)
    bulk.rows_insert(
        Event, [dict(base, message="with data", data={"victims": [1, 2]}), dict(base, message="bare")]
    )
    stored = dict(Event.objects.filter(job=job).values_list("message", "data"))
    assert stored == {"with data": {"victims": [1, 2]}, "bare": {}}
    assert set(Event.objects.filter(job=job).values_list("created_at", flat=True)) == {now}
