"""`bench_pass --engine-only` times the engine on the synthetic snapshot alone, writing nothing."""

from io import StringIO

from django.core.management import call_command

from scheduling.models import Job
from tools.bench_pass.command import Command


def test_engine_only_times_both_sizes_and_writes_no_row(db):
    out = StringIO()
    call_command(Command(), "--engine-only", "--jobs", "300", "--placed", "60", "--repeat", "1", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("engine only: 300 RUNNABLE + 60 placed jobs")
    assert lines[1].lstrip().startswith("36 jobs: engine ")
    assert lines[2].lstrip().startswith("360 jobs: engine ")
    assert "for 10x the jobs" in lines[3]
    assert not Job.objects.exists()
