from django.db import migrations


def set_fillfactor(apps, schema_editor):
    # Passes rewrite pending jobs' reasons and queue positions (columns no index covers) every few seconds.
    # Free room in each page lets PostgreSQL update those rows in place (HOT) without touching the indexes.
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE scheduling_job SET (fillfactor = 70)")


def reset_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE scheduling_job RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0001_initial")]
    operations = [migrations.RunPython(set_fillfactor, reset_fillfactor)]
