"""Passes are enqueued after commit on every change, once per queue per transaction, unless AUTOPASS is off."""

from __future__ import annotations

from unittest import mock

import pytest

from scheduling import rules, tasks
from scheduling.models import Job, JobStatus, SchedulingPass
from scheduling.services import jobs as job_services
from tests.factories import (
    InstanceTypeFactory,
    JobQueueFactory,
    MembershipFactory,
    environment_with,
    share_with,
)

pytestmark = pytest.mark.django_db

P5 = "ml.p5.48xlarge"


@pytest.fixture
def nlp():
    queue = JobQueueFactory(name="training")
    environment_with(queue, {P5: 4})
    return share_with(queue, "nlp", {P5: 4})


def submit(nlp, user, name="train"):
    return job_services.job_submit(
        user=user,
        submission=job_services.JobSubmission(
            name=name,
            job_queue=nlp.job_queue,
            quota_share=nlp,
            instance_preferences=[rules.PreferenceInput(InstanceTypeFactory(name=P5), 1)],
        ),
    )[0]


def test_submission_enqueues_one_pass_after_commit(nlp, settings, django_capture_on_commit_callbacks):
    settings.QUOTAPORTAL_AUTOPASS = True
    user = MembershipFactory(team=nlp.team).user
    with mock.patch.object(tasks.run_queue_pass, "delay") as delay:
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            from django.db import transaction

            with transaction.atomic():
                submit(nlp, user, "a")
                submit(nlp, user, "b")
                assert delay.call_count == 0  # never inside the transaction
    assert len(callbacks) == 1
    delay.assert_called_once_with(nlp.job_queue_id, "submit")


# Real commits: each submission is its own transaction, as a script's requests are.
@pytest.mark.django_db(transaction=True)
def test_requests_while_a_pass_waits_in_the_broker_join_it(nlp, settings):
    settings.QUOTAPORTAL_AUTOPASS, settings.PASS_COALESCE_SECONDS = True, 120
    user = MembershipFactory(team=nlp.team).user
    other = JobQueueFactory(name="other")
    environment_with(other, {P5: 4})
    elsewhere = share_with(other, "cv", {P5: 4})
    with mock.patch.object(tasks.run_queue_pass, "delay") as delay:
        submit(nlp, user, "a")
        submit(nlp, user, "b")  # while the first request's pass has not started
        submit(elsewhere, MembershipFactory(team=elsewhere.team).user, "c")
        assert delay.call_args_list == [mock.call(nlp.job_queue_id, "submit"), mock.call(other.pk, "submit")]
        tasks.run_queue_pass.apply(args=(nlp.job_queue_id, "submit"))  # the pass starts: the mark goes
        submit(nlp, user, "d")
        assert delay.call_count == 3 and delay.call_args == mock.call(nlp.job_queue_id, "submit")
    assert Job.objects.get(name="b").status == JobStatus.SCHEDULED  # the joined request was served


@pytest.mark.django_db(transaction=True)
def test_joining_requests_can_be_turned_off(nlp, settings):
    settings.QUOTAPORTAL_AUTOPASS, settings.PASS_COALESCE_SECONDS = True, 0
    user = MembershipFactory(team=nlp.team).user
    with mock.patch.object(tasks.run_queue_pass, "delay") as delay:
        submit(nlp, user, "a")
        submit(nlp, user, "b")
    assert delay.call_count == 2


@pytest.mark.django_db(transaction=True)
def test_a_request_the_broker_refused_does_not_block_the_next(nlp, settings):
    settings.QUOTAPORTAL_AUTOPASS, settings.PASS_COALESCE_SECONDS = True, 120
    user = MembershipFactory(team=nlp.team).user
    with mock.patch.object(
        tasks.run_queue_pass, "delay", side_effect=ConnectionError("broker down")
    ) as delay:
        submit(nlp, user, "a")
        submit(nlp, user, "b")
    assert delay.call_count == 2


def test_autopass_off_enqueues_nothing(nlp, django_capture_on_commit_callbacks):
    user = MembershipFactory(team=nlp.team).user
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        submit(nlp, user)
    assert callbacks == []


def test_pass_task_runs_a_pass_and_tolerates_a_deleted_queue(nlp):
    user = MembershipFactory(team=nlp.team).user
    job = submit(nlp, user)
    assert tasks.run_queue_pass.apply(args=(nlp.job_queue_id, "test")).get() == {
        "job_queue_id": nlp.job_queue_id,
        "admitted": 1,
        "preempted": 0,
    }
    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED
    assert SchedulingPass.objects.filter(trigger="test").count() == 1
    assert tasks.run_queue_pass.apply(args=(999999,)).get()["skipped"] == "queue no longer exists"


def test_beat_enqueues_a_pass_per_queue(nlp):
    with mock.patch.object(tasks.run_queue_pass, "delay") as delay:
        assert tasks.run_all_passes.apply().get() == 1
    delay.assert_called_once_with(nlp.job_queue_id, "beat")
