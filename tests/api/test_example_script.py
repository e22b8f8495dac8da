"""examples/submit_jobs.py against a live server: it submits a batch, waits for placements, and a rerun with
the same batch finds the jobs by their client tokens instead of submitting them again."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from django.db import transaction
from rest_framework.authtoken.models import Token

from scheduling.models import PLACED_STATUSES, Job
from scheduling.passes import run as passes
from scheduling.services import configuration as config_services
from scheduling.services import executor as executor_services
from scheduling.services import jobs as job_services

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "submit_jobs.py"


@pytest.fixture
def passes_after_each_submission(monkeypatch):
    """What a worker does in production, inline: a pass on the queue once the submission commits."""

    def pass_now(*, job_queue_id: int, trigger: str) -> None:
        transaction.on_commit(lambda: passes.queue_pass_run(job_queue_id=job_queue_id, trigger=trigger))

    for services in (job_services, executor_services, config_services):  # each asks for its own passes
        monkeypatch.setattr(services, "pass_request", pass_now)


@pytest.mark.django_db(transaction=True)
def test_the_example_submits_a_batch_and_waits_until_every_job_is_placed(
    world, live_server, passes_after_each_submission, capsys
):
    token = Token.objects.create(user=world.ana)
    main = runpy.run_path(str(SCRIPT))["main"]
    argv = [
        "--url",
        live_server.url,
        "--token",
        token.key,
        "--count",
        "3",
        "--queue",
        "training",
        "--share",
        "nlp",
        "--batch",
        "nightly",
        "--interval",
        "0.05",
        "--timeout",
        "30",
        "--command",
        "python3 train.py --epochs 3",
    ]

    first = main(argv)
    first_out = capsys.readouterr().out
    again = main(argv)
    again_out = capsys.readouterr().out

    assert first == 0
    assert first_out.count(": submitted") == 3
    jobs = Job.objects.filter(submitted_by=world.ana, client_token__startswith="nightly-")
    assert jobs.count() == 3
    assert all(job.status in PLACED_STATUSES for job in jobs)
    assert "3 SCHEDULED" in first_out
    assert again == 0
    assert again_out.count("already submitted (same client token)") == 3
    assert Job.objects.count() == 3


@pytest.mark.django_db(transaction=True)
def test_the_example_stops_on_a_refused_submission(world, live_server, capsys):
    token = Token.objects.create(user=world.ana)
    main = runpy.run_path(str(SCRIPT))["main"]

    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "--url",
                live_server.url,
                "--token",
                token.key,
                "--share",
                "vision",
                "--prefer",
                "ml.p4d.24xlarge:1",
            ]
        )

    assert exit_.value.code == 1
    assert "HTTP 403: you are not a member of team Vision" in capsys.readouterr().err
