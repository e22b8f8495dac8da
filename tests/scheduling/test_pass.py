"""The pass through the database: snapshot in, decisions written, events and the pass record."""

from __future__ import annotations

import gc
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from engine import synthetic
from scheduling.models import (
    Event,
    EventKind,
    Job,
    JobAttempt,
    JobStatus,
    PendingState,
    QuotaShare,
    SchedulingPass,
)
from scheduling.passes import bulk
from scheduling.passes import run as passes
from scheduling.passes.snapshot import JOB_COLUMNS
from scheduling.services import executor as executor_services
from scheduling.services import history
from scheduling.services import jobs as job_services
from tests.factories import JobQueueFactory, environment_with, job_in, plan_for, share_with
from tests.scheduling.support import P4, P5, run_pass
from tools.bench_pass.command import bench_cleanup, materialize

pytestmark = pytest.mark.django_db


def test_pass_places_a_job_and_records_attempt_events_and_pass(queue):
    nlp = share_with(queue, "nlp", {P5: 4})
    job = job_in(nlp, [(P5, 2)])
    result = run_pass(queue)
    job.refresh_from_db()
    assert result.admitted == [job.pk] and result.preempted == []
    assert job.status == JobStatus.SCHEDULED
    assert (job.selected_instance_type.name, job.selected_instance_count, job.borrowed_instances) == (
        P5,
        2,
        0,
    )
    assert job.scheduled_at is not None and job.queue_position is None
    attempt = JobAttempt.objects.get(job=job)
    assert attempt.stopped_at is None and attempt.instance_count == 2
    assert list(job.events.values_list("kind", flat=True)) == [EventKind.ADMITTED]
    record = SchedulingPass.objects.get()
    assert (record.jobs_considered, record.placed_within_quota, record.trigger) == (1, 1, "test")


def test_pass_writes_borrowing_and_fallback_events(queue):
    nlp = share_with(queue, "nlp", {P5: 2}, strategy=QuotaShare.Strategy.LEND_AND_BORROW)
    share_with(
        queue, "vision", {P5: 5, P4: 8}, strategy=QuotaShare.Strategy.RESERVE
    )  # P4 all RESERVEd, 1 P5 free
    job = job_in(nlp, [(P4, 2), (P5, 3)])
    run_pass(queue)
    job.refresh_from_db()
    assert (job.selected_instance_type.name, job.borrowed_instances) == (P5, 1)
    kinds = set(job.events.values_list("kind", flat=True))
    assert kinds == {EventKind.ADMITTED, EventKind.BORROWED, EventKind.FALLBACK}
    record = SchedulingPass.objects.get()
    assert (record.placed_borrowing, record.fallbacks) == (1, 1)


def test_pass_reclaim_returns_the_borrower_to_the_queue_and_names_both_sides(queue):
    lender = share_with(queue, "nlp", {P5: 4}, strategy=QuotaShare.Strategy.LEND)
    borrower = share_with(queue, "vision", {P5: 4}, strategy=QuotaShare.Strategy.LEND_AND_BORROW)
    borrowing = job_in(borrower, [(P5, 8)], name="big")
    run_pass(queue)
    borrowing.refresh_from_db()
    assert borrowing.borrowed_instances == 4
    claimant = job_in(lender, [(P5, 2)], name="mine")
    result = run_pass(queue)
    borrowing.refresh_from_db()
    claimant.refresh_from_db()
    assert result.preempted == [borrowing.pk] and result.admitted == [claimant.pk]
    assert borrowing.status == JobStatus.RUNNABLE and borrowing.preemption_count == 1
    assert borrowing.selected_instance_type is None and borrowing.queue_position == 1
    assert borrowing.status_reason  # a reason a person can act on
    event = Event.objects.get(kind=EventKind.PREEMPTED_RECLAIM)
    assert (event.job_id, event.other_job_id, event.quota_share_id, event.other_share_id) == (
        borrowing.pk,
        claimant.pk,
        borrower.pk,
        lender.pk,
    )
    assert "nlp" in event.message and "vision" in event.message
    closed = JobAttempt.objects.get(job=borrowing)
    assert closed.stopped_at is not None and closed.status_reason.startswith("PREEMPTED_RECLAIM: ")


def test_pass_fails_a_job_whose_preemption_retries_are_exhausted(queue):
    lender = share_with(queue, "nlp", {P5: 4}, strategy=QuotaShare.Strategy.LEND)
    borrower = share_with(queue, "vision", {P5: 4}, strategy=QuotaShare.Strategy.LEND_AND_BORROW)
    borrowing = job_in(borrower, [(P5, 8)], preemption_retries_before_termination=0)
    run_pass(queue)
    job_in(lender, [(P5, 1)])
    run_pass(queue)
    borrowing.refresh_from_db()
    assert borrowing.status == JobStatus.FAILED
    assert borrowing.status_reason.startswith("PREEMPTION_RETRIES_EXHAUSTED")
    assert borrowing.stopped_at is not None


