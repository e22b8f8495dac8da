"""Pending reasons stored as shared clauses: `PendingState.status_reason` becomes `clauses`, ids of
`PendingClause` rows. Existing reasons are split into their clauses and back again on the way down."""

import hashlib

import django.db.models.deletion
from django.db import migrations, models

SEPARATOR = "; "
BATCH = 2000


def clause_id(job_queue_id, text):
    # As scheduling.models.pending_clause_id: the ids must be the ones a pass computes.
    digest = hashlib.blake2b(f"{job_queue_id}\n{text}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def reasons_to_clauses(apps, schema_editor):
    PendingState = apps.get_model("scheduling", "PendingState")
    PendingClause = apps.get_model("scheduling", "PendingClause")
    known = set()
    rows = PendingState.objects.values_list("job_id", "job__job_queue_id", "status_reason").order_by("job_id")
    updates, clauses = [], []
    for job_id, queue_id, reason in rows.iterator(chunk_size=BATCH):
        spelled = []
        for text in reason.split(SEPARATOR):
            found = clause_id(queue_id, text)
            if found not in known:
                known.add(found)
                clauses.append(PendingClause(id=found, job_queue_id=queue_id, text=text))
            spelled.append(f"{found:x}")
        updates.append(PendingState(job_id=job_id, clauses=" ".join(spelled)))
    PendingClause.objects.bulk_create(clauses, batch_size=BATCH)
    PendingState.objects.bulk_update(updates, ["clauses"], batch_size=BATCH)


def clauses_to_reasons(apps, schema_editor):
    PendingState = apps.get_model("scheduling", "PendingState")
    PendingClause = apps.get_model("scheduling", "PendingClause")
    words = dict(PendingClause.objects.values_list("id", "text"))
    updates = [
        PendingState(
            job_id=job_id, status_reason=SEPARATOR.join(words.get(int(part, 16), "") for part in clauses.split())
        )
        for job_id, clauses in PendingState.objects.values_list("job_id", "clauses").iterator(chunk_size=BATCH)
    ]
    PendingState.objects.bulk_update(updates, ["status_reason"], batch_size=BATCH)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0024_event_kinds_relocating"),
    ]

    operations = [
        migrations.CreateModel(
            name="PendingClause",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("text", models.TextField()),
                (
                    "job_queue",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="scheduling.jobqueue",
                    ),
                ),
            ],
        ),
        migrations.AddField(
            model_name="pendingstate",
            name="clauses",
            field=models.TextField(default=""),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="pendingstate",
            name="status_reason",
            field=models.TextField(default=""),
        ),
        migrations.RunPython(reasons_to_clauses, clauses_to_reasons),
        migrations.RemoveField(
            model_name="pendingstate",
            name="status_reason",
        ),
    ]
