"""Graceful stops (behaviour.md#preemption, 4): STOPPING holds capacity until STOPPED or the deadline; leases;
nominations.

Until the engine marks taken victims graceful, the write side is driven here with hand-built Decisions, as
the engine will hand them over; the one end-to-end test that needs the engine says so.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from engine import types as et
from scheduling.models import (
    Event,
    EventKind,
    Executor,
    Job,
    JobAttempt,
    JobStatus,
    QuotaShare,
    ServiceEnvironment,
    StopOutcome,
)
from scheduling.passes.snapshot import snapshot_load
from scheduling.passes.write import decisions_write
from scheduling.services import executor as executor_services
from scheduling.services import jobs as job_services
from scheduling.services.locks import queue_lock
from tests.factories import JobQueueFactory, ServiceEnvironmentFactory, environment_with, job_in, share_with
from tests.scheduling.support import run_pass

pytestmark = pytest.mark.django_db

P5 = "ml.p5.48xlarge"


@pytest.fixture
def queue():
    environment = ServiceEnvironmentFactory(
        name="gpu-hosts",
        executor=ServiceEnvironment.Executor.EXTERNAL,
        stop_grace_seconds=60,
        lease_seconds=30,
    )
    queue = JobQueueFactory(name="training", service_environment=environment)
    environment_with(queue, {P5: 8})
    return queue


@pytest.fixture
def lender(queue):
    return share_with(queue, "nlp", {P5: 4}, strategy=QuotaShare.Strategy.LEND)


@pytest.fixture
def borrower(queue):
    return share_with(queue, "vision", {P5: 4}, strategy=QuotaShare.Strategy.LEND_AND_BORROW)


def take(job: Job, *, executor: Executor | None = None, at=None) -> Job:
    """The executor takes the job, as the work endpoint's claim does."""
    now = at or timezone.now()
    job.refresh_from_db()
    job.taken_at, job.taken_by = now, executor
    job.lease_expires_at = now + timedelta(seconds=job.job_queue.service_environment.lease_seconds)
    job.save(update_fields=["taken_at", "taken_by", "lease_expires_at"])
    return job