def test_pass_drains_a_job_from_an_expiring_plan_and_falls_back(queue, settings):
    settings.PLAN_DRAIN_SECONDS = 1800
    nlp = share_with(queue, "nlp", {P5: 4})
    plan = plan_for(queue, "dec-p5", P5, 4, starts_in=timedelta(days=-1), lasts=timedelta(days=2))
    job = job_in(nlp, [(P5, 2, plan), (P5, 2)])
    run_pass(queue)
    job.refresh_from_db()
    assert job.selected_training_plan_id == plan.pk
    plan.end_time = timezone.now() + timedelta(minutes=10)
    plan.save()
    run_pass(queue)
    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED and job.selected_training_plan_id is None
    assert job.preemption_count == 0
    assert job.events.filter(kind=EventKind.PLAN_EXPIRING).exists()
    first, second = JobAttempt.objects.filter(job=job).order_by("id")
    assert first.status_reason.startswith("TRAINING_PLAN_EXPIRING") and second.stopped_at is None


def test_pass_fails_a_job_pending_past_its_max_pending_seconds(queue):
    nlp = share_with(queue, "nlp", {P5: 1})
    job = job_in(nlp, [(P5, 1)])
    job_in(
        nlp,
        [(P5, 1)],
        name="late",
        max_pending_seconds=60,
        runnable_since=timezone.now() - timedelta(minutes=5),
    )
    run_pass(queue)
    late = Job.objects.get(name="late")
    assert late.status == JobStatus.FAILED and late.status_reason.startswith("PENDING_TIMEOUT")
    assert Job.objects.get(pk=job.pk).status == JobStatus.SCHEDULED
    assert SchedulingPass.objects.get().timeouts == 1


def test_pass_writes_why_pending_and_queue_positions(queue):
    nlp = share_with(queue, "nlp", {P5: 2})
    job_in(nlp, [(P5, 2)], name="first")
    second = job_in(nlp, [(P5, 2)], name="second")
    third = job_in(nlp, [(P5, 1)], name="third")
    run_pass(queue)
    second.refresh_from_db()
    third.refresh_from_db()
    assert (second.queue_position, third.queue_position) == (1, 2)
    assert second.current_reason == "ml.p5.48xlarge x2: share nlp at its limit 2/2 and RESERVE cannot borrow"


def test_a_waiting_job_keeps_its_transition_reason_beside_why_it_waits(queue):
    lender = share_with(queue, "nlp", {P5: 4}, strategy=QuotaShare.Strategy.LEND)
    borrower = share_with(queue, "vision", {P5: 4}, strategy=QuotaShare.Strategy.LEND_AND_BORROW)
    borrowing = job_in(borrower, [(P5, 8)], name="big")
    run_pass(queue)
    job_in(lender, [(P5, 2)], name="mine")
    run_pass(queue)
    borrowing = Job.objects.select_related("pending").get(pk=borrowing.pk)
    assert borrowing.status_reason.startswith("PREEMPTED_RECLAIM: ")
    assert borrowing.current_reason == borrowing.pending.status_reason
    assert not borrowing.current_reason.startswith("PREEMPTED")


def test_pass_removes_the_pending_state_of_jobs_it_places_and_rewrites_only_changes(queue):
    nlp = share_with(queue, "nlp", {P5: 1})
    first = job_in(nlp, [(P5, 1)], name="first")
    second = job_in(nlp, [(P5, 1)], name="second")
    third = job_in(nlp, [(P5, 1)], name="third")
    run_pass(queue)
    assert set(PendingState.objects.values_list("job_id", "queue_position")) == {
        (second.pk, 1),
        (third.pk, 2),
    }
    executor_services.job_report(job_id=first.pk, status=JobStatus.SUCCEEDED, actor=None)
    run_pass(queue)
    assert list(PendingState.objects.values_list("job_id", "queue_position")) == [(third.pk, 1)]
    assert Job.objects.get(pk=second.pk).status == JobStatus.SCHEDULED
    assert Job.objects.get(pk=second.pk).queue_position is None


def test_cancelling_a_waiting_job_removes_its_pending_state(queue):
    nlp = share_with(queue, "nlp", {P5: 1})
    job_in(nlp, [(P5, 1)])
    waiting = job_in(nlp, [(P5, 1)])
    run_pass(queue)
    assert PendingState.objects.filter(job=waiting).exists()
    job_services.job_cancel(job_id=waiting.pk, actor=None)
    waiting.refresh_from_db()
    assert not PendingState.objects.filter(job=waiting).exists()
    assert waiting.current_reason == "cancelled by system" and waiting.queue_position is None


