"""Passes are serialized per queue by the database: concurrent workers never over-allocate (PostgreSQL)."""

from __future__ import annotations

import multiprocessing

import pytest
from django.db import connections
from django.db.models import Sum

from scheduling.models import Event, EventKind, Job, JobAttempt, JobStatus, QuotaShare, SchedulingPass
from scheduling.passes import run as passes
from tests.factories import JobQueueFactory, environment_with, job_in, share_with

P5 = "ml.p5.48xlarge"
WORKERS = 4


def _worker(queue_id: int, barrier, errors) -> None:
    # A forked child: drop the parent's connection object without closing its socket, then open its own.
    for conn in connections.all(initialized_only=True):
        conn.inc_thread_sharing()
        conn.connection = None
    try:
        barrier.wait(timeout=30)
        passes.queue_pass_run(job_queue_id=queue_id, trigger="race")
    except Exception as exc:  # reported to the parent, which fails the test with it
        errors.put(repr(exc))
    finally:
        connections.close_all()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_passes_on_one_queue_never_over_allocate():
    queue = JobQueueFactory(name="race")
    environment_with(queue, {P5: 10})
    borrower = share_with(queue, "vision", {P5: 4}, strategy=QuotaShare.Strategy.LEND_AND_BORROW)
    lender = share_with(queue, "nlp", {P5: 6}, strategy=QuotaShare.Strategy.LEND)
    for i in range(30):
        job_in(borrower if i % 3 else lender, [(P5, 1)], name=f"j{i}")
    connections.close_all()
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(WORKERS)
    errors = context.Queue()
    workers = [context.Process(target=_worker, args=(queue.pk, barrier, errors)) for _ in range(WORKERS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert all(worker.exitcode == 0 for worker in workers)
    assert errors.empty(), errors.get()

    placed = Job.objects.filter(job_queue=queue, status__in=[JobStatus.SCHEDULED])
    assert placed.aggregate(n=Sum("selected_instance_count"))["n"] == 10
    assert SchedulingPass.objects.filter(job_queue=queue, trigger="race").count() == WORKERS
    assert Event.objects.filter(job_queue=queue, kind=EventKind.ADMITTED).count() == 10
    for job in placed:
        assert JobAttempt.objects.filter(job=job, stopped_at__isnull=True).count() == 1
