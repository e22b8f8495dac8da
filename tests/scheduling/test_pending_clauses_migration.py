"""Migration 0025: the pending reasons already stored become clauses and read back word for word; and back."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from scheduling.models import PendingState

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("scheduling", "0024_event_kinds_relocating")]
AFTER = [("scheduling", "0025_pending_clauses")]
REASONS = [
    "ml.p5.48xlarge x4: share nlp at its limit 4/4 and RESERVE cannot borrow; "
    "ml.p4d.24xlarge x9: needs more than the environment's 8 instances",
    "ml.p5.48xlarge x4: share nlp at its limit 4/4 and RESERVE cannot borrow",
    "share nlp is disabled: its RUNNABLE jobs are not placed until it is enabled",
    "held by STRICT_FIFO behind job #3; which cannot be placed yet",  # a "; " inside one reason too
]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_existing_reasons_become_clauses_and_read_the_same():
    old = migrate(BEFORE)
    try:
        Environment = old.get_model("scheduling", "ServiceEnvironment")
        Queue = old.get_model("scheduling", "JobQueue")
        Team = old.get_model("scheduling", "Team")
        Share = old.get_model("scheduling", "QuotaShare")
        Job = old.get_model("scheduling", "Job")
        OldPending = old.get_model("scheduling", "PendingState")
        team = Team.objects.create(name="NLP", slug="nlp")
        ids = {}
        for name in ("training", "research"):
            environment = Environment.objects.create(name=f"{name}-fleet")
            queue = Queue.objects.create(name=name, service_environment=environment)
            share = Share.objects.create(name="nlp", job_queue=queue, team=team)
            for i, reason in enumerate(REASONS):
                job = Job.objects.create(
                    name=f"{name}-{i}", job_queue=queue, quota_share=share, team=team, status="RUNNABLE"
                )
                OldPending.objects.create(job=job, status_reason=reason, queue_position=i + 1)
                ids[job.pk] = reason

        migrate(AFTER)

        rows = {row.job_id: row for row in PendingState.objects.all()}
        assert {job_id: row.status_reason for job_id, row in rows.items()} == ids
        assert [row.queue_position for row in rows.values()] == [1, 2, 3, 4, 1, 2, 3, 4]
        # Shared within a queue: the first two reasons of a queue begin with the same clause.
        first, second = (rows[job_id].clauses.split() for job_id in sorted(rows)[:2])
        assert first[0] == second[0] and len(first) == 2 and len(second) == 1

        back = migrate(BEFORE)
        restored = dict(
            back.get_model("scheduling", "PendingState").objects.values_list("job_id", "status_reason")
        )
        assert restored == ids
    finally:
        migrate(AFTER)
