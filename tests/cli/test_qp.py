"""qp end to end: a real subprocess against a live server, each command with its words, its --json and its
exit code, and the API's refusals shown with the field names it returns."""

from __future__ import annotations

import json
import stat
import subprocess
import time

import pytest
from rest_framework.authtoken.models import Token

from scheduling.models import Job, JobStatus
from scheduling.services import estimates
from scheduling.services.executor import job_report
from tests.factories import job_in
from tests.pages.conftest import P4, P5

pytestmark = pytest.mark.django_db(transaction=True)


def placed_job(world, **fields):
    job = job_in(world.nlp, [(P5, 1)], user=world.ana, name=fields.pop("name", "llm"), **fields)
    world.run_pass()
    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED
    return job


# --- login and where settings come from ----------------------------------------------------------------------


def test_login_writes_a_config_only_its_owner_reads_and_later_commands_use_it(qp, world):
    job = job_in(world.nlp, [(P5, 1)], user=world.ana, name="from-config")
    result = qp("login", "--url", qp.url, "--token-stdin", stdin=qp.token + "\n", signed_in=False)
    assert result.returncode == 0, result.stderr
    assert f"signed in to {qp.url}" in result.stdout
    assert stat.S_IMODE(qp.config.stat().st_mode) == 0o600
    assert json.loads(qp.config.read_text()) == {"url": qp.url, "token": qp.token}

    status = qp("status", str(job.pk), signed_in=False)  # no variables: the config file
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith(f"job {job.pk} from-config: RUNNABLE")


def test_login_with_a_refused_token_writes_nothing(qp):
    result = qp("login", "--url", qp.url, "--token", "not-a-token", signed_in=False)
    assert result.returncode == 1
    assert "HTTP 401" in result.stderr and "qp login" in result.stderr
    assert not qp.config.exists()


def test_the_environment_overrides_the_config_file(qp, world):
    qp.config.parent.mkdir(parents=True)
    qp.config.write_text(json.dumps({"url": "http://127.0.0.1:9", "token": "stale"}))
    job = job_in(world.nlp, [(P5, 1)], user=world.ana)
    assert qp("status", str(job.pk)).returncode == 0


def test_without_a_token_qp_says_how_to_get_one(qp):
    result = qp("status", "1", signed_in=False)
    assert result.returncode == 1
    assert "no portal address: run `qp login`, set QUOTAPORTAL_URL, or pass --url" in result.stderr


# --- submit --------------------------------------------------------------------------------------------------


def test_submit_takes_the_preference_list_as_flags(qp, world):
    result = qp(
        "submit",
        "--queue", "training",
        "--share", "nlp",
        "--name", "llm-7b",
        "--prefer", f"{P5}:2:nlp-p5-december",
        "--prefer", f"{P4}:4",
        "--priority", "50",
        "--command", "python train.py --epochs '3'",
        "--env", "WANDB_MODE=offline",
        "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    job = Job.objects.get(pk=body["id"])
    assert (job.name, job.submitted_by, job.scheduling_priority) == ("llm-7b", world.ana, 50)
    assert job.payload == {
        "command": ["python", "train.py", "--epochs", "3"],
        "env": {"WANDB_MODE": "offline"},
    }
    entries = [
        (p.instance_type.name, p.instance_count, p.training_plan and p.training_plan.name)
        for p in job.instance_preferences.all()
    ]
    assert entries == [(P5, 2, "nlp-p5-december"), (P4, 4, None)]
    assert body["instance_preferences"][1] == {
        "instance_type": P4,
        "instance_count": 4,
        "training_plan": None,
    }


def test_submit_reads_a_yaml_file_and_flags_override_it(qp, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: from-yaml\njob_queue: training\nquota_share: nlp\n"
        f"instance_preferences:\n  - {{instance_type: {P4}, instance_count: 2}}\n"
        "payload:\n  command: [python, train.py]\n"
    )
    result = qp("submit", "--file", str(spec), "--name", "renamed")
    assert result.returncode == 0, result.stderr
    job = Job.objects.get()
    assert job.name == "renamed" and job.payload == {"command": ["python", "train.py"]}
    assert f"submitted job {job.pk} renamed: RUNNABLE" in result.stdout


def test_submit_reads_a_json_file(qp, tmp_path):
    spec = tmp_path / "job.json"
    entries = [{"instance_type": P5, "instance_count": 1}]
    spec.write_text(
        json.dumps(
            {
                "name": "j",
                "job_queue": "training",
                "quota_share": "nlp",
                "instance_preferences": entries,
                "payload": {"command": ["python", "train.py"]},
            }
        )
    )
    result = qp("submit", "-f", str(spec))
    assert result.returncode == 0, result.stderr
    assert Job.objects.get().name == "j"


def test_a_refused_submission_names_the_fields_the_api_returns(qp):
    result = qp("submit", "--queue", "training", "--share", "nope", "--name", "x", "--prefer", f"{P5}:1")
    assert result.returncode == 1
    assert "HTTP 400" in result.stderr
    assert "quota_share: queue training has no quota share named nope" in result.stderr
    result = qp("submit", "--queue", "training", "--share", "nlp", "--name", "x", "--prefer", "ml.nope:1")
    assert result.returncode == 1 and "instance_preferences[0].instance_type:" in result.stderr
    assert Job.objects.count() == 0


def test_another_teams_share_is_refused(qp):
    result = qp("submit", "--queue", "training", "--share", "vision", "--name", "x", "--prefer", f"{P4}:1")
    assert result.returncode == 1 and "HTTP 403" in result.stderr and "team Vision" in result.stderr


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--prefer", "ml.p5"], "--prefer 'ml.p5': write INSTANCE_TYPE:COUNT"),
        (["--prefer", f"{P5}:four"], "the count 'four' is not a whole number"),
        (["--prefer", f"{P5}:1", "--env", "NOVALUE"], "--env 'NOVALUE': write NAME=VALUE"),
        (["--prefer", f"{P5}:1", "--payload", "[1]"], "--payload: a JSON object"),
        ([], "missing --prefer"),
    ],
)
def test_bad_arguments_are_named_and_nothing_is_sent(qp, flags, words):
    result = qp("submit", "--queue", "training", "--share", "nlp", "--name", "x", *flags)
    assert result.returncode == 2 and words in result.stderr
    assert Job.objects.count() == 0


