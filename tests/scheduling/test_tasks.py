"""Passes are enqueued after commit on every change, once per queue per transaction, unless AUTOPASS is off."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.core.cache import cache
from django.utils import timezone

from scheduling import rules, tasks
from scheduling.models import Job, JobStatus, SchedulingPass
from scheduling.passes import due
from scheduling.passes import run as passes
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
            payload={"command": ["python3", "train.py"]},
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


def test_autopass_off_enqueues_nothing_but_marks_the_queue_for_the_beat(
    nlp, settings, django_capture_on_commit_callbacks
):
    settings.PASS_SETTLED_SECONDS = 3600
    user = MembershipFactory(team=nlp.team).user
    with mock.patch.object(tasks.run_queue_pass, "delay") as delay:
        with django_capture_on_commit_callbacks(execute=True):
            submit(nlp, user)
    assert delay.call_count == 0
    assert cache.get(due.pass_dirty_key(nlp.job_queue_id)) is not None


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


@pytest.fixture
def beat(settings):
    """The beat as deployed with a shared cache: settled queues are skipped."""
    settings.PASS_SETTLED_SECONDS = 3600
    settings.PASS_COALESCE_SECONDS = 0

    def run(at=None) -> list[int]:
        with mock.patch.object(tasks.run_queue_pass, "delay") as delay:
            if at is None:
                tasks.run_all_passes.apply().get()
            else:
                with mock.patch.object(tasks.timezone, "now", return_value=at):
                    tasks.run_all_passes.apply().get()
        return [call.args[0] for call in delay.call_args_list]

    return run


@pytest.fixture
def settle(django_capture_on_commit_callbacks):
    """A pass, committed: its due time is recorded once its transaction commits."""

    def run(job_queue_id: int) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            passes.queue_pass_run(job_queue_id=job_queue_id, trigger="test")

    return run


def test_beat_passes_a_queue_no_pass_has_settled_yet(nlp, beat):
    assert beat() == [nlp.job_queue_id]


def test_beat_gives_a_settled_queue_no_pass(nlp, beat, settle):
    user = MembershipFactory(team=nlp.team).user
    submit(nlp, user)
    settle(nlp.job_queue_id)
    assert beat() == []
    assert beat(at=timezone.now() + timedelta(minutes=59)) == []


def test_beat_passes_a_settled_queue_again_after_pass_settled_seconds(nlp, beat, settle):
    settle(nlp.job_queue_id)
    cache.delete(due.pass_due_key(nlp.job_queue_id))  # what the record's expiry does after an hour
    assert beat() == [nlp.job_queue_id]


def test_beat_passes_a_queue_when_a_pending_timeout_falls_due(nlp, beat, settle):
    user = MembershipFactory(team=nlp.team).user
    full = submit(nlp, user, "full")
    Job.objects.filter(pk=full.pk).update(max_pending_seconds=None)
    settle(nlp.job_queue_id)
    waiting = job_services.job_submit(
        user=user,
        submission=job_services.JobSubmission(
            name="waits",
            job_queue=nlp.job_queue,
            quota_share=nlp,
            instance_preferences=[rules.PreferenceInput(InstanceTypeFactory(name=P5), 4)],
            max_pending_seconds=600,
            payload={"command": ["python3", "train.py"]},
        ),
    )[0]
    settle(nlp.job_queue_id)
    waiting.refresh_from_db()
    assert waiting.status == JobStatus.RUNNABLE
    deadline = waiting.runnable_since + timedelta(seconds=600)
    assert beat(at=deadline - timedelta(seconds=5)) == []
    assert beat(at=deadline + timedelta(seconds=1)) == [nlp.job_queue_id]


def test_a_submission_marks_a_settled_queue_for_the_beat(
    nlp, beat, settle, django_capture_on_commit_callbacks
):
    settle(nlp.job_queue_id)
    other = JobQueueFactory(name="other")
    settle(other.pk)
    assert beat() == []
    user = MembershipFactory(team=nlp.team).user
    with django_capture_on_commit_callbacks(execute=True):
        submit(nlp, user)
    assert beat() == [nlp.job_queue_id]
    settle(nlp.job_queue_id)
    assert beat() == []


def test_a_change_committed_during_a_pass_is_not_forgotten(nlp, beat, settle):
    user = MembershipFactory(team=nlp.team).user
    execute = passes.pass_execute

    def submission_meanwhile(**kwargs):
        outcome = execute(**kwargs)
        due.pass_dirty_mark(nlp.job_queue_id)  # what a submission committing now does
        return outcome

    submit(nlp, user)
    with mock.patch.object(passes, "pass_execute", submission_meanwhile):
        settle(nlp.job_queue_id)
    assert beat() == [nlp.job_queue_id]


def test_beat_passes_every_queue_when_the_cache_does_not_answer(nlp, beat, settle):
    settle(nlp.job_queue_id)
    with mock.patch.object(due.cache, "get_many", side_effect=ConnectionError("cache down")):
        assert beat() == [nlp.job_queue_id]


def test_pass_settled_seconds_zero_passes_every_queue_on_every_beat(nlp, beat, settings, settle):
    settle(nlp.job_queue_id)
    settings.PASS_SETTLED_SECONDS = 0
    assert beat() == beat() == [nlp.job_queue_id]


def test_beat_sends_no_second_pass_while_one_waits_in_the_broker(nlp, beat, settings):
    settings.PASS_COALESCE_SECONDS = 120
    assert beat() == [nlp.job_queue_id]
    assert beat() == []  # the first still waits: it will read whatever the second would have


def test_beat_passes_a_queue_when_the_lease_of_a_taken_job_runs_out(nlp, beat, settle):
    user = MembershipFactory(team=nlp.team).user
    job = submit(nlp, user, "taken")
    settle(nlp.job_queue_id)
    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED
    lease = timezone.now() + timedelta(minutes=5)
    Job.objects.filter(pk=job.pk).update(
        taken_at=timezone.now(), lease_expires_at=lease
    )  # an executor took it
    settle(nlp.job_queue_id)
    assert beat(at=lease - timedelta(seconds=5)) == []
    assert beat(at=lease + timedelta(seconds=1)) == [nlp.job_queue_id]


def test_a_lease_renewed_after_the_pass_still_makes_the_queue_due_when_it_runs_out(nlp, beat, settle):
    user = MembershipFactory(team=nlp.team).user
    submit(nlp, user, "taken-later")
    settle(nlp.job_queue_id)  # placed; no executor holds it yet, so nothing is due
    assert beat(at=timezone.now() + timedelta(minutes=30)) == []
    lease = timezone.now() + timedelta(minutes=5)
    due.pass_due_by(nlp.job_queue_id, lease)  # what taking the job or a report does after commit
    assert beat(at=lease - timedelta(seconds=5)) == []
    assert beat(at=lease + timedelta(seconds=1)) == [nlp.job_queue_id]
