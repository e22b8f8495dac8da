# The job's queue and share links become SET_NULL (names kept since 0007); an unfinished job keeps both.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0007_jobs_and_events_outlive_configuration"),
    ]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="job_queue",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="jobs",
                to="scheduling.jobqueue",
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="quota_share",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="jobs",
                to="scheduling.quotashare",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", ["SUCCEEDED", "FAILED", "CANCELLED"]))
                | models.Q(("job_queue__isnull", False), ("quota_share__isnull", False)),
                name="job_unfinished_has_queue_and_share",
            ),
        ),
    ]
