# WhatIfRun now lives in the whatif app (whatif/migrations/0001_initial.py) on the same table: state only.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0005_pendingstate'),
        ('whatif', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[migrations.DeleteModel(name='WhatIfRun')],
        ),
    ]
