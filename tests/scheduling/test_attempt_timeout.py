"""attempt_duration_seconds (an attempt placed longer is a failed attempt, ATTEMPT_TIMEOUT) and retry rules."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from scheduling import retry
from scheduling.models import Event, EventKind, JobAttempt, JobStatus, QuotaShare, ServiceEnvironment
from scheduling.passes import run as passes
from scheduling.services import executor as executor_services
from scheduling.services import jobs as job_services
from tests.factories import (
    JobQueueFactory,
    MembershipFactory,
    ServiceEnvironmentFactory,
    UserFactory,
    environment_with,
    job_in,
    share_with,
)

pytestmark = pytest.mark.django_db

P5 = "ml.p5.48xlarge"


@pytest.fixture
def share():
    environment = ServiceEnvironmentFactory(
        name="gpu-hosts", executor=ServiceEnvironment.Executor.EXTERNAL, stop_grace_seconds=60
    )
    queue = JobQueueFactory(name="training", service_environment=environment)
    environment_with(queue, {P5: 8})
    return share_with(queue, "nlp", {P5: 4}, strategy=QuotaShare.Strategy.LEND)


def placed(share, **fields):
    job = job_in(share, [(P5, 2)], **fields)
    passes.queue_pass_run(job_queue_id=share.job_queue_id, trigger="test")
    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED
    return job


def age(job, seconds: int):
    """Move the job's placement `seconds` into the past, as if it had been placed then."""
    earlier = timezone.now() - timedelta(seconds=seconds)
    job.scheduled_at = earlier
    job.save(update_fields=["scheduled_at"])
    JobAttempt.objects.filter(job=job).update(scheduled_at=earlier)


def test_an_untaken_attempt_past_its_duration_is_a_failed_attempt_retried_while_attempts_remain(share):
    job = placed(share, attempt_duration_seconds=60, retry_attempts=2)
    age(job, 61)
    passes.queue_pass_run(job_queue_id=share.job_queue_id, trigger="test")
    job.refresh_from_db()
    # The failed attempt went back to the queue, and the same pass placed it again.
    assert job.failed_attempts == 1
    assert job.status == JobStatus.SCHEDULED
    first = JobAttempt.objects.filter(job=job).order_by("id").first()
    assert first.status_reason.startswith("ATTEMPT_TIMEOUT")
    assert Event.objects.filter(job=job, kind=EventKind.ATTEMPT_TIMEOUT).count() == 1


def test_an_attempt_within_its_duration_is_left_alone(share):
    job = placed(share, attempt_duration_seconds=600)
    age(job, 500)
    passes.queue_pass_run(job_queue_id=share.job_queue_id, trigger="test")
    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED and job.failed_attempts == 0


def test_a_taken_attempt_past_its_duration_stops_gracefully_and_fails_when_no_attempt_is_left(share):
    job = placed(share, attempt_duration_seconds=60)
    job.taken_at = timezone.now()
    job.lease_expires_at = timezone.now() + timedelta(seconds=300)
    job.save(update_fields=["taken_at", "lease_expires_at"])
    age(job, 120)
    passes.queue_pass_run(job_queue_id=share.job_queue_id, trigger="test")
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPING
    assert job.stop_outcome == JobStatus.FAILED
    assert job.selected_instance_count == 2  # it holds its capacity while it stops
    executor_services.job_report(job_id=job.pk, status="STOPPED", attempt=job.attempt)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert (
        job.status_reason.startswith("ATTEMPT_TIMEOUT") and "failed after 1 attempt(s)" in job.status_reason
    )


def test_an_exit_rule_matching_the_reason_fails_the_job_although_attempts_remain(share):
    job = placed(
        share,
        retry_attempts=3,
        retry_rules=[{"action": "EXIT", "on_status_reason": "OOM*"}, {"action": "RETRY"}],
    )
    job.taken_at = timezone.now()
    job.lease_expires_at = timezone.now() + timedelta(seconds=300)
    job.save(update_fields=["taken_at", "lease_expires_at"])
    executor_services.job_report(job_id=job.pk, status="FAILED", attempt=job.attempt, reason="OOM killed")
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "EXIT" in job.status_reason


def test_a_retry_rule_matching_retries_and_no_rule_matching_retries_too():
    rules = [{"action": "RETRY", "on_exit_code": "137"}, {"action": "EXIT", "on_status_reason": "*"}]
    assert retry.retries(rules=rules, failed_attempts=1, retry_attempts=2, status_reason="x", exit_code=137)[
        0
    ]
    assert not retry.retries(
        rules=rules, failed_attempts=1, retry_attempts=2, status_reason="x", exit_code=1
    )[0]
    assert retry.retries(rules=[], failed_attempts=1, retry_attempts=2, status_reason="x")[0]
    assert not retry.retries(rules=[], failed_attempts=2, retry_attempts=2, status_reason="x")[0]


def test_a_submission_with_an_attempt_duration_out_of_range_or_bad_rules_names_the_field(share):
    user = UserFactory()
    MembershipFactory(user=user, team=share.team)
    from scheduling import rules

    entries = [rules.PreferenceInput(share.capacity_limits.get().instance_type, 1)]
    submission = job_services.JobSubmission(
        name="j",
        job_queue=share.job_queue,
        quota_share=share,
        instance_preferences=entries,
        attempt_duration_seconds=2_592_001,
        retry_rules=[{"action": "MAYBE"}],
    )
    with pytest.raises(ValidationError) as caught:
        job_services.job_submit(user=user, submission=submission)
    errors = caught.value.message_dict
    assert "attempt_duration_seconds" in errors
    assert errors["retry_rules"] == ["[0].action: must be RETRY or EXIT"]


def test_the_pass_asks_to_run_again_when_the_first_attempt_times_out(
    share, monkeypatch, django_capture_on_commit_callbacks
):
    due: list = []
    monkeypatch.setattr(passes, "pass_due_record", lambda queue_id, when, now: due.append(when))
    job = placed(share, attempt_duration_seconds=600)
    with django_capture_on_commit_callbacks(execute=True):
        passes.queue_pass_run(job_queue_id=share.job_queue_id, trigger="test")
    assert due[-1] == job.scheduled_at + timedelta(seconds=600)
