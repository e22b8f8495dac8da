"""Faults: a pass killed with SIGKILL mid-transaction writes nothing and its message is redelivered; a broker
outage does not fail a submission; redelivered tasks change nothing twice; a pass with nothing to do is cheap.

The kill tests stop a pass at a known point without touching product code: the test holds an EXCLUSIVE lock on
the pass record table, so the pass blocks on its last write (the SchedulingPass row), after every decision has
been written in its transaction, and is killed there.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from contextlib import contextmanager
from unittest import mock

import psycopg
import pytest
from django.db import OperationalError as DatabaseGone
from django.db import connections
from django.db.models import Sum
from kombu.exceptions import OperationalError as BrokerDown

from scheduling import tasks
from scheduling.models import (
    PLACED_STATUSES,
    Event,
    EventKind,
    Job,
    JobAttempt,
    JobStatus,
    QuotaShare,
    SchedulingPass,
)
from scheduling.passes import run as passes
from tests.api.support import submission
from tests.factories import JobQueueFactory, environment_with, job_in, share_with
from tests.ops.support import (
    PYTHON,
    child_database_url,
    child_env,
    ops_broker_url,
    require_redis,
    start,
    stop,
    wait_for,
)
from tools.processes import children

P5 = "ml.p5.48xlarge"


def busy_queue(name: str):
    """8 P5 instances; a borrower and a lender; 10 one-instance jobs: a pass places 8 of them."""
    queue = JobQueueFactory(name=name)
    environment_with(queue, {P5: 8})
    lender = share_with(queue, "nlp", {P5: 4}, strategy=QuotaShare.Strategy.LEND)
    borrower = share_with(queue, "vision", {P5: 4}, strategy=QuotaShare.Strategy.LEND_AND_BORROW)
    for i in range(10):
        job_in(borrower if i % 2 else lender, [(P5, 1)], name=f"j{i}")
    return queue


@contextmanager
def pass_record_table_locked():
    """Hold an EXCLUSIVE lock on the pass records from another connection until the block ends."""
    with psycopg.connect(child_database_url(), autocommit=False) as locker:
        locker.execute("LOCK TABLE scheduling_schedulingpass IN EXCLUSIVE MODE")
        try:
            yield
        finally:
            locker.rollback()


def waiting_backends(app_name: str) -> list[tuple[int, str]]:
    """(pid, query) of the backends of `app_name` that wait on a lock."""
    with psycopg.connect(child_database_url(), autocommit=True) as observer:
        return observer.execute(
            "SELECT pid, query FROM pg_stat_activity "
            "WHERE application_name = %s AND wait_event_type = 'Lock'",
            [app_name],
        ).fetchall()


def backends(app_name: str) -> int:
    with psycopg.connect(child_database_url(), autocommit=True) as observer:
        return observer.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [app_name]
        ).fetchone()[0]


def assert_placed_once_within_capacity(queue, trigger: str) -> None:
    placed = Job.objects.filter(job_queue=queue, status__in=PLACED_STATUSES)
    assert placed.count() == 8
    assert placed.aggregate(n=Sum("selected_instance_count"))["n"] == 8  # the environment's capacity
    assert JobAttempt.objects.filter(job__job_queue=queue).count() == 8
    assert JobAttempt.objects.filter(job__job_queue=queue, stopped_at__isnull=True).count() == 8
    assert Event.objects.filter(job__job_queue=queue, kind=EventKind.ADMITTED).count() == 8
    assert list(SchedulingPass.objects.filter(job_queue=queue).values_list("trigger", flat=True)) == [trigger]


CHILD_PASS = """
import django, sys
django.setup()
from scheduling.passes import run as passes
passes.queue_pass_run(job_queue_id=int(sys.argv[1]), trigger="doomed")
"""


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_pass_killed_mid_transaction_writes_nothing_and_the_next_pass_places_correctly(tmp_path):
    queue = busy_queue("killed")
    connections.close_all()
    app_name = f"qp-kill-{uuid.uuid4().hex[:8]}"

    with pass_record_table_locked():
        child = start(
            [PYTHON, "-c", CHILD_PASS, str(queue.pk)], child_env(PGAPPNAME=app_name), tmp_path / "child.log"
        )
        try:
            ((pid, query),) = wait_for(
                lambda: waiting_backends(app_name), 60, "the pass blocked on its record"
            )
            assert 'INSERT INTO "scheduling_schedulingpass"' in query  # every decision already written
            child.kill()  # SIGKILL, mid-transaction
            child.wait(timeout=10)
        finally:
            stop(child)
    wait_for(lambda: backends(app_name) == 0, 30, "the orphaned backend rolled back and left")

    assert not Job.objects.filter(job_queue=queue).exclude(status=JobStatus.RUNNABLE).exists()
    assert not JobAttempt.objects.filter(job__job_queue=queue).exists()
    assert not Event.objects.filter(job__job_queue=queue, kind=EventKind.ADMITTED).exists()
    assert not SchedulingPass.objects.filter(job_queue=queue).exists()
    result = passes.queue_pass_run(job_queue_id=queue.pk, trigger="after-kill")
    assert len(result.admitted) == 8
    assert_placed_once_within_capacity(queue, "after-kill")


SEND_PASS = """
import django, sys
django.setup()
from scheduling.tasks import run_queue_pass
run_queue_pass.apply_async(args=(int(sys.argv[1]), "redelivered"), queue=sys.argv[2])
"""


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_worker_process_killed_mid_pass_gets_its_message_redelivered_and_the_pass_completes(tmp_path):
    broker = ops_broker_url()
    require_redis(broker)
    queue = busy_queue("redelivered")
    connections.close_all()
    app_name = f"qp-redeliver-{uuid.uuid4().hex[:8]}"
    task_queue = f"ops-test-{uuid.uuid4().hex[:8]}"  # a queue of its own: no stale message reaches it
    env = child_env(PGAPPNAME=app_name, CELERY_BROKER_URL=broker, CACHE_URL="locmem://")
    log = tmp_path / "worker.log"

    with pass_record_table_locked():
        worker = start(
            [
                PYTHON,
                "-m",
                "celery",
                "-A",
                "quotaportal",
                "worker",
                "--concurrency",
                "1",
                "-Q",
                task_queue,
                "-n",
                f"{task_queue}@%h",
                "--without-gossip",
                "--without-mingle",
                "--loglevel",
                "INFO",
            ],
            env,
            log,
        )
        try:
            start([PYTHON, "-c", SEND_PASS, str(queue.pk), task_queue], env, tmp_path / "send.log").wait(
                timeout=60
            )
            ((first, query),) = wait_for(
                lambda: waiting_backends(app_name), 90, "the pass blocked on its record"
            )
            assert 'INSERT INTO "scheduling_schedulingpass"' in query
            pool = children(worker.pid)
            assert len(pool) == 1
            os.kill(pool[0], signal.SIGKILL)  # the process running the pass: SIGKILL, mid-transaction
            # The worker requeues the message (acks_late + task_reject_on_worker_lost) and a new pool process
            # takes it: its pass waits for the queue lock the orphaned transaction still holds.
            wait_for(
                lambda: any(pid != first for pid, _ in waiting_backends(app_name)),
                90,
                "the redelivered pass started",
            )
        except BaseException:
            stop(worker)
            raise
    try:
        wait_for(
            lambda: SchedulingPass.objects.filter(job_queue=queue).exists(),
            90,
            "the redelivered pass committed",
        )
    finally:
        stop(worker)

    assert_placed_once_within_capacity(queue, "redelivered")
    assert "WorkerLostError" in log.read_text() or "SIGKILL" in log.read_text()


def test_a_submission_succeeds_and_is_stored_when_the_broker_is_down(
    world, client_for, settings, django_capture_on_commit_callbacks, caplog
):
    settings.QUOTAPORTAL_AUTOPASS = True
    down = BrokerDown("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    with mock.patch.object(tasks.run_queue_pass, "delay", side_effect=down) as delay:
        with django_capture_on_commit_callbacks(execute=True):
            response = client_for(world.ana).post("/api/v1/jobs/", submission(), format="json")

    assert response.status_code == 201
    assert Job.objects.get(pk=response.json()["id"]).status == JobStatus.RUNNABLE
    delay.assert_called_once()
    assert "the beat will run it" in caplog.text


@pytest.mark.django_db
def test_a_redelivered_executor_tick_or_beat_changes_nothing_twice(settings):
    settings.SIMULATED_STARTUP_SECONDS = 0
    queue = JobQueueFactory(name="sim", service_environment__executor="simulated")
    environment_with(queue, {P5: 2})
    job_in(share_with(queue, "nlp", {P5: 2}), [(P5, 1)], duration_seconds=0)
    passes.queue_pass_run(job_queue_id=queue.pk, trigger="test")

    first = tasks.simulated_executor_tick.apply().get()
    events = Event.objects.count()
    again = tasks.simulated_executor_tick.apply().get()

    assert first == 3 and again == 0  # SCHEDULED -> STARTING -> RUNNING -> SUCCEEDED, then nothing
    assert Event.objects.count() == events
    settings.PASS_COALESCE_SECONDS = 120
    with mock.patch.object(tasks.run_queue_pass, "delay") as delay:
        assert tasks.run_all_passes.apply().get() == 1
        assert tasks.run_all_passes.apply().get() == 0  # the first beat's pass still waits in the broker
    assert delay.call_count == 1  # a redelivered beat asks for no second pass


def test_every_task_acknowledges_late_and_requeues_when_its_worker_dies(settings):
    from quotaportal.celery import app

    for task in (
        tasks.run_queue_pass,
        tasks.run_all_passes,
        tasks.simulated_executor_tick,
        tasks.prune_history,
        tasks.prune_events,
    ):
        assert task.acks_late, task.name
    assert app.conf.task_reject_on_worker_lost is True
    assert app.conf.worker_prefetch_multiplier == 1


@pytest.mark.django_db
def test_a_pass_with_nothing_to_do_on_a_busy_queue_is_cheap(django_assert_max_num_queries):
    queue = JobQueueFactory(name="busy")
    environment_with(queue, {P5: 200})
    shares = [
        share_with(queue, f"s{i}", {P5: 20}, strategy=QuotaShare.Strategy.LEND_AND_BORROW) for i in range(10)
    ]
    for i in range(500):
        job_in(shares[i % 10], [(P5, 1)], name=f"j{i}")
    passes.queue_pass_run(job_queue_id=queue.pk, trigger="first")  # places 200, 300 wait with reasons
    passes.queue_pass_run(job_queue_id=queue.pk, trigger="settle")
    events = Event.objects.count()

    # 17: the savepoint, the queue's lock, the snapshot's 8 reads and the ids of the queue's pending clauses,
    # the budgets' 3, the histogram, the record and the release
    with django_assert_max_num_queries(17) as captured:
        started = time.perf_counter()
        result = passes.queue_pass_run(job_queue_id=queue.pk, trigger="idle")
        seconds = time.perf_counter() - started

    assert result.admitted == [] and result.preempted == []
    assert Event.objects.count() == events
    # Shown with -s; docs/reliability.md quotes it.
    print(f"idle pass over 500 jobs: {seconds * 1000:.1f} ms, {len(captured.captured_queries)} queries")
    assert seconds < 2.0  # generous: CI machines vary; the figure is in docs/reliability.md


def test_a_request_whose_database_connection_dies_is_a_503_saying_retry(world, client_for):
    gone = DatabaseGone("terminating connection due to administrator command")

    with mock.patch("scheduling.services.jobs.job_submit", side_effect=gone):
        response = client_for(world.ana).post("/api/v1/jobs/", submission(), format="json")

    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    assert "client_token" in response.json()["detail"]
