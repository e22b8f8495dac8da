"""A pass writes a job's pending row only when its reason or queue position changed since the last pass."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.models import Job, JobStatus, PendingClause, PendingState, ShareCapacityLimit
from scheduling.services import executor as executor_services
from scheduling.services import jobs as job_services
from tests.factories import job_in, share_with
from tests.scheduling.support import P4, P5, run_pass

pytestmark = pytest.mark.django_db

MARK = datetime(2026, 1, 1, tzinfo=UTC)


def marked() -> set[int]:
    """Mark every pending row as an estimate run would; a row the pass rewrites comes back without it."""
    PendingState.objects.update(estimated_at=MARK, estimate_basis="mark")
    return set(PendingState.objects.values_list("job_id", flat=True))


def still_marked() -> set[int]:
    return set(PendingState.objects.filter(estimated_at=MARK).values_list("job_id", flat=True))


def pending_writes(captured) -> list[str]:
    """The statements that wrote pending rows (Django logs an executemany as `N times: <sql>`)."""
    writes = ("INSERT", "UPDATE", "DELETE", "COPY")
    statements = [re.sub(r"^\d+ times: ", "", query["sql"]).lstrip() for query in captured.captured_queries]
    return [sql for sql in statements if "scheduling_pendingstate" in sql and sql.upper().startswith(writes)]


def test_a_pass_that_finds_the_same_reasons_writes_no_pending_row(queue):
    nlp = share_with(queue, "nlp", {P5: 2, P4: 1})
    job_in(nlp, [(P5, 2)], name="placed")
    waiting = [job_in(nlp, [(P5, 2), (P4, 2)], name=f"waits-{i}") for i in range(3)]
    run_pass(queue)
    assert marked() == {job.pk for job in waiting}
    reasons = {row.job_id: row.status_reason for row in PendingState.objects.all()}

    with CaptureQueriesContext(connection) as captured:
        run_pass(queue)

    assert pending_writes(captured) == []
    assert still_marked() == {job.pk for job in waiting}
    assert {row.job_id: row.status_reason for row in PendingState.objects.all()} == reasons


def test_a_changed_reason_is_rewritten_and_the_unchanged_ones_are_not(queue):
    nlp = share_with(queue, "nlp", {P5: 2})
    vision = share_with(queue, "vision", {P4: 2})
    job_in(nlp, [(P5, 2)], name="nlp-placed")
    job_in(vision, [(P4, 2)], name="vision-placed")
    nlp_waits = job_in(nlp, [(P5, 2)], name="nlp-waits")
    vision_waits = job_in(vision, [(P4, 2)], name="vision-waits")
    run_pass(queue)
    marked()
    before = Job.objects.select_related("pending").get(pk=nlp_waits.pk).current_reason
    assert before == "ml.p5.48xlarge x2: share nlp at its limit 2/2 and RESERVE cannot borrow"

    ShareCapacityLimit.objects.filter(quota_share=nlp).update(max_capacity=3)
    with CaptureQueriesContext(connection) as captured:
        run_pass(queue)

    after = Job.objects.select_related("pending").get(pk=nlp_waits.pk)
    assert after.current_reason == (
        "ml.p5.48xlarge x2: share nlp has 1 left of its limit (2/3) and RESERVE cannot borrow"
    )
    assert after.pending.estimated_at is None  # rewritten: the estimate of the old row went with it
    assert still_marked() == {vision_waits.pk}
    assert pending_writes(captured) != []


def test_a_job_whose_position_changes_is_rewritten_with_its_new_position(queue):
    nlp = share_with(queue, "nlp", {P5: 1})
    first = job_in(nlp, [(P5, 1)], name="first")
    second = job_in(nlp, [(P5, 1)], name="second")
    third = job_in(nlp, [(P5, 1)], name="third")
    run_pass(queue)
    marked()
    executor_services.job_report(job_id=first.pk, status=JobStatus.SUCCEEDED, actor=None)

    run_pass(queue)

    # second was placed and left RUNNABLE: its row went; third moved up from 2 to 1 and was rewritten.
    assert list(PendingState.objects.values_list("job_id", "queue_position")) == [(third.pk, 1)]
    assert still_marked() == set()
    second = Job.objects.select_related("pending").get(pk=second.pk)
    assert second.status == JobStatus.SCHEDULED and second.waiting is None
    assert second.current_reason == second.status_reason and second.current_reason.startswith("placed on")


def test_jobs_waiting_for_the_same_reason_share_its_clauses_and_unused_ones_go_a_pass_later(queue):
    nlp = share_with(queue, "nlp", {P5: 2})
    job_in(nlp, [(P5, 2)], name="placed")
    waiting = [job_in(nlp, [(P5, 2), (P4, 9)], name=f"waits-{i}") for i in range(3)]
    run_pass(queue)
    rows = list(PendingState.objects.order_by("job_id"))
    assert len({row.clauses for row in rows}) == 1 and len(rows[0].clauses.split()) == 2
    assert PendingClause.objects.filter(job_queue=queue).count() == 2
    old = set(PendingClause.objects.values_list("text", flat=True))
    assert old == {
        "ml.p5.48xlarge x2: share nlp at its limit 2/2 and RESERVE cannot borrow",
        "ml.p4d.24xlarge x9: needs more than the environment's 8 instances",
    }

    ShareCapacityLimit.objects.filter(quota_share=nlp).update(max_capacity=3)
    run_pass(queue)
    # The new first clause is added; the old one stays for a page that read a row before this pass.
    texts = set(PendingClause.objects.values_list("text", flat=True))
    assert old < texts and len(texts) == 3
    assert {row.status_reason for row in PendingState.objects.all()} == {
        "ml.p5.48xlarge x2: share nlp has 1 left of its limit (2/3) and RESERVE cannot borrow; "
        "ml.p4d.24xlarge x9: needs more than the environment's 8 instances"
    }

    run_pass(queue)
    assert set(PendingClause.objects.values_list("text", flat=True)) == texts - {
        "ml.p5.48xlarge x2: share nlp at its limit 2/2 and RESERVE cannot borrow"
    }
    for job in waiting:
        job_services.job_cancel(job_id=job.pk, actor=None)
    run_pass(queue)
    run_pass(queue)
    assert not PendingClause.objects.exists()