# --- status, why, logs ---------------------------------------------------------------------------------------


def test_why_gives_the_reason_and_the_estimated_start(qp, world):
    job_in(world.nlp, [(P5, 4)], user=world.ben, name="ahead", duration_seconds=600)
    waiting = job_in(world.nlp, [(P5, 4)], user=world.ana, name="behind", duration_seconds=600)
    world.run_pass()
    estimates.queue_estimates_refresh(job_queue_id=world.queue.pk)
    waiting.refresh_from_db()
    result = qp("why", str(waiting.pk))
    assert result.returncode == 0, result.stderr
    assert f"job {waiting.pk} behind is RUNNABLE" in result.stdout
    assert f"why: {waiting.current_reason}" in result.stdout
    assert "position 1 in share nlp's queue" in result.stdout
    assert waiting.estimated_start["earliest"] is not None
    earliest = waiting.estimated_start["earliest"]
    assert f"estimated start: {earliest:%Y-%m-%d %H:%M} UTC" in result.stdout
    body = json.loads(qp("why", str(waiting.pk), "--json").stdout)
    assert body["status_reason"] == waiting.current_reason and body["estimated_start"]["basis"]


def test_status_shows_placement_and_json_is_the_apis(qp, world):
    job = placed_job(world)
    result = qp("status", str(job.pk))
    assert f"on {P5} x1" in result.stdout and "queue training, share nlp" in result.stdout
    assert json.loads(qp("status", str(job.pk), "--json").stdout)["status"] == "SCHEDULED"


def test_logs_print_the_output_tail_the_executor_reported(qp, world):
    job = placed_job(world)
    job_report(job_id=job.pk, status="RUNNING", attempt=1, actor=world.admin)
    tail = "epoch 1\nTraceback: boom\n"
    job_report(job_id=job.pk, status="FAILED", attempt=1, exit_code=3, output_tail=tail, actor=world.admin)
    result = qp("logs", str(job.pk))
    assert result.returncode == 0 and result.stdout == tail
    assert f"# job {job.pk} attempt 1, exit code 3" in result.stderr
    body = json.loads(qp("logs", str(job.pk), "--json").stdout)
    assert (body["attempt"], body["exit_code"], body["output_tail"]) == (1, 3, tail)


def test_logs_of_a_job_that_never_ran_say_so(qp, world):
    job = job_in(world.nlp, [(P5, 1)], user=world.ana)
    result = qp("logs", str(job.pk))
    assert result.returncode == 1
    assert f"job {job.pk} has no attempt yet (it is RUNNABLE)" in result.stderr


