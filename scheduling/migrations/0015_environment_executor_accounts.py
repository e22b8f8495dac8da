from django.conf import settings
from django.db import migrations, models
from django.db.models import Q


def link_existing_executor_accounts(apps, schema_editor):
    """Each account holding report_job_status (directly or by group) keeps serving every external environment.

    Before this migration such an account could act on any environment; linking it to all the external ones
    keeps running agents working. Admins then narrow the links on each environment's edit form.
    """
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    ServiceEnvironment = apps.get_model("scheduling", "ServiceEnvironment")
    held = Q(
        user_permissions__codename="report_job_status", user_permissions__content_type__app_label="scheduling"
    )
    by_group = Q(
        groups__permissions__codename="report_job_status",
        groups__permissions__content_type__app_label="scheduling",
    )
    accounts = list(User.objects.filter(held | by_group).distinct())
    for environment in ServiceEnvironment.objects.filter(executor="external"):
        environment.executor_accounts.add(*accounts)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0014_event_other_job_index"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="serviceenvironment",
            name="executor_accounts",
            field=models.ManyToManyField(
                blank=True,
                help_text="Executor accounts that may take work from this environment and report on its jobs.",
                related_name="served_environments",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.RunPython(link_existing_executor_accounts, migrations.RunPython.noop),
    ]
