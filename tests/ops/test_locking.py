"""A pass in progress holds its queue's lock without making submissions wait (PostgreSQL row locks)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections, transaction

from scheduling import rules
from scheduling.models import InstanceType, Job
from scheduling.services import jobs as job_services
from scheduling.services import locks
from tests.factories import JobQueueFactory, MembershipFactory, environment_with, share_with

P5 = "ml.p5.48xlarge"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_submission_does_not_wait_for_the_pass_holding_the_queue_lock():
    queue = JobQueueFactory(name="busy")
    environment_with(queue, {P5: 4})
    share = share_with(queue, "nlp", {P5: 4})
    user = MembershipFactory(team=share.team).user
    locked, release = threading.Event(), threading.Event()

    def pass_in_progress():
        try:
            with transaction.atomic():
                locks.queue_lock(queue.pk)  # what a pass, a cancel or a report holds
                locked.set()
                release.wait(timeout=30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=pass_in_progress)
    holder.start()
    try:
        assert locked.wait(timeout=30)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '3s'")  # waiting for the pass would fail the submission
        job, created = job_services.job_submit(
            user=user,
            submission=job_services.JobSubmission(
                name="meanwhile",
                job_queue=queue,
                quota_share=share,
                instance_preferences=[rules.PreferenceInput(InstanceType.objects.get(name=P5), 1)],
                payload={"command": ["python3", "train.py"]},
            ),
        )
    finally:
        release.set()
        holder.join(timeout=30)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = 0")

    assert created and Job.objects.filter(pk=job.pk, status="RUNNABLE").exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_holders_of_the_queue_lock_still_take_turns():
    queue = JobQueueFactory(name="turns")
    locked, release = threading.Event(), threading.Event()

    def holder():
        try:
            with transaction.atomic():
                locks.queue_lock(queue.pk)
                locked.set()
                release.wait(timeout=30)
        finally:
            connections.close_all()

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert locked.wait(timeout=30)
        with pytest.raises(Exception, match="lock timeout"):
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL lock_timeout = '500ms'")
                locks.queue_lock(queue.pk)
    finally:
        release.set()
        thread.join(timeout=30)
