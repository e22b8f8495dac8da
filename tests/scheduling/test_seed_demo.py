"""seed_demo publishes its passwords: with DEBUG off it refuses unless forced, then makes random ones."""

from __future__ import annotations

import io
import re
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from scheduling import tasks
from scheduling.management.commands.seed_demo import ADMIN, DEMO_PASSWORD
from scheduling.models import PLACED_STATUSES, Event, EventKind, Job, JobQueue, JobStatus
from scheduling.passes.run import queue_pass_run
from scheduling.services import demo
from scheduling.services.executor import simulated_executor_tick

pytestmark = pytest.mark.django_db


def seed(**options) -> str:
    out = io.StringIO()
    call_command("seed_demo", jobs=2, stdout=out, **options)
    return out.getvalue()


def test_seed_demo_with_debug_off_refuses_without_force_and_creates_nothing(settings):
    settings.DEBUG = False

    with pytest.raises(CommandError, match="DEBUG is off.*--force"):
        seed()

    assert not get_user_model().objects.exists()


def test_seed_demo_forced_with_debug_off_gives_random_passwords_printed_once(settings):
    settings.DEBUG = False

    first = seed(force=True)
    again = seed(force=True)

    admin_password = re.search(rf"superuser {ADMIN[0]}, password \(shown only now\): (\S+)", first).group(1)
    member_password = re.search(r"ana, .*password \(shown only now\): (\S+)", first).group(1)
    admin = get_user_model().objects.get(username=ADMIN[0])
    ana = get_user_model().objects.get(username="ana")
    assert admin.is_superuser and admin.check_password(admin_password)
    assert not admin.check_password(ADMIN[1])
    assert ana.check_password(member_password) and not ana.check_password(DEMO_PASSWORD)
    assert admin_password not in again and member_password not in again
    assert "existing passwords are unchanged" in again


def test_seed_demo_with_debug_on_keeps_the_published_demo_passwords(settings):
    settings.DEBUG = True

    out = seed()

    assert f"{ADMIN[0]} / {ADMIN[1]}" in out
    assert get_user_model().objects.get(username=ADMIN[0]).check_password(ADMIN[1])
    assert get_user_model().objects.get(username="ana").check_password(DEMO_PASSWORD)


def test_seed_demo_borrows_at_once_and_the_lenders_jobs_sent_for_later_reclaim_it(
    settings, django_capture_on_commit_callbacks
):
    settings.DEBUG = True
    with mock.patch.object(tasks.demo_lenders_arrive, "apply_async") as sent:
        with django_capture_on_commit_callbacks(execute=True):
            call_command("seed_demo", stdout=io.StringIO())
    queue = JobQueue.objects.get(name="training")
    assert mock.call(args=[queue.pk], countdown=demo.LENDERS_ARRIVE_AFTER_SECONDS) in sent.call_args_list

    queue_pass_run(job_queue_id=queue.pk, trigger="test")  # the first pass, right after `make run` starts
    borrowing = Job.objects.filter(name__startswith="vision-long-", borrowed_instances__gt=0)
    assert borrowing.exists()
    assert not Event.objects.filter(kind=EventKind.PREEMPTED_RECLAIM).exists()

    simulated_executor_tick(job_queue_id=queue.pk, now=timezone.now() + timedelta(seconds=60))
    tasks.demo_lenders_arrive(queue.pk)  # what the worker runs when the countdown is over
    queue_pass_run(job_queue_id=queue.pk, trigger="test")

    reclaims = Event.objects.filter(kind=EventKind.PREEMPTED_RECLAIM)
    assert reclaims.filter(job__name__startswith="vision-long-").exists()
    # The borrowers had started, so they stop gracefully; the lender's jobs wait for them, nominated.
    assert Job.objects.filter(name__startswith="vision-long-", status=JobStatus.STOPPING).exists()
    assert Job.objects.filter(name__startswith="speech-urgent-", nominated_entry__isnull=False).exists()

    simulated_executor_tick(job_queue_id=queue.pk, now=timezone.now() + timedelta(seconds=120))  # stopped
    queue_pass_run(job_queue_id=queue.pk, trigger="test")
    assert Job.objects.filter(name__startswith="speech-urgent-", status__in=PLACED_STATUSES).exists()
    assert tasks.demo_lenders_arrive(queue.pk) == 0  # sent twice (a redelivery), it submits nothing new


