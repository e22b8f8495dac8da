"""Estimated start times are learned from finished jobs, computed off the pass and stored beside the reason."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from engine import synthetic
from scheduling import tasks
from scheduling.models import Job, JobStatus, PendingState
from scheduling.passes.run import queue_pass_run
from scheduling.selectors.estimates import runtime_expectations
from scheduling.services.estimates import queue_estimates_refresh
from scheduling.tasks import ESTIMATE_PRIORITY
from tests.factories import JobQueueFactory, environment_with, job_in, share_with
from tools.bench_pass.command import bench_cleanup, materialize

pytestmark = pytest.mark.django_db

P5 = "ml.p5.48xlarge"


@pytest.fixture
def nlp():
    queue = JobQueueFactory(name="training")
    environment_with(queue, {P5: 1})
    return share_with(queue, "nlp", {P5: 1})


def finished(share, minutes: int, *, ago: int = 1) -> Job:
    stopped = timezone.now() - timedelta(hours=ago)
    job = job_in(share, [(P5, 1)])
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.SUCCEEDED,
        selected_instance_type=job.instance_preferences.get().instance_type,
        selected_instance_count=1,
        scheduled_at=stopped - timedelta(minutes=minutes),
        stopped_at=stopped,
    )
    return job


def test_runtimes_are_learned_by_share_and_type_as_quantiles(nlp):
    for minutes in (10, 20, 30, 40, 50):
        finished(nlp, minutes)
    expectations = runtime_expectations(job_queue=nlp.job_queue)
    runtime = expectations.runtime(999, nlp.pk, P5)
    assert runtime.at(0.5) == pytest.approx(30 * 60)
    assert runtime.at(0.9) == pytest.approx(46 * 60)


def test_too_few_finished_jobs_fall_back_to_the_default(nlp):
    finished(nlp, 10)
    expectations = runtime_expectations(job_queue=nlp.job_queue)
    assert expectations.runtime(999, nlp.pk, P5) == expectations.default


def estimates_of_a_busy_queue(runnable: int) -> tuple[int, int]:
    """(rows written, SQL statements) of one estimate run after a pass over the benchmark's synthetic queue."""
    bench_cleanup()
    queue = materialize(
        synthetic.build_synthetic_snapshot(runnable=runnable, placed=runnable // 5, shares=6, types=3, seed=7)
    )
    queue_pass_run(job_queue_id=queue.pk)
    with CaptureQueriesContext(connection) as captured:
        written = queue_estimates_refresh(job_queue_id=queue.pk)
    rows = PendingState.objects.filter(job__job_queue=queue)
    assert written == rows.count()
    assert not rows.filter(estimated_at=None).exists() and not rows.filter(estimate_basis="").exists()
    assert rows.exclude(estimated_earliest=None).exists()
    return written, len(captured)


def test_every_estimate_of_a_busy_queue_is_written_in_the_same_statements_at_any_size():
    """Hundreds of rows, and more than a PostgreSQL UPDATE carries in its own values (they go through a
    staging table, as a pass's do): every pending row gets its estimate, and the statements do not grow."""
    few, few_statements = estimates_of_a_busy_queue(300)
    many, many_statements = estimates_of_a_busy_queue(1_500)
    assert 200 < few < many
    assert few_statements == many_statements


def test_estimates_are_stored_beside_the_pending_reason(nlp, django_assert_max_num_queries):
    running = job_in(nlp, [(P5, 1)], duration_seconds=1800)
    waiting = job_in(nlp, [(P5, 1)], duration_seconds=600)
    queue_pass_run(job_queue_id=nlp.job_queue_id)
    with django_assert_max_num_queries(17):  # the budgets' 3 reads beside the snapshot's
        assert queue_estimates_refresh(job_queue_id=nlp.job_queue_id) == 1
    pending = PendingState.objects.get(job=waiting)
    expected = Job.objects.get(pk=running.pk).scheduled_at + timedelta(seconds=1800)
    # far starts are found on a thinner clock: within 10% of the time ahead (`simulator.estimate.pass_clock`)
    assert 0 <= (pending.estimated_earliest - expected).total_seconds() <= 0.1 * 1800 + 5
    assert pending.estimated_latest == pending.estimated_earliest
    assert pending.estimate_basis.startswith(f"once 1 job on {P5} (running or placed before it) ends")
    assert pending.estimated_at is not None


def test_a_pass_that_placed_someone_enqueues_one_estimate_per_interval(nlp, settings):
    settings.ESTIMATE_INTERVAL_SECONDS = 30
    job_in(nlp, [(P5, 1)])
    job_in(nlp, [(P5, 1)])
    with mock.patch.object(tasks.estimate_queue, "apply_async") as apply_async:
        tasks.run_queue_pass(nlp.job_queue_id, "submission")
        tasks.run_queue_pass(nlp.job_queue_id, "submission")
    # At the lowest priority: on Redis a worker takes every waiting pass before an estimate.
    apply_async.assert_called_once_with((nlp.job_queue_id,), countdown=30, priority=ESTIMATE_PRIORITY)


def test_a_beat_pass_that_decided_nothing_enqueues_no_estimate(nlp):
    with mock.patch.object(tasks.estimate_queue, "apply_async") as apply_async:
        tasks.run_queue_pass(nlp.job_queue_id, "beat")
    apply_async.assert_not_called()


def test_the_estimate_task_skips_a_deleted_queue():
    assert tasks.estimate_queue(123456) == 0
