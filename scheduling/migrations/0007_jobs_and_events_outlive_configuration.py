# Jobs outlive their queue and share (SET_NULL links, the names kept on the job), and every event keeps the
# team of its job for good (issue 14, items 1 and 2): the new columns and their backfill. The links become
# nullable in 0008, in a transaction of its own (PostgreSQL alters no table with pending trigger events).

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Q, Subquery


def names_and_teams_backfill(apps, schema_editor):
    Job = apps.get_model("scheduling", "Job")
    JobQueue = apps.get_model("scheduling", "JobQueue")
    QuotaShare = apps.get_model("scheduling", "QuotaShare")
    Event = apps.get_model("scheduling", "Event")
    Job.objects.update(
        job_queue_name=Subquery(JobQueue.objects.filter(pk=OuterRef("job_queue_id")).values("name")[:1]),
        quota_share_name=Subquery(
            QuotaShare.objects.filter(pk=OuterRef("quota_share_id")).values("name")[:1]
        ),
    )
    Event.objects.filter(job__isnull=False).update(
        team_id=Subquery(Job.objects.filter(pk=OuterRef("job_id")).values("team_id")[:1])
    )
    # A job event whose job a cascade already deleted: its share's team, if the share is still there. Those
    # left without a team are read by staff only (scheduling.selectors.events.events_visible_to).
    Event.objects.filter(
        Q(team__isnull=True, job__isnull=True, quota_share__isnull=False)
        & (~Q(kind="CONFIG_CHANGED") | Q(data__object="scheduling.Job"))
    ).update(team_id=Subquery(QuotaShare.objects.filter(pk=OuterRef("quota_share_id")).values("team_id")[:1]))


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0006_whatifrun_moved"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="job_queue_name",
            field=models.CharField(default="", max_length=128),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="job",
            name="quota_share_name",
            field=models.CharField(default="", max_length=128),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="event",
            name="team",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="scheduling.team",
            ),
        ),
        migrations.RunPython(names_and_teams_backfill, migrations.RunPython.noop),
    ]
