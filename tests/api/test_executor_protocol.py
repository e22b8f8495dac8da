"""The executor protocol (behaviour.md#a-jobs-life, 5): GET .../work/ takes jobs to start and lists jobs to stop;
reports name their attempt; long-polls wait without a database connection."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling.models import Executor, Job, JobAttempt, JobStatus, ServiceEnvironment, StopOutcome
from scheduling.passes import run as passes
from scheduling.services import jobs as job_services
from tests.api.support import P4, P5, placed
from tests.factories import job_in

JOBS = "/api/v1/jobs/"


def work_url(world, **query) -> str:
    params = "&".join(f"{name}={value}" for name, value in query.items())
    return f"/api/v1/service-environments/{world.queue.service_environment_id}/work/?{params}"


@pytest.fixture
def running(world):
    """A placed job the executor account has taken through the work endpoint."""
    job = placed(job_in(world.nlp, [(P5, 2)], name="train", payload={"command": ["python", "train.py"]}))
    return job


def test_work_gives_a_scheduled_job_to_one_executor_with_what_it_needs_to_run_it(world, client_for, running):
    executor = client_for(world.executor)
    body = executor.get(work_url(world, executor="host-a", host="gpu-01")).json()
    assert body["stop"] == []
    (start,) = body["start"]
    assert start == {
        "id": running.pk,
        "name": "train",
        "attempt": 1,
        "instance_type": P5,
        "instance_count": 2,
        "training_plan": None,
        "payload": {"command": ["python", "train.py"]},
        "stop_grace_seconds": 120,
        "lease_seconds": 300,
        "gpus_per_instance": running.selected_instance_type.gpu_count,  # 8: the executor's GPUs per slot
    }
    assert start["gpus_per_instance"] == 8
    running.refresh_from_db()
    assert running.taken_at is not None and running.lease_expires_at > timezone.now()
    record = Executor.objects.get(name="host-a")
    assert (record.host, record.jobs_taken, running.taken_by_id) == ("gpu-01", 1, record.pk)
    # Taken: nobody gets it again.
    assert executor.get(work_url(world, executor="host-b")).json() == {"start": [], "stop": []}


def test_work_filters_by_instance_type(world, client_for, running):
    executor = client_for(world.executor)
    assert executor.get(work_url(world, instance_type=P4)).json()["start"] == []
    assert [job["id"] for job in executor.get(work_url(world, instance_type=P5)).json()["start"]] == [
        running.pk
    ]


def test_work_hands_out_only_what_fits_in_the_free_slots_in_order(world, client_for, running):
    # `running` asks for 2 instances (scheduled first); then a 1-instance job and another 2-instance one.
    small = placed(job_in(world.nlp, [(P5, 1)], name="small"), count=1)
    large = placed(job_in(world.nlp, [(P5, 2)], name="large"))
    executor = client_for(world.executor)
    full = executor.get(work_url(world, free_slots=0)).json()
    one = executor.get(work_url(world, free_slots=1)).json()
    three = executor.get(work_url(world, free_slots=3)).json()

    assert full == {"start": [], "stop": []}
    assert [job["id"] for job in one["start"]] == [small.pk]  # the 2-instance jobs before it are skipped
    assert [job["id"] for job in three["start"]] == [running.pk]  # 2 taken, 1 left: too few for `large`
    large.refresh_from_db()
    assert large.taken_at is None
    assert [job["id"] for job in executor.get(work_url(world)).json()["start"]] == [large.pk]


def test_a_placed_job_no_executor_has_room_for_says_so_on_its_page(world, client_for, running):
    # `running` is placed on P5 x2 and not taken yet.
    page = Client()
    page.force_login(world.users["ana"])

    def untaken() -> str:
        body = page.get(f"/jobs/{running.pk}/").content.decode()
        return body.split('id="untaken"', 1)[1].split("</p>", 1)[0] if 'id="untaken"' in body else ""

    assert "no executor has asked environment gpu-fleet for ml.p5.48xlarge work" in untaken()
    executor = client_for(world.executor)
    assert executor.get(work_url(world, instance_type=P5, free_slots=1)).json()["start"] == []
    assert "at most 1 free slot and it needs 2: it waits for one with room" in untaken()
    record = Executor.objects.get(name="executor")
    assert (record.offered_instance_type, record.offered_slots) == (P5, 1)
    # An executor polling without saying its slots may take it at its next poll.
    Executor.objects.update(offered_slots=None)
    assert "takes it at its next poll" in untaken()
    assert [job["id"] for job in executor.get(work_url(world, free_slots=2)).json()["start"]] == [running.pk]
    assert untaken() == ""


@pytest.mark.parametrize("value", ["-1", "many", "2147483648"])
def test_work_refuses_a_bad_free_slots_naming_it(world, client_for, running, value):
    answer = client_for(world.executor).get(work_url(world, free_slots=value))
    assert answer.status_code == 400 and "free_slots" in answer.json()
    running.refresh_from_db()
    assert running.taken_at is None


def test_work_lists_taken_jobs_to_stop_with_their_deadline(world, client_for, running):
    executor = client_for(world.executor)
    executor.get(work_url(world))
    job_services.job_cancel(job_id=running.pk, actor=world.users["admin"])
    running.refresh_from_db()
    assert running.status == JobStatus.STOPPING and running.stop_outcome == StopOutcome.CANCELLED
    body = executor.get(work_url(world)).json()
    assert body["start"] == []
    assert [(job["id"], job["attempt"]) for job in body["stop"]] == [(running.pk, 1)]
    assert body["stop"][0]["deadline"]


def test_a_job_to_stop_goes_only_to_the_executor_that_took_it(world, client_for, running):
    """Another agent on the same environment must not hear of it: it would answer "not running here" (STOPPED)
    and free capacity a live process still holds."""
    executor = client_for(world.executor)
    assert executor.get(work_url(world, executor="host-a")).json()["start"]
    job_services.job_cancel(job_id=running.pk, actor=world.users["admin"])

    assert executor.get(work_url(world, executor="host-b")).json() == {"start": [], "stop": []}
    assert [job["id"] for job in executor.get(work_url(world, executor="host-a")).json()["stop"]] == [
        running.pk
    ]


def test_work_on_a_simulated_environment_is_a_conflict(world, client_for):
    ServiceEnvironment.objects.filter(pk=world.queue.service_environment_id).update(
        executor=ServiceEnvironment.Executor.SIMULATED
    )
    response = client_for(world.executor).get(work_url(world))
    assert response.status_code == 409


@pytest.mark.parametrize("who,code", [("ana", 403), ("chen", 403), (None, 401), ("admin", 200)])
def test_only_executors_and_staff_take_work(world, client_for, who, code):
    user = world.users[who] if who else None
    assert client_for(user).get(work_url(world)).status_code in ({code, 403} if who is None else {code})


@pytest.mark.parametrize("wait", ["31", "-1", "soon"])
def test_wait_outside_0_to_30_is_a_400_naming_wait(world, client_for, wait):
    response = client_for(world.executor).get(work_url(world, wait=wait))
    assert response.status_code == 400 and "wait" in response.json()


def test_an_unknown_instance_type_is_a_400_naming_it_not_an_empty_answer_for_ever(world, client_for, running):
    response = client_for(world.executor).get(work_url(world, instance_type="ml.p5.48xlarg"))

    assert response.status_code == 400
    assert response.json() == {"instance_type": ["unknown instance type ml.p5.48xlarg"]}
    running.refresh_from_db()
    assert running.taken_at is None and not Executor.objects.exists()


def test_a_long_poll_with_nothing_to_do_answers_empty_after_the_wait(world, client_for):
    started = time.monotonic()
    body = client_for(world.executor).get(work_url(world, wait=1)).json()
    assert body == {"start": [], "stop": []} and 1 <= time.monotonic() - started < 3


@pytest.mark.django_db(transaction=True)
def test_a_long_poll_returns_as_soon_as_a_pass_places_a_job(world, settings):
    settings.WORK_RECHECK_SECONDS = 30  # only the pass's signal can end the wait early
    answers: list[tuple[float, dict]] = []

    def poll() -> None:
        try:
            client = APIClient()
            client.force_authenticate(user=world.executor)
            started = time.monotonic()
            body = client.get(work_url(world, wait=20)).json()
            answers.append((time.monotonic() - started, body))
        finally:
            connection.close()

    waiter = threading.Thread(target=poll)
    waiter.start()
    time.sleep(0.5)
    job = job_in(world.nlp, [(P5, 2)], name="late")
    passes.queue_pass_run(job_queue_id=world.queue.pk, trigger="test")
    waiter.join(timeout=30)
    ((elapsed, body),) = answers
    assert [start["id"] for start in body["start"]] == [job.pk] and elapsed < 5


# --- reports ---------------------------------------------------------------------------------------------


def report(client, job, **body):
    return client.post(f"{JOBS}{job.pk}/report/", body, format="json")


def test_a_stale_attempt_is_a_409_and_never_touches_the_current_one(world, client_for, running):
    executor = client_for(world.executor)
    report(executor, running, attempt=1, status="FAILED", reason="oom")  # retry_attempts=1: FAILED
    job = Job.objects.get(pk=running.pk)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNABLE)
    placed(Job.objects.get(pk=job.pk))  # attempt 2
    response = report(executor, running, attempt=1, status="SUCCEEDED")
    assert response.status_code == 409 and "stale" in response.json()["detail"]
    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED and job.attempt == 2


def test_reports_record_exit_code_and_output_tail_and_repeats_are_harmless(world, client_for, running):
    executor = client_for(world.executor)
    assert report(executor, running, attempt=1, status="RUNNING").status_code == 200
    assert report(executor, running, attempt=1, status="RUNNING").status_code == 200
    response = report(executor, running, attempt=1, status="SUCCEEDED", exit_code=0, output_tail="done\n")
    assert response.status_code == 200
    attempt = response.json()["attempts"][0]
    assert (attempt["attempt"], attempt["exit_code"], attempt["output_tail"]) == (1, 0, "done\n")
    again = report(executor, running, attempt=1, status="SUCCEEDED", exit_code=0)
    assert again.status_code == 200 and again.json()["status"] == "SUCCEEDED"
    assert report(executor, running, attempt=1, status="FAILED").status_code == 409
    assert JobAttempt.objects.filter(job=running).count() == 1


def test_a_stopped_report_applies_the_stop_outcome_and_is_idempotent(world, client_for, running):
    executor = client_for(world.executor)
    executor.get(work_url(world))
    job_services.job_cancel(job_id=running.pk, actor=world.users["admin"])
    first = report(executor, running, attempt=1, status="STOPPED", exit_code=-15)
    assert first.status_code == 200 and first.json()["status"] == "CANCELLED"
    second = report(executor, running, attempt=1, status="STOPPED", exit_code=-15)
    assert second.status_code == 200 and second.json()["status"] == "CANCELLED"


def test_an_attempt_from_the_future_is_a_409_that_says_so_and_changes_nothing(world, client_for, running):
    response = report(client_for(world.executor), running, attempt=2, status="SUCCEEDED")

    assert response.status_code == 409 and "never handed out" in response.json()["detail"]
    running.refresh_from_db()
    assert (running.status, running.taken_at) == (JobStatus.SCHEDULED, None)


@pytest.mark.parametrize("exit_code", [2**31, -(2**31) - 1, 2**70])
def test_an_exit_code_no_process_has_is_a_400_naming_it_and_changes_nothing(
    world, client_for, running, exit_code
):
    response = report(client_for(world.executor), running, attempt=1, status="FAILED", exit_code=exit_code)

    assert response.status_code == 400 and list(response.json()) == ["exit_code"]
    running.refresh_from_db()
    assert (running.status, running.taken_at) == (JobStatus.SCHEDULED, None)
    assert JobAttempt.objects.get(job=running).exit_code is None


@pytest.mark.parametrize(
    "body,field",
    [
        ({"attempt": "1", "status": "RUNNING", "exit_code": "zero"}, "exit_code"),
        ({"attempt": [1], "status": "RUNNING"}, "attempt"),
        ({"attempt": 1, "status": {"RUNNING": 1}}, "status"),
        ({"attempt": 1, "status": "RUNNING", "reason": None}, "reason"),
        ({"attempt": 1, "status": "RUNNING", "output_tail": ["line"]}, "output_tail"),
        ({"attempt": 1, "status": "RUNNING", "output_tail": "x" * 65537}, "output_tail"),
        ({"attempt": 1, "status": "RUNNING", "output_tail": "before\x00after"}, "output_tail"),
        ({"attempt": 1, "status": "RUNNING", "reason": "a" * 2001}, "reason"),
        ({"attempt": 1, "status": "RUNNING", "pid": 4242}, "pid"),
    ],
)
def test_a_report_with_a_bad_field_is_a_400_naming_it_and_changes_nothing(
    world, client_for, running, body, field
):
    response = client_for(world.executor).post(f"{JOBS}{running.pk}/report/", body, format="json")

    assert response.status_code == 400 and list(response.json()) == [field]
    running.refresh_from_db()
    assert (running.status, running.taken_at, running.lease_expires_at) == (JobStatus.SCHEDULED, None, None)


def test_a_report_with_an_unpaired_surrogate_is_a_400_naming_the_field(world, client_for, running):
    raw = '{"attempt": 1, "status": "RUNNING", "output_tail": "\\ud800"}'
    response = client_for(world.executor).post(
        f"{JOBS}{running.pk}/report/", raw, content_type="application/json"
    )

    assert response.status_code == 400 and list(response.json()) == ["output_tail"]


def test_an_executor_account_cannot_end_a_job_the_simulated_executor_runs(world, client_for, running):
    ServiceEnvironment.objects.filter(pk=world.queue.service_environment_id).update(
        executor=ServiceEnvironment.Executor.SIMULATED
    )

    response = report(client_for(world.executor), running, attempt=1, status="FAILED", exit_code=1)

    assert response.status_code == 409 and "simulated" in response.json()["detail"]
    running.refresh_from_db()
    assert (running.status, running.taken_at) == (JobStatus.SCHEDULED, None)
    assert JobAttempt.objects.get(job=running).exit_code is None


def test_stopped_for_a_job_nobody_asked_to_stop_is_a_409(world, client_for, running):
    assert report(client_for(world.executor), running, attempt=1, status="STOPPED").status_code == 409


def test_every_report_renews_the_lease(world, client_for, running):
    executor = client_for(world.executor)
    executor.get(work_url(world))
    Job.objects.filter(pk=running.pk).update(lease_expires_at=timezone.now() + timedelta(seconds=5))
    report(executor, running, attempt=1, status="STARTING")
    running.refresh_from_db()
    assert running.lease_expires_at > timezone.now() + timedelta(seconds=290)


def test_a_member_cannot_report(world, client_for, running):
    assert report(client_for(world.users["ana"]), running, attempt=1, status="RUNNING").status_code == 403


# --- concurrency (PostgreSQL) ----------------------------------------------------------------------------

RACERS = 8


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_executors_never_take_the_same_job(world):
    jobs = [placed(job_in(world.nlp, [(P5, 1)], name=f"j{i}")) for i in range(3)]
    start = threading.Barrier(RACERS)
    taken: list[int] = []
    failures: list[BaseException] = []

    def take(i: int) -> None:
        try:
            client = APIClient()
            client.force_authenticate(user=world.executor)
            start.wait(timeout=10)
            response = client.get(work_url(world, executor=f"host-{i}"))
            taken.extend(job["id"] for job in response.json()["start"])
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=take, args=(i,)) for i in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    assert sorted(taken) == sorted(job.pk for job in jobs)  # each once, none twice
    assert sum(Executor.objects.values_list("jobs_taken", flat=True)) == 3


# --- which environments an executor account serves ----------------------------------------------------------


@pytest.fixture
def other_executor(world):
    """An executor account of another environment: it holds the permission but does not serve gpu-fleet."""
    from django.contrib.auth.models import Permission

    from tests.factories import ServiceEnvironmentFactory, UserFactory

    account = UserFactory(username="elsewhere-agent")
    account.user_permissions.add(Permission.objects.get(codename="report_job_status"))
    ServiceEnvironmentFactory(name="elsewhere").executor_accounts.add(account)
    return account


def test_an_executor_account_polling_an_environment_it_does_not_serve_gets_a_403_naming_it(
    world, client_for, running, other_executor
):
    response = client_for(other_executor).get(work_url(world, executor="intruder"))
    assert response.status_code == 403
    assert "gpu-fleet" in response.json()["detail"]
    running.refresh_from_db()
    assert running.taken_at is None and not Executor.objects.filter(name="intruder").exists()


def test_a_report_on_another_environments_job_is_a_403_and_changes_nothing(
    world, client_for, running, other_executor
):
    client_for(world.executor).get(work_url(world))
    running.refresh_from_db()
    before = (running.status, running.lease_expires_at, running.attempt)
    for status in ("RUNNING", "FAILED", "STOPPED"):
        response = report(client_for(other_executor), running, status=status, attempt=running.attempt)
        assert response.status_code == 403
        assert "gpu-fleet" in response.json()["detail"]
    running.refresh_from_db()
    assert (running.status, running.lease_expires_at, running.attempt) == before
    assert not JobAttempt.objects.filter(job=running, stopped_at__isnull=False).exists()


def test_staff_act_on_every_environment_without_being_linked(world, client_for, running):
    admin = world.users["admin"]
    assert not world.queue.service_environment.executor_accounts.filter(pk=admin.pk).exists()
    assert [job["id"] for job in client_for(admin).get(work_url(world)).json()["start"]] == [running.pk]
    assert report(client_for(admin), running, status="RUNNING", attempt=1).status_code == 200
