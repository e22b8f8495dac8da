"""A pass for a queue deleted while it waited in the broker is skipped with an info line, not an error."""

from __future__ import annotations

import logging
from unittest import mock

import pytest

from scheduling import tasks
from scheduling.models import JobQueue, SchedulingPass
from tests.factories import JobQueueFactory

pytestmark = pytest.mark.django_db


def test_a_pass_for_a_queue_deleted_before_the_pass_takes_its_lock_is_skipped_with_an_info_line(caplog):
    queue = JobQueueFactory(name="short-lived")

    def delete_the_queue(job_queue_id):  # runs after the existence check, before the row lock
        JobQueue.objects.filter(pk=job_queue_id).delete()

    with caplog.at_level(logging.INFO), mock.patch.object(tasks, "pass_waiting_clear", delete_the_queue):
        result = tasks.run_queue_pass.apply(args=(queue.pk, "submit"))

    assert result.successful()
    assert result.get() == {"job_queue_id": queue.pk, "skipped": "queue no longer exists"}
    assert not SchedulingPass.objects.exists()
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert any(
        record.levelno == logging.INFO and f"queue {queue.pk} was deleted" in record.getMessage()
        for record in caplog.records
    )


def test_a_pass_for_a_queue_already_gone_is_skipped_with_an_info_line(caplog):
    with caplog.at_level(logging.INFO):
        result = tasks.run_queue_pass.apply(args=(999999, "beat"))

    assert result.get()["skipped"] == "queue no longer exists"
    assert any("queue 999999 was deleted" in record.getMessage() for record in caplog.records)