def write(queue, decisions: et.Decisions, now=None):
    """Write hand-built decisions as the pass would, under the queue lock."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = queue_lock(queue.pk)
        _, index = snapshot_load(job_queue=locked, now=now, clauses=True)
        return decisions_write(job_queue=locked, decisions=decisions, index=index, now=now)


def reclaim_gracefully(victim: Job, claimant: Job, *, fails: bool = False) -> et.Decisions:
    return et.Decisions(
        preemptions=[
            et.Preemption(
                job_id=victim.pk,
                share_id=victim.quota_share_id,
                kind=et.PreemptionKind.RECLAIM,
                instance_type=P5,
                instances=victim.selected_instance_count,
                preemptor_job_id=claimant.pk,
                preemptor_share_id=claimant.quota_share_id,
                fails=fails,
                message="reclaimed by nlp",
                graceful=True,
            )
        ],
        nominations=[
            et.Nominate(
                job_id=claimant.pk,
                share_id=claimant.quota_share_id,
                entry_index=0,
                instance_type=P5,
                instance_count=2,
                training_plan=None,
                victim_ids=(victim.pk,),
                message="waiting for the victims to stop",
            )
        ],
    )


@pytest.fixture
def borrowing(queue, borrower):
    # 6 of 8: once it has stopped, it and the claimant's 2 fit together (today's engine ignores nominations).
    job = job_in(borrower, [(P5, 6)], name="big")
    run_pass(queue)
    return take(job)


def test_a_graceful_victim_is_stopping_holds_its_placement_and_its_preemptor_is_nominated(
    queue, lender, borrowing
):
    claimant = job_in(lender, [(P5, 2)], name="mine")
    before = timezone.now()
    admitted, preempted = write(queue, reclaim_gracefully(borrowing, claimant))
    borrowing.refresh_from_db()
    claimant.refresh_from_db()
    assert (admitted, preempted) == ([], [borrowing.pk])
    assert borrowing.status == JobStatus.STOPPING and borrowing.selected_instance_count == 6
    assert borrowing.stop_outcome == StopOutcome.RUNNABLE and borrowing.preemption_count == 1
    assert before + timedelta(seconds=60) <= borrowing.stop_deadline <= timezone.now() + timedelta(seconds=60)
    assert borrowing.status_reason.startswith("stopping until ")
    assert JobAttempt.objects.get(job=borrowing).stopped_at is None  # the attempt runs until it has stopped
    kinds = set(borrowing.events.values_list("kind", flat=True))
    assert {EventKind.PREEMPTED_RECLAIM, EventKind.STOPPING} <= kinds
    # The status reason keeps its code for programs; the event says it in words.
    assert "PREEMPTED_RECLAIM: " in borrowing.status_reason
    stopping = borrowing.events.get(kind=EventKind.STOPPING).message
    assert stopping.startswith("big stopping until ") and "PREEMPTED" not in stopping
    assert (claimant.status, claimant.nominated_entry, claimant.nominated_victims) == (
        JobStatus.RUNNABLE,
        0,
        [borrowing.pk],
    )


def test_a_victim_not_yet_taken_stops_at_once_as_before(queue, lender, borrower):
    victim = job_in(borrower, [(P5, 8)], name="big")
    run_pass(queue)
    victim.refresh_from_db()
    claimant = job_in(lender, [(P5, 2)], name="mine")
    decisions = reclaim_gracefully(victim, claimant)
    decisions.preemptions[0] = et.Preemption(**{**_fields(decisions.preemptions[0]), "graceful": False})
    write(queue, decisions)
    victim.refresh_from_db()
    assert victim.status == JobStatus.RUNNABLE and victim.selected_instance_type is None
    assert JobAttempt.objects.get(job=victim).stopped_at is not None


def _fields(decision) -> dict:
    return {name: getattr(decision, name) for name in decision.__slots__}


def test_stopped_report_returns_the_victim_to_its_queue_and_the_next_pass_places_the_nominee(
    queue, lender, borrowing
):
    claimant = job_in(lender, [(P5, 2)], name="mine")
    submitted = borrowing.created_at
    write(queue, reclaim_gracefully(borrowing, claimant))
    borrowing.refresh_from_db()
    job = executor_services.job_report(
        job_id=borrowing.pk, attempt=borrowing.attempt, status="STOPPED", exit_code=143, output_tail="saved\n"
    )
    assert job.status == JobStatus.RUNNABLE and job.created_at == submitted and job.preemption_count == 1
    assert job.selected_instance_type is None and job.taken_at is None and job.stop_deadline is None
    attempt = JobAttempt.objects.get(job=job)
    assert attempt.stopped_at is not None and (attempt.exit_code, attempt.output_tail) == (143, "saved\n")
    assert attempt.status_reason.startswith("PREEMPTED_RECLAIM: ")
    assert Event.objects.get(job=job, kind=EventKind.STOPPED).message.endswith(
        ": back in the queue (RUNNABLE)"
    )
    # Repeating STOPPED is harmless.
    again = executor_services.job_report(job_id=job.pk, attempt=job.attempt, status="STOPPED")
    assert again.status == JobStatus.RUNNABLE
    assert Event.objects.filter(job=job, kind=EventKind.STOPPED).count() == 1

    result = run_pass(queue)
    claimant.refresh_from_db()
    assert claimant.pk in result.admitted and claimant.status == JobStatus.SCHEDULED
    assert (claimant.nominated_entry, claimant.nominated_victims, claimant.attempt) == (None, [], 1)


def test_a_victim_that_fails_for_good_fails_once_it_has_stopped(queue, lender, borrowing):
    claimant = job_in(lender, [(P5, 2)], name="mine")
    write(queue, reclaim_gracefully(borrowing, claimant, fails=True))
    borrowing.refresh_from_db()
    assert borrowing.status == JobStatus.STOPPING and borrowing.stop_outcome == StopOutcome.FAILED
    assert not Event.objects.filter(job=borrowing, kind=EventKind.FAILED).exists()
    job = executor_services.job_report(job_id=borrowing.pk, attempt=borrowing.attempt, status="STOPPED")
    assert job.status == JobStatus.FAILED and job.status_reason.startswith("PREEMPTION_RETRIES_EXHAUSTED")
    assert Event.objects.filter(job=job, kind=EventKind.FAILED).count() == 1


def test_a_stopping_job_past_its_deadline_counts_as_stopped_in_the_next_pass(queue, lender, borrowing):
    claimant = job_in(lender, [(P5, 2)], name="mine")
    write(queue, reclaim_gracefully(borrowing, claimant))
    Job.objects.filter(pk=borrowing.pk).update(stop_deadline=timezone.now() - timedelta(seconds=1))
    result = run_pass(queue)
    borrowing.refresh_from_db()
    claimant.refresh_from_db()
    # Stopped before the engine ran, so back in the queue and placed again in that pass, as attempt 2.
    assert borrowing.preemption_count == 1 and borrowing.attempt == 2 and borrowing.pk in result.admitted
    first = JobAttempt.objects.get(job=borrowing, attempt=1)
    assert first.stopped_at is not None and first.status_reason.startswith("PREEMPTED_RECLAIM")
    assert Event.objects.filter(job=borrowing, kind=EventKind.STOPPED).count() == 1
    assert claimant.pk in result.admitted and claimant.nominated_entry is None


def test_a_lost_lease_fails_the_attempt_frees_the_capacity_and_retries(queue, lender):
    executor = Executor.objects.create(service_environment=queue.service_environment, name="host-1")
    job = job_in(lender, [(P5, 4)], name="train", retry_attempts=2)
    run_pass(queue)
    take(job, executor=executor, at=timezone.now() - timedelta(seconds=31))
    result = run_pass(queue)
    job.refresh_from_db()
    # Lost, retried, and (its capacity free again) placed once more in the same pass, as attempt 2.
    assert job.pk in result.admitted and job.status == JobStatus.SCHEDULED
    assert (job.attempt, job.failed_attempts, job.taken_at) == (2, 1, None)
    first, second = JobAttempt.objects.filter(job=job).order_by("attempt")
    assert first.stopped_at is not None and first.status_reason.startswith("EXECUTOR_LOST")
    assert second.stopped_at is None and second.attempt == 2
    assert Event.objects.filter(job=job, kind=EventKind.EXECUTOR_LOST).count() == 1
    executor.refresh_from_db()
    assert executor.jobs_lost == 1


def test_a_lost_lease_without_attempts_left_fails_the_job(queue, lender):
    job = job_in(lender, [(P5, 4)], name="train")
    run_pass(queue)
    take(job, at=timezone.now() - timedelta(seconds=31))
    run_pass(queue)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.status_reason.startswith("EXECUTOR_LOST")
    assert {EventKind.EXECUTOR_LOST, EventKind.FAILED} <= set(job.events.values_list("kind", flat=True))


def test_a_report_renews_the_lease(queue, lender):
    job = job_in(lender, [(P5, 4)], name="train")
    run_pass(queue)
    take(job, at=timezone.now() - timedelta(seconds=29))
    executor_services.job_report(job_id=job.pk, attempt=1, status="RUNNING")
    job.refresh_from_db()
    assert job.lease_expires_at > timezone.now() + timedelta(seconds=25)


def test_cancelling_a_taken_job_stops_it_gracefully(queue, lender):
    job = job_in(lender, [(P5, 4)], name="train")
    run_pass(queue)
    take(job)
    job = job_services.job_cancel(job_id=job.pk, actor=None)
    assert job.status == JobStatus.STOPPING and job.stop_outcome == StopOutcome.CANCELLED
    assert job.selected_instance_count == 4  # still held
    job = executor_services.job_report(job_id=job.pk, attempt=job.attempt, status="FAILED", exit_code=-15)
    assert job.status == JobStatus.CANCELLED and job.stopped_at is not None
    kinds = list(job.events.values_list("kind", flat=True))
    assert {EventKind.STOPPING, EventKind.STOPPED, EventKind.CANCELLED} <= set(kinds)


def test_a_stopped_report_after_the_deadline_settled_the_stop_still_records_the_exit_code(queue, lender):
    """The agent SIGKILLs at the deadline, the pass settles the stop at the same moment: its STOPPED, a moment
    late, changes nothing but is not lost either."""
    job = job_in(lender, [(P5, 4)], name="train")
    run_pass(queue)
    take(job)
    job = job_services.job_cancel(job_id=job.pk, actor=None)
    Job.objects.filter(pk=job.pk).update(stop_deadline=timezone.now() - timedelta(seconds=1))
    run_pass(queue)
    events = Event.objects.count()
    job = executor_services.job_report(
        job_id=job.pk, attempt=job.attempt, status="STOPPED", exit_code=137, output_tail="killed\n"
    )
    assert job.status == JobStatus.CANCELLED and Event.objects.count() == events
    attempt = JobAttempt.objects.get(job=job)
    assert (attempt.exit_code, attempt.output_tail) == (137, "killed\n")


def test_cancelling_a_placed_job_nobody_took_cancels_it_at_once(queue, lender):
    job = job_in(lender, [(P5, 4)], name="train")
    run_pass(queue)
    job = job_services.job_cancel(job_id=job.pk, actor=None)
    assert job.status == JobStatus.CANCELLED


def test_cancelling_a_stopping_victim_makes_its_outcome_cancelled(queue, lender, borrowing):
    claimant = job_in(lender, [(P5, 2)], name="mine")
    write(queue, reclaim_gracefully(borrowing, claimant))
    job_services.job_cancel(job_id=borrowing.pk, actor=None)
    job = executor_services.job_report(job_id=borrowing.pk, status="STOPPED")
    assert job.status == JobStatus.CANCELLED


def test_a_pass_settling_stops_and_leases_costs_the_same_queries_whatever_their_number(queue, lender):
    def count(jobs: int) -> int:
        Job.objects.all().delete()
        placed = [job_in(lender, [(P5, 1)], name=f"j{i}") for i in range(jobs)]
        run_pass(queue)
        for job in placed:
            take(job, at=timezone.now() - timedelta(seconds=31))
        with CaptureQueriesContext(connection) as captured:
            run_pass(queue)
        assert not Job.objects.filter(status=JobStatus.SCHEDULED, taken_at__isnull=False).exists()
        return len(captured)

    assert count(2) == count(4)


def test_the_simulated_executor_takes_jobs_and_stops_them_after_its_stop_delay(settings):
    settings.SIMULATED_STOP_SECONDS = 3
    environment = ServiceEnvironmentFactory(name="sim", executor=ServiceEnvironment.Executor.SIMULATED)
    queue = JobQueueFactory(name="sim", service_environment=environment)
    environment_with(queue, {P5: 4})
    share = share_with(queue, "nlp", {P5: 4})
    job = job_in(share, [(P5, 2)])
    run_pass(queue)
    executor_services.simulated_executor_tick(job_queue_id=queue.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.STARTING and job.taken_at is not None and job.lease_expires_at is None
    job = job_services.job_cancel(job_id=job.pk, actor=None)
    assert job.status == JobStatus.STOPPING
    executor_services.simulated_executor_tick(job_queue_id=queue.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPING
    executor_services.simulated_executor_tick(
        job_queue_id=queue.pk, now=timezone.now() + timedelta(seconds=4)
    )
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED


def test_reclaiming_from_a_taken_job_through_the_engine_nominates_the_claimant(queue, lender, borrower):
    victim = job_in(borrower, [(P5, 8)], name="all-of-it")
    run_pass(queue)
    victim = take(victim)
    claimant = job_in(lender, [(P5, 2)], name="mine")
    result = run_pass(queue)
    victim.refresh_from_db()
    claimant.refresh_from_db()
    assert result.admitted == [] and victim.status == JobStatus.STOPPING
    assert claimant.nominated_victims == [victim.pk]
    run_pass(queue)  # the victim still stops: nothing changes, nobody else is preempted
    assert Job.objects.filter(status=JobStatus.STOPPING).count() == 1
    executor_services.job_report(job_id=victim.pk, attempt=1, status="STOPPED")
    result = run_pass(queue)
    assert result.admitted[0] == claimant.pk  # placed before the victim, which is older