def test_another_teams_job_is_not_found(qp, world):
    theirs = job_in(world.vision, [(P4, 1)], user=world.chen, name="vision-secret")
    for command in ("status", "why", "logs", "cancel"):
        result = qp(command, str(theirs.pk))
        assert result.returncode == 1 and "HTTP 404" in result.stderr, command
        assert "vision-secret" not in result.stderr + result.stdout
    assert Job.objects.get(pk=theirs.pk).status == JobStatus.RUNNABLE


# --- cancel and wait -----------------------------------------------------------------------------------------


def test_cancel_cancels(qp, world):
    job = job_in(world.nlp, [(P5, 1)], user=world.ana, name="oops")
    result = qp("cancel", str(job.pk), "--reason", "wrong data")
    assert result.returncode == 0 and f"job {job.pk} oops: CANCELLED" in result.stdout
    assert Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED


def test_wait_ends_with_the_job_and_its_exit_code_says_how(qp, world):
    job = placed_job(world)
    waiting = subprocess.Popen(
        qp.command("wait", str(job.pk), "--interval", "0.2", "--timeout", "30"),
        env=qp.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.0)
        assert waiting.poll() is None  # still waiting on a SCHEDULED job
        job_report(job_id=job.pk, status="RUNNING", attempt=1, actor=world.admin)
        job_report(job_id=job.pk, status="SUCCEEDED", attempt=1, exit_code=0, actor=world.admin)
        out, err = waiting.communicate(timeout=30)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert waiting.returncode == 0, err
    assert "SCHEDULED" in out and "SUCCEEDED" in out.splitlines()[-1]


def test_wait_exits_3_for_a_failed_job_and_4_for_a_cancelled_one(qp, world):
    failed = placed_job(world, name="bad")
    job_report(job_id=failed.pk, status="FAILED", attempt=1, exit_code=1, actor=world.admin)
    assert qp("wait", str(failed.pk), "-q").returncode == 3
    cancelled = job_in(world.nlp, [(P5, 1)], user=world.ana)
    qp("cancel", str(cancelled.pk))
    result = qp("wait", str(cancelled.pk), "--json")
    assert result.returncode == 4 and json.loads(result.stdout)["status"] == "CANCELLED"


def test_wait_gives_up_at_its_timeout_with_124(qp, world):
    job = job_in(world.nlp, [(P5, 99)], user=world.ana)
    started = time.monotonic()
    result = qp("wait", str(job.pk), "--timeout", "1", "--interval", "0.3")
    assert result.returncode == 124 and "still RUNNABLE after 1 s" in result.stderr
    assert time.monotonic() - started < 15


def test_a_token_of_another_user_sees_only_their_jobs(qp, world):
    job = job_in(world.nlp, [(P5, 1)], user=world.ana)
    chen = Token.objects.create(user=world.chen).key
    assert qp("status", str(job.pk), QUOTAPORTAL_TOKEN=chen).returncode == 1


def test_jobs_lists_the_teams_jobs_newest_first_with_filters(qp, world):
    first = job_in(world.nlp, [(P5, 1)], user=world.ana, name="first")
    second = job_in(world.nlp, [(P5, 1)], user=world.ben, name="second")
    job_in(world.vision, [(P4, 1)], user=world.chen, name="vision-secret")
    Job.objects.filter(pk=first.pk).update(status=JobStatus.CANCELLED)
    result = qp("jobs")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[:3] for line in lines] == [
        [str(second.pk), "RUNNABLE", "second"],
        [str(first.pk), "CANCELLED", "first"],
    ]
    assert "training/nlp" in lines[0] and "vision-secret" not in result.stdout
    assert [j["name"] for j in json.loads(qp("jobs", "--status", "RUNNABLE", "--json").stdout)] == ["second"]
    assert qp("jobs", "--limit", "1").stdout.count("\n") == 1


def test_jobs_follows_the_lists_pages(qp, world):
    for n in range(55):  # more than a page of the API (50)
        job_in(world.nlp, [(P5, 1)], user=world.ana, name=f"j{n}")
    body = json.loads(qp("jobs", "--limit", "60", "--json").stdout)
    assert len(body) == 55 and len({job["id"] for job in body}) == 55


def test_wait_keeps_waiting_through_a_portal_that_does_not_answer_until_its_timeout(qp, world):
    result = qp("wait", "1", "--timeout", "1", "--interval", "0.2", QUOTAPORTAL_URL="http://127.0.0.1:9")
    assert result.returncode == 1
    assert "no server answers there (check --url); trying again" in result.stderr
    assert result.stderr.count("trying again") >= 2