def test_seed_demo_makes_the_local_environment_its_agent_account_and_token_file(
    settings, tmp_path, django_capture_on_commit_callbacks
):
    from django.contrib.auth.models import Permission
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    from scheduling.models import ServiceEnvironment

    settings.DEBUG = True
    settings.DEMO_AGENT_TOKEN_FILE = tmp_path / "var" / "agent-token"

    with mock.patch.object(tasks.demo_lenders_arrive, "apply_async") as later:
        with django_capture_on_commit_callbacks(execute=True):
            seed()
        with django_capture_on_commit_callbacks(execute=True):
            seed()  # idempotent: the same account, token and jobs

    environment = ServiceEnvironment.objects.get(name=demo.LOCAL_QUEUE)
    assert environment.executor == ServiceEnvironment.Executor.EXTERNAL
    assert (environment.stop_grace_seconds, environment.lease_seconds) == (20, 60)
    queue = JobQueue.objects.get(name=demo.LOCAL_QUEUE, service_environment=environment)
    assert sorted(queue.quota_shares.values_list("name", "strategy")) == [
        ("nlp", "LEND"),
        ("vision", "LEND_AND_BORROW"),
    ]
    agent = get_user_model().objects.get(username="local-agent")
    assert not agent.has_usable_password() and not agent.is_staff
    assert agent.user_permissions.filter(codename="report_job_status").exists()
    assert Permission.objects.filter(user=agent).count() == 1
    token_file = settings.DEMO_AGENT_TOKEN_FILE
    assert token_file.read_text().strip() == Token.objects.get(user=agent).key
    assert token_file.stat().st_mode & 0o077 == 0  # the token is the agent's alone

    jobs = Job.objects.filter(job_queue=queue)
    assert sorted(jobs.values_list("name", flat=True)) == ["vision-local-pretrain", "vision-local-sweep"]
    for job in jobs:
        python, script = job.payload["command"]
        assert python == "python3" and script.endswith("agent/examples/train.py")
        assert Path(script).is_file()
    # nlp's job, the reclaim, is sent for a minute later, once per seeding, to the queue of `local`
    assert [c.kwargs["args"] for c in later.call_args_list].count([queue.pk]) == 2
    assert (
        mock.call(args=[queue.pk], countdown=demo.LOCAL_LENDERS_ARRIVE_AFTER_SECONDS) in later.call_args_list
    )

    # The token takes work on `local` (both of vision's jobs: 2 of its own and 2 borrowed from nlp).
    queue_pass_run(job_queue_id=queue.pk, trigger="test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_file.read_text().strip()}")
    work = client.get(f"/api/v1/service-environments/{environment.pk}/work/?instance_type={demo.LOCAL_TYPE}")
    assert work.status_code == 200
    assert sorted(job["name"] for job in work.json()["start"]) == [
        "vision-local-pretrain",
        "vision-local-sweep",
    ]

    # A minute later nlp's job arrives and reclaims: the borrowed one is to stop, with a deadline.
    assert demo.demo_lender_jobs_submit(job_queue_id=queue.pk) == 1
    assert demo.demo_lender_jobs_submit(job_queue_id=queue.pk) == 0
    queue_pass_run(job_queue_id=queue.pk, trigger="test")
    work = client.get(f"/api/v1/service-environments/{environment.pk}/work/?instance_type={demo.LOCAL_TYPE}")
    (stopping,) = work.json()["stop"]
    assert Job.objects.get(pk=stopping["id"]).status == JobStatus.STOPPING and stopping["deadline"]
    assert Job.objects.get(name="nlp-local-finetune").nominated_entry is not None


def test_seed_demos_agent_account_serves_local_and_takes_its_work_through_the_api(settings, tmp_path):
    from rest_framework.test import APIClient

    from scheduling.models import ServiceEnvironment

    settings.DEBUG = True
    settings.DEMO_AGENT_TOKEN_FILE = str(tmp_path / "agent-token")
    seed()
    seed()  # `make run` seeds again on every start: the link stays one link
    local = ServiceEnvironment.objects.get(executor_accounts__username="local-agent")
    assert local.executor == ServiceEnvironment.Executor.EXTERNAL
    assert list(local.executor_accounts.values_list("username", flat=True)) == ["local-agent"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Path(settings.DEMO_AGENT_TOKEN_FILE).read_text().strip()}")
    assert client.get(f"/api/v1/service-environments/{local.pk}/work/").status_code == 200
    other = ServiceEnvironment.objects.exclude(pk=local.pk).first()  # the simulated fleet: not its own
    assert client.get(f"/api/v1/service-environments/{other.pk}/work/").status_code == 403
