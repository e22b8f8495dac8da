"""The job lifecycle of behaviour.md#a-jobs-life: legal moves only, retries, cancel, priority, the simulated
executor."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.errors import Conflict, NotAllowed
from scheduling.models import EventKind, JobAttempt, JobStatus, Membership, ServiceEnvironment
from scheduling.passes import run as passes
from scheduling.services import executor as executor_services
from scheduling.services import jobs as job_services
from tests.factories import (
    JobQueueFactory,
    MembershipFactory,
    UserFactory,
    environment_with,
    job_in,
    share_with,
)

pytestmark = pytest.mark.django_db

P5 = "ml.p5.48xlarge"


@pytest.fixture
def queue():
    queue = JobQueueFactory(name="training")
    environment_with(queue, {P5: 4})
    return queue


@pytest.fixture
def nlp(queue):
    return share_with(queue, "nlp", {P5: 4})


def placed_job(nlp, **fields):
    job = job_in(nlp, [(P5, 2)], **fields)
    passes.queue_pass_run(job_queue_id=nlp.job_queue_id)
    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED
    return job


def test_executor_moves_a_job_through_its_lifecycle(nlp):
    job = placed_job(nlp)
    executor_services.job_report(job_id=job.pk, status="STARTING")
    executor_services.job_report(job_id=job.pk, status="RUNNING")
    job = executor_services.job_report(job_id=job.pk, status="SUCCEEDED", reason="loss converged")
    assert job.status == JobStatus.SUCCEEDED and job.started_at and job.stopped_at
    assert job.selected_instance_type.name == P5  # a finished job keeps what it ran on
    attempt = JobAttempt.objects.get(job=job)
    assert attempt.started_at and attempt.stopped_at
    assert set(job.events.values_list("kind", flat=True)) >= {EventKind.STARTED, EventKind.SUCCEEDED}


@pytest.mark.parametrize(
    "status,to", [("RUNNABLE", "RUNNING"), ("SUCCEEDED", "FAILED"), ("RUNNING", "STARTING")]
)
def test_illegal_transitions_are_conflicts(nlp, status, to):
    job = placed_job(nlp)
    if status == "SUCCEEDED":
        executor_services.job_report(job_id=job.pk, status="SUCCEEDED")
    elif status == "RUNNING":
        executor_services.job_report(job_id=job.pk, status="RUNNING")
    else:
        job = job_in(nlp, [(P5, 4)], name="waiting")
    with pytest.raises(Conflict):
        executor_services.job_report(job_id=job.pk, status=to)


def test_a_repeated_report_changes_nothing(nlp):
    job = placed_job(nlp)
    executor_services.job_report(job_id=job.pk, status="RUNNING")
    started = job.__class__.objects.get(pk=job.pk).started_at
    executor_services.job_report(job_id=job.pk, status="RUNNING")
    assert job.__class__.objects.get(pk=job.pk).started_at == started


def test_failed_report_with_attempts_left_returns_the_job_to_the_queue(nlp):
    job = placed_job(nlp, retry_attempts=2)
    job = executor_services.job_report(job_id=job.pk, status="FAILED", reason="CUDA error")
    assert job.status == JobStatus.RUNNABLE and job.failed_attempts == 1
    assert job.status_reason == "attempt 1 failed (CUDA error); retrying, 1 attempt(s) left"
    assert job.selected_instance_type is None
    passes.queue_pass_run(job_queue_id=nlp.job_queue_id)
    job = executor_services.job_report(job_id=job.pk, status="FAILED", reason="CUDA error again")
    assert job.status == JobStatus.FAILED and job.status_reason.startswith("failed after 2 attempt(s)")
    assert JobAttempt.objects.filter(job=job, stopped_at__isnull=False).count() == 2


def test_cancel_frees_capacity_for_the_next_pass(nlp):
    first = placed_job(nlp)
    second = job_in(nlp, [(P5, 4)], name="big")
    passes.queue_pass_run(job_queue_id=nlp.job_queue_id)
    second.refresh_from_db()
    assert second.status == JobStatus.RUNNABLE
    job_services.job_cancel(job_id=first.pk, actor=None, reason="wrong data")
    passes.queue_pass_run(job_queue_id=nlp.job_queue_id)
    second.refresh_from_db()
    assert second.status == JobStatus.SCHEDULED
    first.refresh_from_db()
    assert first.status == JobStatus.CANCELLED and first.status_reason == "cancelled by system: wrong data"


def test_cancel_of_a_finished_job_is_a_conflict(nlp):
    job = placed_job(nlp)
    job_services.job_cancel(job_id=job.pk, actor=None)
    with pytest.raises(Conflict):
        job_services.job_cancel(job_id=job.pk, actor=None)


def test_only_submitter_manager_or_staff_may_cancel(nlp):
    submitter = MembershipFactory(team=nlp.team).user
    teammate = MembershipFactory(team=nlp.team).user
    manager = MembershipFactory(team=nlp.team, role=Membership.Role.MANAGER).user
    job = job_in(nlp, [(P5, 1)], user=submitter)
    with pytest.raises(NotAllowed):
        job_services.job_cancel(job_id=job.pk, actor=teammate)
    job_services.job_set_priority(job_id=job.pk, priority=7, actor=manager)
    job_services.job_cancel(job_id=job.pk, actor=submitter)


def test_priority_change_is_audited_and_refused_out_of_range(nlp):
    staff = UserFactory(is_staff=True)
    job = job_in(nlp, [(P5, 1)])
    job_services.job_set_priority(job_id=job.pk, priority=900, actor=staff)
    event = job.events.get(kind=EventKind.CONFIG_CHANGED)
    assert event.data["before"] == {"scheduling_priority": 0} and event.data["after"] == {
        "scheduling_priority": 900
    }
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError):
        job_services.job_set_priority(job_id=job.pk, priority=10000, actor=staff)


def test_simulated_executor_starts_runs_and_finishes_jobs(queue, nlp, settings):
    settings.SIMULATED_STARTUP_SECONDS = 5
    environment = queue.service_environment
    environment.executor = ServiceEnvironment.Executor.SIMULATED
    environment.save()
    job = placed_job(nlp, duration_seconds=60)
    start = timezone.now()
    executor_services.simulated_executor_tick(job_queue_id=queue.pk, now=start)
    job.refresh_from_db()
    assert job.status == JobStatus.STARTING
    executor_services.simulated_executor_tick(job_queue_id=queue.pk, now=start + timedelta(seconds=6))
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    executor_services.simulated_executor_tick(
        job_queue_id=queue.pk, now=job.started_at + timedelta(seconds=59)
    )
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    executor_services.simulated_executor_tick(
        job_queue_id=queue.pk, now=job.started_at + timedelta(seconds=61)
    )
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED


def test_external_executor_jobs_are_left_alone_by_the_simulated_tick(queue, nlp):
    job = placed_job(nlp, duration_seconds=1)
    later = timezone.now() + timedelta(hours=1)
    assert executor_services.simulated_executor_tick(job_queue_id=queue.pk, now=later) == 0
    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED
