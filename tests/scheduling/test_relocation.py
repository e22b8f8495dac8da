"""Relocation through the database: a running job that fell back moves onto its team's plan once it has room,
stopping gracefully, waiting nominated (the plan earmarked for it), and placed there on a new attempt."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import (
    Event,
    EventKind,
    Executor,
    Job,
    JobAttempt,
    JobStatus,
    QuotaShare,
    SchedulingPass,
    ServiceEnvironment,
)
from scheduling.passes.write import usage_after
from scheduling.services import executor as executor_services
from tests.factories import (
    JobQueueFactory,
    ServiceEnvironmentFactory,
    environment_with,
    job_in,
    plan_for,
    share_with,
)
from tests.scheduling.support import P4, P5, run_pass

pytestmark = pytest.mark.django_db


@pytest.fixture
def queue():
    environment = ServiceEnvironmentFactory(
        name="gpu-hosts",
        executor=ServiceEnvironment.Executor.EXTERNAL,
        stop_grace_seconds=60,
        lease_seconds=300,
    )
    queue = JobQueueFactory(
        name="training", service_environment=environment, relocation_min_runtime_seconds=0
    )
    environment_with(queue, {P4: 4, P5: 0})
    return queue


def running(job: Job) -> Job:
    """The executor takes the job and reports it running."""
    job.refresh_from_db()
    now = timezone.now()
    job.taken_at, job.lease_expires_at = now, now + timedelta(seconds=300)
    job.save(update_fields=["taken_at", "lease_expires_at"])
    executor_services.job_report(job_id=job.pk, attempt=job.attempt, status="RUNNING")
    job.refresh_from_db()
    return job


def test_a_job_that_fell_back_moves_onto_the_plan_once_it_has_room(queue, caplog):
    nlp = share_with(queue, "nlp", {P4: 4}, strategy=QuotaShare.Strategy.RESERVE)
    plan = plan_for(queue, "dec-p5", P5, 4)
    holder = job_in(nlp, [(P5, 4, plan)], name="holder")
    run_pass(queue)
    job = job_in(nlp, [(P5, 4, plan), (P4, 4)], name="pretrain", relocate=True)
    run_pass(queue)
    job = running(job)
    assert (job.selected_instance_type.name, job.selected_training_plan) == (P4, None)

    holder.refresh_from_db()
    executor_services.job_report(job_id=holder.pk, attempt=holder.attempt, status="SUCCEEDED")
    with caplog.at_level(logging.INFO, logger="quotaportal.scheduling.decisions"):
        run_pass(queue)

    assert SchedulingPass.objects.filter(job_queue=queue).latest("started_at", "id").relocations == 1
    [logged] = [r for r in caplog.records if getattr(r, "decision", None) == "relocate"]
    assert (logged.job, logged.from_entry, logged.entry, logged.training_plan) == (job.pk, 2, 1, "dec-p5")
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPING and job.stop_outcome == JobStatus.RUNNABLE
    assert job.stop_reason.startswith("RELOCATING: moving to training plan dec-p5: 4 instances free")
    assert (job.nominated_entry, job.nominated_victims) == (0, [job.pk])
    assert job.preemption_count == 0 and job.failed_attempts == 0
    [event] = Event.objects.filter(job=job, kind=EventKind.RELOCATING)
    assert event.message.startswith(
        f"relocating from {P4} x4 on-demand (entry 2) to {P5} x4 training plan dec-p5 (entry 1)"
    )

    # While it stops, a newcomer asking for the plan does not get it: the plan is earmarked.
    newcomer = job_in(nlp, [(P5, 4, plan)], name="newcomer")
    run_pass(queue)
    newcomer.refresh_from_db()
    assert newcomer.status == JobStatus.RUNNABLE

    executor_services.job_report(job_id=job.pk, attempt=job.attempt, status="STOPPED")
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNABLE and job.nominated_entry == 0
    run_pass(queue)

    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED and job.attempt == 2
    assert job.selected_training_plan == plan and job.nominated_entry is None
    attempts = list(JobAttempt.objects.filter(job=job).order_by("attempt"))
    assert [a.training_plan_id for a in attempts] == [None, plan.pk]
    assert attempts[0].status_reason.startswith("RELOCATING: moving to training plan dec-p5")
    newcomer.refresh_from_db()
    assert newcomer.status == JobStatus.RUNNABLE


def test_a_job_without_relocate_stays_where_it_fell_back(queue):
    nlp = share_with(queue, "nlp", {P4: 4}, strategy=QuotaShare.Strategy.RESERVE)
    plan = plan_for(queue, "dec-p5", P5, 4)
    holder = job_in(nlp, [(P5, 4, plan)], name="holder")
    run_pass(queue)
    job = job_in(nlp, [(P5, 4, plan), (P4, 4)], name="pretrain")
    run_pass(queue)
    job = running(job)
    holder.refresh_from_db()
    executor_services.job_report(job_id=holder.pk, attempt=holder.attempt, status="SUCCEEDED")

    run_pass(queue)

    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and not Event.objects.filter(kind=EventKind.RELOCATING).exists()


def test_an_executor_hears_of_a_move_as_of_any_stop_and_then_starts_the_new_attempt(queue):
    """The reference agent needs nothing new: the move is a stop in `stop`, then a new attempt in `start`."""
    host = Executor.objects.create(service_environment=queue.service_environment, name="host-1")
    nlp = share_with(queue, "nlp", {P4: 4}, strategy=QuotaShare.Strategy.RESERVE)
    plan = plan_for(queue, "dec-p5", P5, 4)
    holder = job_in(nlp, [(P5, 4, plan)], name="holder")
    job = job_in(nlp, [(P5, 4, plan), (P4, 4)], name="pretrain", relocate=True)
    run_pass(queue)

    def work():
        taken = executor_services.executor_work_take(environment=queue.service_environment, executor=host)
        return [(j["id"], j["attempt"]) for j in taken.start], [(j["id"], j["attempt"]) for j in taken.stop]

    assert work() == ([(holder.pk, 1), (job.pk, 1)], [])
    for started in (holder, job):
        executor_services.job_report(job_id=started.pk, attempt=1, status="RUNNING")
    executor_services.job_report(job_id=holder.pk, attempt=1, status="SUCCEEDED")
    run_pass(queue)

    assert work() == ([], [(job.pk, 1)])
    executor_services.job_report(job_id=job.pk, attempt=1, status="STOPPED")
    run_pass(queue)
    assert work() == ([(job.pk, 2)], [])


def test_the_usage_sample_counts_a_job_moved_at_once_on_its_new_entry_only():
    from engine import Entry, Job, Placement, Share, Snapshot, Strategy, schedule
    from engine import JobStatus as EngineStatus

    nlp = Share(id=1, name="nlp", strategy=Strategy.RESERVE, limits={P4: 4, P5: 4})
    now = timezone.now()
    job = Job(
        id=1,
        share_id=1,
        priority=0,
        submitted_at=now - timedelta(hours=2),
        entries=(Entry(P5, 4), Entry(P4, 4)),
        status=EngineStatus.RUNNING,
        placement=Placement(P4, 4, None, now - timedelta(hours=1)),
        relocate=True,
    )
    snap = Snapshot(now=now, capacity={P4: 4, P5: 4}, shares=(nlp,), jobs=(job,))
    decisions = schedule(snap)
    assert [(r.job_id, r.graceful) for r in decisions.relocations] == [(1, False)]

    assert usage_after(snap, decisions) == {(1, P5): 4}