def test_a_settled_queue_pass_changes_nothing(queue, django_assert_max_num_queries):
    nlp = share_with(queue, "nlp", {P5: 1})
    job_in(nlp, [(P5, 1)])
    job_in(nlp, [(P5, 1)])
    run_pass(queue)
    events = Event.objects.count()
    # lock, 9 reads, 3 budget reads, the sample check, the pass record, the duration histogram (2),
    # savepoint: no writes
    with django_assert_max_num_queries(18):
        result = run_pass(queue)
    assert result.admitted == [] and Event.objects.count() == events


def pass_query_count(name: str, jobs: int) -> int:
    queue = JobQueueFactory(name=name)
    environment_with(queue, {P5: 8, P4: 8})
    nlp = share_with(queue, f"{name}-nlp", {P5: 4}, strategy=QuotaShare.Strategy.LEND)
    vision = share_with(queue, f"{name}-vision", {P5: 4}, strategy=QuotaShare.Strategy.LEND_AND_BORROW)
    for i in range(jobs):
        job_in(vision if i % 2 else nlp, [(P5, 1), (P4, 1)], name=f"j{i}")
    with CaptureQueriesContext(connection) as captured:
        run_pass(queue)
    return len(captured)


def test_pass_query_count_does_not_grow_with_jobs():
    small, large = pass_query_count("small", 12), pass_query_count("large", 120)
    # lock, 9 reads, 3 budget reads, bulk writes of jobs, attempts, events and meters, the pass record: fixed,
    # whatever the jobs
    assert small == large <= 30


def synthetic_pass_statements(*, runnable: int, placed: int) -> int:
    """Statements of a first pass over the benchmark's synthetic busy queue, written as rows."""
    bench_cleanup()
    queue = materialize(
        synthetic.build_synthetic_snapshot(runnable=runnable, placed=placed, shares=20, types=5, seed=7)
    )
    with CaptureQueriesContext(connection) as captured:
        result = run_pass(queue)
    assert result.admitted and result.preempted  # the writes that once split per 999 values all happened
    return len(captured)


def test_pass_statements_are_the_same_at_1200_and_12000_jobs(monkeypatch):
    # SQLite allows 999 values per statement: 12,000 jobs' reasons and events once took 92 statements, not 30
    few_rows = synthetic_pass_statements(runnable=1_000, placed=200)
    # On PostgreSQL an update of few rows carries its values (1 statement), of many goes through a staging
    # table (4 more): with every update staged, the most a pass issues, the count is the same at both sizes.
    monkeypatch.setattr(bulk, "SMALL_UPDATE_ROWS", 0)
    small = synthetic_pass_statements(runnable=1_000, placed=200)
    large = synthetic_pass_statements(runnable=10_000, placed=2_000)
    # (39: the budgets' 3 reads and the consumption and meter upserts, the attempt limits' and tasks'
    # housekeeping, and the pending clauses' read, insert and removal, beside the 30 of the rest)
    assert few_rows <= small == large <= 39


def test_disabled_queue_places_nothing_and_says_so(queue):
    nlp = share_with(queue, "nlp", {P5: 1})
    job = job_in(nlp, [(P5, 1)])
    queue.state = "DISABLED"
    queue.save()
    run_pass(queue)
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNABLE and "disabled" in job.current_reason


def test_pass_samples_utilization_at_most_once_per_interval(queue, settings):
    from scheduling.models import ShareUsageSample

    settings.SAMPLE_INTERVAL_SECONDS = 30
    share_with(queue, "nlp", {P5: 4}, strategy=QuotaShare.Strategy.LEND)
    borrower = share_with(queue, "vision", {P5: 2}, strategy=QuotaShare.Strategy.LEND_AND_BORROW)
    job_in(borrower, [(P5, 6)])
    job_in(borrower, [(P5, 8)], name="waits")
    run_pass(queue)
    run_pass(queue)
    samples = {s.quota_share.name: s for s in ShareUsageSample.objects.select_related("quota_share")}
    assert ShareUsageSample.objects.count() == 2
    assert (samples["vision"].usage, samples["vision"].borrowed, samples["vision"].pending) == (6, 4, 1)
    # 2 of the 4 borrowed come from the free pool (8 - 4 - 2), the other 2 from nlp's idle capacity
    assert (samples["nlp"].usage, samples["nlp"].lent) == (0, 2)


