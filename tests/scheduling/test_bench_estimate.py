"""`bench_estimate` times the estimator on the synthetic queue, and with `--database` the estimate task on rows."""

import logging
import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduling.models import Job, JobQueue
from tools.bench_estimate.command import Command


def test_the_estimator_alone_is_timed_on_the_synthetic_queue(db):
    out = StringIO()
    call_command(Command(), "--runnable", "300", "--placed", "60", stdout=out)
    assert re.match(r"estimate: 300 RUNNABLE, 60 placed: [\d.]+ s CPU, .* engine passes", out.getvalue())
    assert not Job.objects.exists()


def test_the_task_is_timed_on_rows_and_its_queue_deleted_after(db):
    level = logging.getLogger("quotaportal.scheduling").level
    out = StringIO()
    call_command(Command(), "--database", "--runnable", "300", "--placed", "60", "--repeat", "1", stdout=out)
    line = out.getvalue()
    found = re.match(
        r"estimate task on \w+: 300 RUNNABLE, 60 placed, one pass committed, then (\d+) pending rows "
        r"estimated; median of 1, wall seconds: ([\d.]+) s in all = reads ([\d.]+) \+ estimate ([\d.]+) "
        r"\+ write ([\d.]+)",
        line,
    )
    assert found, line
    assert int(found[1]) > 0
    assert not JobQueue.objects.filter(name__startswith="bench-").exists() and not Job.objects.exists()
    # It quiets the scheduling log while it runs, and leaves it as it was for whatever runs next.
    assert logging.getLogger("quotaportal.scheduling").level == level


def test_a_repeat_below_one_is_refused_naming_it(db):
    with pytest.raises(CommandError, match="--repeat >= 1"):
        call_command(Command(), "--database", "--repeat", "0", stdout=StringIO())
