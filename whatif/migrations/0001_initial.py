# The WhatIfRun model moved here from the scheduling app; its table keeps its name, so only the state moves.

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('scheduling', '0005_pendingstate'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name='WhatIfRun',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('source', models.CharField(choices=[('HISTORY', 'Recorded job history'), ('PHILLY', 'Philly trace')], max_length=16)),
                        ('window_start', models.DateTimeField()),
                        ('window_days', models.FloatField()),
                        ('window_end', models.DateTimeField()),
                        ('baseline', models.JSONField()),
                        ('proposal', models.JSONField()),
                        ('status', models.CharField(choices=[('QUEUED', 'Queued'), ('RUNNING', 'Running'), ('DONE', 'Done'), ('FAILED', 'Failed')], default='QUEUED', max_length=16)),
                        ('progress', models.FloatField(default=0)),
                        ('heartbeat_at', models.DateTimeField(blank=True, null=True)),
                        ('error', models.TextField(blank=True, default='')),
                        ('result', models.JSONField(blank=True, default=dict)),
                        ('charts', models.JSONField(blank=True, default=dict)),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('applied_at', models.DateTimeField(blank=True, null=True)),
                        ('applied_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('job_queue', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='whatif_runs', to='scheduling.jobqueue')),
                    ],
                    options={
                        'db_table': 'scheduling_whatifrun',
                        'ordering': ['-created_at', '-id'],
                        'constraints': [models.CheckConstraint(condition=models.Q(('progress__gte', 0), ('progress__lte', 1)), name='whatif_progress_range'), models.CheckConstraint(condition=models.Q(('window_end__gt', models.F('window_start'))), name='whatif_window_ends_after_start'), models.CheckConstraint(condition=models.Q(('status__in', ['QUEUED', 'RUNNING', 'DONE', 'FAILED'])), name='whatif_status_valid')],
                    },
                ),
            ],
        ),
    ]