def test_the_usage_sample_counts_a_lender_as_lending_at_most_its_lending_limit(queue, settings):
    from scheduling.models import ShareCapacityLimit, ShareUsageSample

    share_with(queue, "nlp", {P5: 4}, strategy=QuotaShare.Strategy.LEND)
    speech = share_with(queue, "speech", {P5: 2}, strategy=QuotaShare.Strategy.LEND)
    ShareCapacityLimit.objects.filter(quota_share=speech).update(lending_limit=0)
    borrower = share_with(queue, "vision", {P5: 2}, strategy=QuotaShare.Strategy.LEND_AND_BORROW)
    job_in(borrower, [(P5, 4)])
    run_pass(queue)
    samples = {s.quota_share.name: s for s in ShareUsageSample.objects.select_related("quota_share")}
    assert samples["vision"].borrowed == 2
    # speech keeps its 2 idle P5 (lending limit 0): the 2 borrowed are nlp's, though both are idle
    assert (samples["nlp"].lent, samples["speech"].lent) == (2, 0)


def test_history_prune_keeps_recent_rows(queue, settings):
    from scheduling.models import ShareUsageSample

    settings.HISTORY_DAYS = 8
    share_with(queue, "nlp", {P5: 1})
    run_pass(queue)
    assert history.history_prune() == 0
    # one sample (nlp, P5) and one pass record
    assert history.history_prune(now=timezone.now() + timedelta(days=9)) == 2
    assert not ShareUsageSample.objects.exists() and not SchedulingPass.objects.exists()


def test_the_garbage_collector_waits_while_the_queue_is_locked_and_resumes_after(queue, monkeypatch):
    seen = []
    execute = passes.pass_execute

    def watched(**kwargs):
        seen.append(gc.isenabled())
        return execute(**kwargs)

    monkeypatch.setattr(passes, "pass_execute", watched)
    job_in(share_with(queue, "nlp", {P5: 4}), [(P5, 2)])
    assert gc.isenabled()

    run_pass(queue)

    assert seen == [False] and gc.isenabled()


def test_the_garbage_collector_resumes_after_a_failed_pass(queue, monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("engine broke")

    monkeypatch.setattr(passes, "pass_execute", broken)

    with pytest.raises(RuntimeError):
        run_pass(queue)

    assert gc.isenabled()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the loader is psycopg's")
def test_the_snapshot_loads_datetimes_with_psycopgs_own_loader_in_djangos_zone():
    import psycopg
    from psycopg.pq import Format

    from scheduling.passes.snapshot import datetimes_loaded_in_c

    oid = psycopg.postgres.types["timestamptz"].oid
    with connection.cursor() as cursor:
        datetimes_loaded_in_c(cursor)
        assert cursor.cursor.adapters.get_loader(oid, Format.TEXT) is psycopg.adapters.get_loader(
            oid, Format.TEXT
        )
        cursor.execute("SELECT TIMESTAMPTZ '2026-01-02 03:04:05.678+02'")
        (moment,) = cursor.fetchone()
    assert moment == datetime(2026, 1, 2, 1, 4, 5, 678000, tzinfo=UTC)
    assert moment.tzinfo == connection.timezone


def test_the_snapshot_reads_jobs_as_the_queryset_would(queue):
    from scheduling.passes.snapshot import snapshot_querysets, values_rows

    nlp = share_with(queue, "nlp", {P5: 2})
    for i in range(4):
        job_in(nlp, [(P5, 1)], name=f"j{i}")
    run_pass(queue)  # two placed (scheduled_at, attempts), two waiting with reasons and positions
    Job.objects.filter(job_queue=queue, status=JobStatus.RUNNABLE).update(
        nominated_entry=0, nominated_victims=[3]
    )
    jobs = snapshot_querysets(job_queue=queue)["jobs"]
    rows = values_rows(jobs)
    assert rows == list(jobs) and len(rows) == 4
    # Each row has its own lists, empty or not, as the queryset gives them: changing one changes no other.
    for column in ("nominated_victims", "retry_rules"):
        lists = [row[JOB_COLUMNS.index(column)] for row in rows]
        assert all(type(value) is list for value in lists)
        assert len({id(value) for value in lists}) == len(lists)
    assert {type(row[JOB_COLUMNS.index("created_at")]) for row in rows} == {type(timezone.now())}
    assert rows[0][JOB_COLUMNS.index("created_at")].tzinfo is not None
    # On PostgreSQL the rows' datetimes come from psycopg's C loader, the queryset's from Django's: same zone.
    moments = [
        i for i, column in enumerate(JOB_COLUMNS) if column.endswith("_at") or column == "runnable_since"
    ]
    assert [[row[i] and row[i].tzinfo for i in moments] for row in rows] == [
        [row[i] and row[i].tzinfo for i in moments] for row in jobs
    ]
