"""GPU-hour budgets through the pass: consumption metered as jobs hold instances, the budget's state in the
snapshot, jobs held back with the reason, BUDGET_WARNING and BUDGET_EXHAUSTED once a period."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from types import SimpleNamespace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from engine import schedule as engine_schedule
from scheduling.models import (
    Event,
    EventKind,
    Job,
    JobStatus,
    QuotaShare,
    ServiceEnvironment,
    ShareConsumption,
)
from scheduling.passes import run as passes
from scheduling.passes.budgets import budgets_apply, budgets_read
from scheduling.passes.snapshot import snapshot_load
from tests.factories import JobQueueFactory, environment_with, job_in, plan_for, share_with
from tests.scheduling.support import run_pass

pytestmark = pytest.mark.django_db

P5 = "ml.p5.48xlarge"  # 8 GPUs (the factory's default)
START = datetime(2026, 12, 30, 22, 0, tzinfo=UTC)


@pytest.fixture
def clock(monkeypatch):
    moment = [START]
    monkeypatch.setattr(passes, "timezone", SimpleNamespace(now=lambda: moment[0]))
    return moment


@pytest.fixture
def queue():
    # Simulated: these passes span hours, past any start deadline an external executor's jobs would have.
    queue = JobQueueFactory(name="training")
    queue.service_environment.executor = ServiceEnvironment.Executor.SIMULATED
    queue.service_environment.save(update_fields=["executor"])
    environment_with(queue, {P5: 8})
    return queue


def used(share) -> Decimal:
    return sum((row.gpu_hours for row in ShareConsumption.objects.filter(quota_share=share)), Decimal(0))


def test_a_running_job_is_metered_as_instances_times_gpus_times_hours(queue, clock):
    nlp = share_with(queue, "nlp", {P5: 4})
    job_in(nlp, [(P5, 2)])
    run_pass(queue)
    clock[0] += timedelta(hours=1)
    run_pass(queue)
    assert used(nlp) == Decimal(16)
    clock[0] += timedelta(minutes=30)
    run_pass(queue)
    assert used(nlp) == Decimal(24)


def test_consumption_is_cut_at_midnight_into_each_days_row(queue, clock):
    nlp = share_with(queue, "nlp", {P5: 4})
    job_in(nlp, [(P5, 1)])
    run_pass(queue)
    clock[0] += timedelta(hours=3)  # 22:00 to 01:00 the next day
    run_pass(queue)
    by_day = dict(ShareConsumption.objects.filter(quota_share=nlp).values_list("day", "gpu_hours"))
    assert by_day == {date(2026, 12, 30): Decimal(16), date(2026, 12, 31): Decimal(8)}


def test_training_plans_are_not_metered(queue, clock):
    nlp = share_with(queue, "nlp", {P5: 4})
    dec = plan_for(queue, "dec-p5", P5, 4, lasts=timedelta(days=60))
    job_in(nlp, [(P5, 2, dec)])
    run_pass(queue)
    clock[0] += timedelta(hours=2)
    run_pass(queue)
    assert used(nlp) == 0


def test_a_spent_budget_holds_new_jobs_back_and_records_warning_and_exhaustion_once(queue, clock):
    nlp = share_with(queue, "nlp", {P5: 8}, budget_gpu_hours=Decimal(20), budget_period="MONTH")
    job_in(nlp, [(P5, 2)], name="first")
    run_pass(queue)
    clock[0] += timedelta(hours=1)  # 16 of 20: 80%
    second = job_in(nlp, [(P5, 2)], name="second")
    run_pass(queue)
    second.refresh_from_db()
    assert second.status == JobStatus.SCHEDULED
    kinds = list(Event.objects.filter(quota_share=nlp, job=None).values_list("kind", flat=True))
    assert kinds == [EventKind.BUDGET_WARNING]
    clock[0] += timedelta(minutes=10)  # 16 + 32/6 = 21.3: spent
    third = job_in(nlp, [(P5, 1)], name="third")
    run_pass(queue)
    third.refresh_from_db()
    assert third.status == JobStatus.RUNNABLE
    assert third.current_reason == (
        "share nlp: budget of 20 GPU-hours for December spent (21.3); resets 2027-01-01 00:00 UTC"
    )
    clock[0] += timedelta(minutes=10)
    run_pass(queue)
    kinds = sorted(Event.objects.filter(quota_share=nlp, job=None).values_list("kind", flat=True))
    assert kinds == [EventKind.BUDGET_EXHAUSTED, EventKind.BUDGET_WARNING]
    exhausted = Event.objects.get(kind=EventKind.BUDGET_EXHAUSTED)
    assert exhausted.team_id == nlp.team_id
    assert exhausted.message == (
        "share nlp has spent its budget of 20 GPU-hours for December (21.3): it starts no new job until "
        "2027-01-01 00:00 UTC"
    )
    # Nothing running is stopped for a budget.
    assert Job.objects.filter(quota_share=nlp, status=JobStatus.SCHEDULED).count() == 2


def test_a_new_period_resets_the_budget_and_its_events(queue, clock):
    nlp = share_with(queue, "nlp", {P5: 8}, budget_gpu_hours=Decimal(10), budget_period="DAY")
    job_in(nlp, [(P5, 1)], name="first")
    run_pass(queue)
    clock[0] += timedelta(hours=1, minutes=30)  # 12 GPU-hours on 30 December: spent
    waiting = job_in(nlp, [(P5, 1)], name="second")
    run_pass(queue)
    waiting.refresh_from_db()
    assert waiting.status == JobStatus.RUNNABLE and "resets 2026-12-31 00:00 UTC" in waiting.current_reason
    clock[0] = datetime(2026, 12, 31, 0, 5, tzinfo=UTC)  # the new day: 0.7 GPU-hours since midnight
    run_pass(queue)
    waiting.refresh_from_db()
    assert waiting.status == JobStatus.SCHEDULED
    assert Event.objects.filter(kind=EventKind.BUDGET_EXHAUSTED).count() == 1


def test_a_borrowed_budget_counts_only_what_is_held_above_the_limit(queue, clock):
    vision = share_with(
        queue,
        "vision",
        {P5: 2},
        strategy=QuotaShare.Strategy.LEND_AND_BORROW,
        budget_gpu_hours=Decimal(16),
        budget_scope="BORROWED",
    )
    share_with(queue, "nlp", {P5: 6}, strategy=QuotaShare.Strategy.LEND)
    job_in(vision, [(P5, 3)], name="borrows-one")
    run_pass(queue)
    clock[0] += timedelta(hours=2)  # 3 held, 1 above the limit: 16 GPU-hours borrowed, 48 in all
    within, borrowing = job_in(vision, [(P5, 1)], name="within"), job_in(vision, [(P5, 2)], name="borrowing")
    run_pass(queue)
    [book_budget] = budgets_read(job_queue_id=queue.pk, now=clock[0]).budgets.values()
    assert book_budget.used_gpu_hours == Decimal(16) and used(vision) == Decimal(48)
    # The share is at 3 of its limit 2: one more instance would borrow, so nothing more is placed.
    within.refresh_from_db()
    borrowing.refresh_from_db()
    assert within.status == JobStatus.RUNNABLE and borrowing.status == JobStatus.RUNNABLE
    assert (
        "borrows no more: budget of 16 GPU-hours on borrowing for December spent (16)"
        in within.current_reason
    )


def test_reading_the_budgets_does_not_grow_with_the_history(queue, clock):
    nlp = share_with(queue, "nlp", {P5: 8}, budget_gpu_hours=Decimal(1000))
    job_in(nlp, [(P5, 1)])
    run_pass(queue)
    p5 = nlp.capacity_limits.get().instance_type
    ShareConsumption.objects.bulk_create(
        ShareConsumption(
            quota_share=nlp, instance_type=p5, day=date(2025, 1, 1) + timedelta(days=d), gpu_hours=5
        )
        for d in range(600)
    )
    clock[0] += timedelta(hours=1)
    with CaptureQueriesContext(connection) as captured:
        book = budgets_read(job_queue_id=queue.pk, now=clock[0])
    assert len(captured) == 3
    # Only this month's rows count: 8 GPU-hours of the running job, none of the 600 older days.
    assert book.budgets[nlp.pk].used_gpu_hours == Decimal(8)


def test_a_queue_that_holds_nothing_writes_no_meter(queue, clock, django_assert_max_num_queries):
    share_with(queue, "nlp", {P5: 8}, budget_gpu_hours=Decimal(10))
    run_pass(queue)
    clock[0] += timedelta(hours=1)
    with CaptureQueriesContext(connection) as captured:
        run_pass(queue)
    assert not [q for q in captured if "meter" in q["sql"].lower() and "insert" in q["sql"].lower()]


def test_the_queue_is_due_for_a_pass_when_a_budget_will_reach_80_and_100_percent(queue, clock):
    from scheduling.passes.budgets import budgets_due
    from scheduling.passes.write import usage_after

    share_with(queue, "nlp", {P5: 8}, budget_gpu_hours=Decimal(100))
    job_in(queue.quota_shares.get(), [(P5, 1)])
    run_pass(queue)  # 8 GPUs from now: 80 GPU-hours in 10 hours, 100 in 12.5
    clock[0] += timedelta(hours=1)
    book = budgets_read(job_queue_id=queue.pk, now=clock[0])
    snap = budgets_apply(snapshot_load(job_queue=queue, now=clock[0])[0], book)
    usage = usage_after(snap, engine_schedule(snap))
    assert budgets_due(book=book, snap=snap, usage=usage) == clock[0] + timedelta(hours=9, seconds=1)
