"""/healthz and /metrics for operators."""

from __future__ import annotations

from decimal import Decimal
from unittest import mock

import pytest
from django.utils import timezone

from scheduling.models import InstanceType, PassHistogramBucket, QuotaShare, ShareConsumption
from scheduling.passes import run as passes
from scheduling.passes.histogram import pass_histogram_observe
from tests.factories import JobQueueFactory, environment_with, job_in, share_with

pytestmark = pytest.mark.django_db

P5 = "ml.p5.48xlarge"


@pytest.fixture
def busy_queue():
    queue = JobQueueFactory(name="training")
    environment_with(queue, {P5: 8})
    lender = share_with(queue, "nlp", {P5: 4}, strategy=QuotaShare.Strategy.LEND)
    borrower = share_with(queue, "vision", {P5: 4}, strategy=QuotaShare.Strategy.LEND_AND_BORROW)
    job_in(borrower, [(P5, 8)])
    passes.queue_pass_run(job_queue_id=queue.pk)
    job_in(lender, [(P5, 2)])
    job_in(lender, [(P5, 4)], name="waits")
    passes.queue_pass_run(job_queue_id=queue.pk)
    return queue


def test_healthz_reports_database_and_broker(client):
    with mock.patch("ops.views._broker_ok", return_value="ok"):
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "broker": "ok"}


def test_healthz_is_503_naming_the_broken_part(client):
    with mock.patch("ops.views._broker_ok", return_value="error: OperationalError"):
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["broker"] == "error: OperationalError"


def test_metrics_expose_share_usage_preemptions_and_pass_durations(
    client, busy_queue, django_assert_max_num_queries
):
    # 12, the budgeted shares (1), and the start timeouts, lost tasks, relocations (2 each: counts, queues)
    # and claim-to-running (1)
    with django_assert_max_num_queries(20):
        body = client.get("/metrics").content.decode()
    assert 'quotaportal_start_timeouts_total{queue="training"} 0.0' in body
    assert 'quotaportal_tasks_lost_total{queue="training"} 0.0' in body
    assert 'quotaportal_relocations_total{queue="training"} 0.0' in body
    assert "quotaportal_claim_to_running_seconds_count 0.0" in body
    assert 'quotaportal_share_usage{instance_type="ml.p5.48xlarge",queue="training",share="nlp"} 2.0' in body
    assert (
        'quotaportal_share_limit{instance_type="ml.p5.48xlarge",queue="training",share="vision"} 4.0' in body
    )
    assert 'quotaportal_share_pending_jobs{queue="training",share="nlp"} 1.0' in body
    assert 'quotaportal_preemptions_total{kind="PREEMPTED_RECLAIM",queue="training"} 1.0' in body
    assert 'quotaportal_preemptions_total{kind="PREEMPTED_IN_SHARE",queue="training"} 0.0' in body
    assert 'quotaportal_pass_duration_seconds_count{queue="training"} 2.0' in body
    assert 'quotaportal_pass_duration_seconds_bucket{le="+Inf",queue="training"} 2.0' in body


def test_metrics_expose_each_budget_and_what_is_spent_of_it(
    client, busy_queue, django_assert_max_num_queries
):
    vision = QuotaShare.objects.get(name="vision")
    QuotaShare.objects.filter(pk=vision.pk).update(budget_gpu_hours=500, budget_scope="BORROWED")
    ShareConsumption.objects.update_or_create(
        quota_share=vision,
        instance_type=InstanceType.objects.get(name=P5),
        day=timezone.now().date(),
        defaults={"gpu_hours": 120, "borrowed_gpu_hours": Decimal("40.5")},
    )
    # 12, the budgets (4), the start timeouts, lost tasks, relocations (2 each) and claim-to-running (1)
    with django_assert_max_num_queries(23):
        body = client.get("/metrics").content.decode()
    labels = 'period="MONTH",queue="training",scope="BORROWED",share="vision"'
    assert f"quotaportal_share_budget_gpu_hours{{{labels}}} 500.0" in body
    # Only the borrowed part counts for a BORROWED budget (and vision still borrows: a little more by now).
    spent = float(body.split(f"quotaportal_share_budget_spent_gpu_hours{{{labels}}} ")[1].split()[0])
    assert 40.5 <= spent < 41


def test_pass_histogram_is_cumulative():
    queue = JobQueueFactory()
    pass_histogram_observe(job_queue_id=queue.pk, seconds=0.03)
    pass_histogram_observe(job_queue_id=queue.pk, seconds=3.0)
    buckets = dict(PassHistogramBucket.objects.filter(job_queue=queue).values_list("le", "count"))
    assert buckets[0.025] == 0 and buckets[0.05] == 1 and buckets[5.0] == 2 and buckets[None] == 2
    assert PassHistogramBucket.objects.get(job_queue=queue, le=None).sum_seconds == pytest.approx(3.03)


def test_metrics_token_is_required_when_configured(client, settings):
    settings.METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200


def test_every_decision_is_logged_with_queue_share_and_job(busy_queue, caplog):
    import logging

    from scheduling.models import Job

    waiting = Job.objects.get(name="waits")
    waiting.scheduling_priority = 5
    waiting.save()
    with caplog.at_level(logging.INFO, logger="quotaportal.scheduling.decisions"):
        Job.objects.filter(name="job").update(status="SUCCEEDED")  # free the capacity
        passes.queue_pass_run(job_queue_id=busy_queue.pk)
    admits = [r for r in caplog.records if getattr(r, "decision", None) == "admit"]
    assert admits and {(r.queue, r.share, r.job) for r in admits} >= {("training", "nlp", waiting.pk)}
