"""The submission bench (`python -m tools.bench_submit`): a tiny run on PostgreSQL and Redis loses nothing."""

from __future__ import annotations

import json
import subprocess

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.ops.support import BASE_DIR, PYTHON, child_env, ops_broker_url, require_redis
from tools.bench_submit.command import Command


@pytest.mark.django_db
def test_the_bench_refuses_sqlite_or_a_broker_other_than_redis(settings, on_postgres):
    settings.CELERY_BROKER_URL = "filesystem://"
    expected = "needs Redis" if on_postgres else "needs PostgreSQL"

    with pytest.raises(CommandError, match=expected):
        call_command(Command(), "--idle", "1")


def test_the_bench_refuses_fewer_requests_than_clients():
    with pytest.raises(CommandError, match="--requests from --clients"):
        call_command(Command(), "--clients", "20", "--requests", "10")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_tiny_bench_accepts_every_submission_keeps_every_job_and_counts_the_same_statements(tmp_path):
    broker = ops_broker_url()
    require_redis(broker)
    report = tmp_path / "bench.json"

    run = subprocess.run(
        [PYTHON, "-m", "tools.bench_submit", "--idle", "5", "--clients", "2", "--requests", "10"]
        + ["--json", str(report)],
        env=child_env(CELERY_BROKER_URL=broker),
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    result = json.loads(report.read_text())
    assert result["statuses"] == {"201": 5 + 5 + 10}  # the warm-up, idle, concurrent
    assert result["idle"]["submissions"] == 5 and result["concurrent"]["submissions"] == 10
    assert result["accepted"] == result["rows"] == 22 and result["lost"] == 0  # and the 2 counted ones
    before, after = result["statements"]
    assert after["queue_jobs"] == before["queue_jobs"] + 16
    assert before["statements"] == after["statements"]
    for phase in ("idle", "concurrent"):
        latency = result[phase]["latency_ms"]
        assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["max"]
    assert "p50" in run.stdout and "lost: 0" in run.stdout
