"""Jobs on several executors (multi-host.md) through the API: claims, the roster, per-task reports and stops, lost
tasks and start deadlines."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import (
    EventKind,
    Executor,
    Job,
    JobAttempt,
    JobStatus,
    JobTask,
    PendingState,
    TaskState,
)
from scheduling.passes import run as passes
from tests.api.support import P5, placed
from tests.factories import job_in

pytestmark = pytest.mark.django_db


def work(client, world, name, free, **query):
    params = {
        "executor": name,
        "free_slots": free,
        "gang": "true",
        "slots": free,
        "address": query.pop("address", ""),
    }
    params.update(query)
    url = f"/api/v1/service-environments/{world.queue.service_environment_id}/work/"
    response = client.get(url, params)
    assert response.status_code == 200, response.content
    return response.json()


def report(client, job, **body):
    return client.post(f"/api/v1/jobs/{job.pk}/report/", body, format="json")


@pytest.fixture
def gang(world):
    return placed(job_in(world.nlp, [(P5, 3)], name="gang", payload={"command": ["train"]}), count=3)


def test_a_gang_starts_nothing_until_every_instance_is_claimed_then_all_get_the_roster(
    world, client_for, gang
):
    agent = client_for(world.executor)
    first = work(agent, world, "a", 1, address="127.0.0.2", ports="29500-29510")
    (start,) = first["start"]
    assert (start["task"], start["task_instances"], start["roster"]) == (0, 1, None)
    assert first["go"] == []
    gang.refresh_from_db()
    assert gang.status == JobStatus.SCHEDULED and gang.roster_at is None and "1 of 3" in gang.status_reason
    # An executor without tasks never takes a job part of which is claimed.
    old = client_for(world.executor).get(
        f"/api/v1/service-environments/{world.queue.service_environment_id}/work/?executor=old&free_slots=3"
    )
    assert old.json() == {"start": [], "stop": []}

    second = work(agent, world, "b", 2, address="127.0.0.3")
    (start,) = second["start"]
    assert (start["task"], start["task_instances"]) == (1, 2)
    roster = start["roster"]
    assert (
        roster["main_address"] == "127.0.0.2" and roster["main_port"] == 29500 and roster["world_size"] == 2
    )
    assert [(t["rank"], t["address"], t["instances"]) for t in roster["tasks"]] == [
        (0, "127.0.0.2", 1),
        (1, "127.0.0.3", 2),
    ]
    # a's next poll carries the go for rank 0, until it says it runs.
    (go,) = work(agent, world, "a", 0)["go"]
    assert (go["id"], go["task"], go["roster"]) == (gang.pk, 0, roster)
    gang.refresh_from_db()
    assert gang.status == JobStatus.STARTING and gang.roster_at is not None

    assert report(agent, gang, attempt=1, task=0, status="RUNNING").status_code == 200
    gang.refresh_from_db()
    assert gang.status == JobStatus.STARTING  # rank 1 does not run yet
    assert work(agent, world, "a", 0)["go"] == []
    assert report(agent, gang, attempt=1, task=1, status="RUNNING").status_code == 200
    gang.refresh_from_db()
    assert gang.status == JobStatus.RUNNING
    (started,) = gang.events.filter(kind=EventKind.STARTED)
    assert started.message.endswith("(2 task(s) on a, b)")

    assert report(agent, gang, attempt=1, task=1, status="SUCCEEDED", exit_code=0).status_code == 200
    gang.refresh_from_db()
    assert gang.status == JobStatus.RUNNING  # rank 0 still runs
    assert report(agent, gang, attempt=1, task=0, status="SUCCEEDED", exit_code=0).status_code == 200
    gang.refresh_from_db()
    assert gang.status == JobStatus.SUCCEEDED and "all 2 ranks exited 0" in gang.status_reason


def test_a_rank_that_fails_stops_every_other_and_the_attempt_fails_as_one_naming_it(world, client_for, gang):
    agent = client_for(world.executor)
    gang.retry_attempts = 2
    gang.save()
    for name in ("a", "b", "c"):
        work(agent, world, name, 1)
    for rank in range(3):
        report(agent, gang, attempt=1, task=rank, status="RUNNING")
    response = report(
        agent, gang, attempt=1, task=1, status="FAILED", exit_code=1, reason="exited with code 1"
    )
    assert response.status_code == 200
    gang.refresh_from_db()
    assert gang.status == JobStatus.STOPPING and gang.failed_attempts == 1
    assert "rank 1 on b exited with code 1" in gang.status_reason
    # The survivors' executors each get a stop for their own task; b's nothing.
    assert [(s["task"], s["id"]) for s in work(agent, world, "a", 0)["stop"]] == [(0, gang.pk)]
    assert [s["task"] for s in work(agent, world, "c", 0)["stop"]] == [2]
    assert work(agent, world, "b", 0)["stop"] == []
    report(agent, gang, attempt=1, task=0, status="STOPPED", exit_code=143)
    gang.refresh_from_db()
    assert gang.status == JobStatus.STOPPING  # rank 2 still holds its instance
    report(agent, gang, attempt=1, task=2, status="STOPPED", exit_code=143)
    gang.refresh_from_db()
    assert gang.status == JobStatus.RUNNABLE and "retrying" in gang.status_reason
    attempt = JobAttempt.objects.get(job=gang, attempt=1)
    assert attempt.exit_code == 1 and attempt.stopped_at is not None
    failed = gang.events.get(kind=EventKind.FAILED)
    assert "rank 1" in failed.message


def test_a_report_about_a_task_that_ended_is_refused_so_its_process_stops(world, client_for, gang):
    agent = client_for(world.executor)
    for name in ("a", "b", "c"):
        work(agent, world, name, 1)
    for rank in range(3):
        report(agent, gang, attempt=1, task=rank, status="RUNNING")
    report(agent, gang, attempt=1, task=2, status="FAILED", exit_code=3)
    report(agent, gang, attempt=1, task=0, status="STOPPED")
    report(agent, gang, attempt=1, task=1, status="STOPPED")
    gang.refresh_from_db()
    assert gang.status == JobStatus.FAILED
    heartbeat = report(agent, gang, attempt=1, task=1, status="RUNNING")
    assert heartbeat.status_code == 409
    assert report(agent, gang, attempt=1, task=7, status="RUNNING").status_code == 409


def test_a_lost_task_stops_the_survivors_and_capacity_is_held_until_they_stopped(world, client_for, gang):
    agent = client_for(world.executor)
    for name in ("a", "b", "c"):
        work(agent, world, name, 1)
    for rank in range(3):
        report(agent, gang, attempt=1, task=rank, status="RUNNING")
    JobTask.objects.filter(job=gang, rank=2).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    Job.objects.filter(pk=gang.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    passes.queue_pass_run(job_queue_id=world.queue.pk, trigger="test")
    gang.refresh_from_db()
    assert gang.status == JobStatus.STOPPING and "EXECUTOR_LOST" in gang.stop_reason
    assert JobTask.objects.get(job=gang, rank=2).state == TaskState.LOST
    lost = gang.events.get(kind=EventKind.TASK_LOST)
    assert "rank 2 on c" in lost.message
    assert [s["task"] for s in work(agent, world, "a", 0)["stop"]] == [0]
    report(agent, gang, attempt=1, task=0, status="STOPPED")
    report(agent, gang, attempt=1, task=1, status="STOPPED")
    gang.refresh_from_db()
    assert gang.status == JobStatus.FAILED and gang.selected_instance_count == 3  # retry_attempts 1


def test_a_claim_whose_executor_goes_silent_before_the_roster_is_released_for_another(
    world, client_for, gang
):
    agent = client_for(world.executor)
    work(agent, world, "a", 1)
    JobTask.objects.filter(job=gang).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    Job.objects.filter(pk=gang.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    passes.queue_pass_run(job_queue_id=world.queue.pk, trigger="test")
    gang.refresh_from_db()
    assert gang.status == JobStatus.SCHEDULED and gang.failed_attempts == 0
    assert JobTask.objects.get(job=gang).state == TaskState.RELEASED
    assert [s["task"] for s in work(agent, world, "a", 0)["stop"]] == [0]  # a frees what it reserved
    (start,) = work(agent, world, "d", 3)["start"]
    assert (start["task"], start["task_instances"], start["roster"]["world_size"]) == (0, 3, 1)


def test_gangs_are_claimed_in_placement_order_so_two_never_each_hold_half(world, client_for, gang):
    later = placed(job_in(world.nlp, [(P5, 2)], name="later"), count=2)
    agent = client_for(world.executor)
    claims = [work(agent, world, name, 1)["start"] for name in ("a", "b", "c", "d", "e")]
    assert [c[0]["id"] for c in claims] == [gang.pk] * 3 + [later.pk] * 2
    assert Job.objects.get(pk=gang.pk).roster_at is not None
    assert Job.objects.get(pk=later.pk).roster_at is not None


def test_a_gang_not_gathered_by_its_deadline_goes_back_runnable_and_waits_its_backoff(
    world, client_for, gang, settings
):
    settings.START_BACKOFF_BASE_SECONDS = 60
    agent = client_for(world.executor)
    work(agent, world, "a", 1)  # only one of three instances ever claimed
    environment = world.queue.service_environment
    Job.objects.filter(pk=gang.pk).update(
        scheduled_at=timezone.now() - timedelta(seconds=environment.start_deadline_seconds + 1)
    )
    passes.queue_pass_run(job_queue_id=world.queue.pk, trigger="test")
    gang.refresh_from_db()
    assert gang.status == JobStatus.RUNNABLE and gang.failed_attempts == 0 and gang.start_timeouts == 1
    assert gang.not_before is not None and 55 <= (gang.not_before - timezone.now()).total_seconds() <= 61
    assert "START_TIMEOUT" in gang.status_reason and "never claimed" in gang.status_reason
    assert "claimed: rank 0 by a" in gang.status_reason
    assert JobTask.objects.get(job=gang).state == TaskState.RELEASED
    event = gang.events.get(kind=EventKind.START_TIMEOUT)
    assert "executor(s) asking for" in event.message
    # The next pass does not place it again, and says why.
    passes.queue_pass_run(job_queue_id=world.queue.pk, trigger="test")
    gang.refresh_from_db()
    assert gang.status == JobStatus.RUNNABLE
    assert PendingState.objects.get(job=gang).status_reason.startswith("START_TIMEOUT")
    # Once the backoff is over it is placed again (attempt 2).
    Job.objects.filter(pk=gang.pk).update(not_before=timezone.now() - timedelta(seconds=1))
    passes.queue_pass_run(job_queue_id=world.queue.pk, trigger="test")
    gang.refresh_from_db()
    assert gang.status == JobStatus.SCHEDULED and gang.attempt == 2


def test_a_job_nobody_takes_times_out_and_says_it_is_larger_than_the_executors_can_hold(world, client_for):
    job = job_in(world.nlp, [(P5, 3)], name="big")
    passes.queue_pass_run(job_queue_id=world.queue.pk, trigger="test")
    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED
    # An executor that does not take tasks, with 2 slots, polls: it cannot take the job whole.
    client_for(world.executor).get(
        f"/api/v1/service-environments/{world.queue.service_environment_id}/work/"
        f"?executor=old&free_slots=2&slots=2&instance_type={P5}"
    )
    environment = world.queue.service_environment
    Job.objects.filter(pk=job.pk).update(
        scheduled_at=timezone.now() - timedelta(seconds=environment.start_deadline_seconds + 1)
    )
    passes.queue_pass_run(job_queue_id=world.queue.pk, trigger="test")
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNABLE and job.start_timeouts == 1 and job.attempt == 1
    assert "no executor claimed any of its 3 instance(s)" in job.status_reason
    assert "it needs 3 instances but they can hold at most 2" in job.status_reason
    assert JobAttempt.objects.get(job=job, attempt=1).stopped_at is not None


def test_an_offer_wakes_a_waiting_poll_which_claims_with_the_freed_slots(world, client_for, gang):
    agent = client_for(world.executor)
    work(agent, world, "a", 0)
    response = agent.post(
        f"/api/v1/service-environments/{world.queue.service_environment_id}/offer/",
        {"executor": "a", "free_slots": 3},
        format="json",
    )
    assert response.status_code == 204
    assert Executor.objects.get(name="a").offered_slots == 3
    unknown = agent.post(
        f"/api/v1/service-environments/{world.queue.service_environment_id}/offer/",
        {"executor": "nobody", "free_slots": 1},
        format="json",
    )
    assert unknown.status_code == 409


def test_a_poll_asking_for_tasks_without_free_slots_is_refused_naming_the_field(world, client_for):
    response = client_for(world.executor).get(
        f"/api/v1/service-environments/{world.queue.service_environment_id}/work/?gang=true"
    )
    assert response.status_code == 400 and "free_slots" in response.json()
    bad_ports = client_for(world.executor).get(
        f"/api/v1/service-environments/{world.queue.service_environment_id}/work/?gang=true&free_slots=1&ports=9-1"
    )
    assert bad_ports.status_code == 400 and "ports" in bad_ports.json()


def test_a_jobs_attempt_lists_its_tasks_and_metrics_count_timeouts_losses_and_claim_to_running(
    world, client_for, gang, client
):
    agent = client_for(world.executor)
    for name, address in (("a", "127.0.0.2"), ("b", "127.0.0.3"), ("c", "127.0.0.4")):
        work(agent, world, name, 1, address=address)
    for rank in range(3):
        report(agent, gang, attempt=1, task=rank, status="RUNNING", output_tail=f"rank {rank} says hi")
    report(agent, gang, attempt=1, task=2, status="FAILED", exit_code=7, reason="exited with code 7")

    body = client_for(world.ana).get(f"/api/v1/jobs/{gang.pk}/").json()
    (attempt,) = body["attempts"]
    assert [(t["rank"], t["executor"], t["address"], t["state"]) for t in attempt["tasks"]] == [
        (0, "a", "127.0.0.2", "RUNNING"),
        (1, "b", "127.0.0.3", "RUNNING"),
        (2, "c", "127.0.0.4", "FAILED"),
    ]
    assert attempt["tasks"][2]["exit_code"] == 7 and attempt["tasks"][2]["output_tail"] == "rank 2 says hi"
    assert attempt["tasks"][0]["port"] == 29400  # the main port, on rank 0 (the default range)
    assert attempt["exit_code"] == 7  # the failing rank's

    client.force_login(world.ana)
    page = client.get(f"/jobs/{gang.pk}/").content.decode()
    assert "Tasks of attempt 1" in page and "127.0.0.4" in page and "rank 2 says hi" in page

    metrics = client.get("/metrics").content.decode()
    assert "quotaportal_claim_to_running_seconds_count 1.0" in metrics
    assert 'quotaportal_tasks_lost_total{queue="training"} 0.0' in metrics


def test_when_rank_0_exits_0_the_others_have_the_grace_period_to_finish_then_are_stopped(
    world, client_for, gang
):
    agent = client_for(world.executor)
    for name in ("a", "b", "c"):
        work(agent, world, name, 1)
    for rank in range(3):
        report(agent, gang, attempt=1, task=rank, status="RUNNING")
    report(agent, gang, attempt=1, task=0, status="SUCCEEDED", exit_code=0)
    gang.refresh_from_db()
    assert gang.status == JobStatus.STOPPING and gang.stop_outcome == "SUCCEEDED"
    assert "ranks 1, 2 may finish" in gang.status_reason
    assert work(agent, world, "b", 0)["stop"] == []  # not stopped: they may finish
    report(agent, gang, attempt=1, task=1, status="SUCCEEDED", exit_code=0)
    gang.refresh_from_db()
    assert gang.status == JobStatus.STOPPING  # rank 2 still runs, within the grace period

    # Rank 2 does not finish in time: at the deadline the job succeeds, and rank 2's heartbeat is refused.
    Job.objects.filter(pk=gang.pk).update(stop_deadline=timezone.now() - timedelta(seconds=1))
    passes.queue_pass_run(job_queue_id=world.queue.pk, trigger="test")
    gang.refresh_from_db()
    assert gang.status == JobStatus.SUCCEEDED
    assert report(agent, gang, attempt=1, task=2, status="RUNNING").status_code == 409
    assert gang.events.filter(kind=EventKind.SUCCEEDED).exists()


def test_when_every_rank_finishes_after_rank_0_within_the_grace_the_job_succeeds(world, client_for, gang):
    agent = client_for(world.executor)
    for name in ("a", "b", "c"):
        work(agent, world, name, 1)
    for rank in range(3):
        report(agent, gang, attempt=1, task=rank, status="RUNNING")
    for rank in (0, 2, 1):
        report(agent, gang, attempt=1, task=rank, status="SUCCEEDED", exit_code=0)
    gang.refresh_from_db()
    assert gang.status == JobStatus.SUCCEEDED and gang.events.filter(kind=EventKind.SUCCEEDED).count() == 1


def test_a_gathering_job_says_on_its_page_what_is_claimed_and_when_its_deadline_puts_it_back(
    world, client_for, gang
):
    from django.test import Client

    work(client_for(world.executor), world, "a", 1)
    page = Client()
    page.force_login(world.ana)
    body = page.get(f"/jobs/{gang.pk}/").content.decode()
    untaken = body.split('id="untaken"', 1)[1].split("</p>", 1)[0]
    assert "1 of 3 instances claimed (rank 0 by a); nothing starts until all are" in untaken
    assert "goes back to the queue (START_TIMEOUT)" in untaken


def test_a_job_whose_claims_were_released_may_be_taken_whole_and_reported_as_before(world, client_for, gang):
    agent = client_for(world.executor)
    work(agent, world, "a", 1)
    JobTask.objects.filter(job=gang).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    Job.objects.filter(pk=gang.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    passes.queue_pass_run(job_queue_id=world.queue.pk, trigger="test")
    url = f"/api/v1/service-environments/{world.queue.service_environment_id}/work/?executor=old&free_slots=3"
    (start,) = agent.get(url).json()["start"]
    assert start["id"] == gang.pk and "task" not in start
    assert report(agent, gang, attempt=1, status="RUNNING").status_code == 200
    gang.refresh_from_db()
    assert gang.status == JobStatus.RUNNING and gang.taken_by.name == "old"


def test_a_report_from_the_executor_whose_claim_was_released_never_touches_the_ranks_new_claim(
    world, client_for, gang
):
    agent = client_for(world.executor)
    work(agent, world, "a", 1)
    JobTask.objects.filter(job=gang).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    Job.objects.filter(pk=gang.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    passes.queue_pass_run(job_queue_id=world.queue.pk, trigger="test")  # a's rank 0 is released
    (start,) = work(agent, world, "b", 1)["start"]
    assert start["task"] == 0  # rank 0 again, now b's
    late = report(agent, gang, attempt=1, task=0, executor="a", status="STOPPED", reason="released")
    assert late.status_code == 200  # a's own (released) claim: nothing moves
    assert JobTask.objects.get(job=gang, executor_name="b").state == TaskState.WAITING
    assert report(agent, gang, attempt=1, task=0, executor="c", status="RUNNING").status_code == 409


def test_a_poll_that_takes_tasks_reads_its_gos_and_rosters_in_the_same_queries_however_many(
    world, client_for
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    agent = client_for(world.executor)
    for i in range(5):
        placed(job_in(world.nlp, [(P5, 1)], name=f"g{i}", payload={"command": ["x"]}), count=1)
    assert len(work(agent, world, "many", 4)["start"]) == 4  # four jobs, each taken whole
    assert len(work(agent, world, "one", 1)["start"]) == 1

    def cost(name: str) -> tuple[int, int]:
        with CaptureQueriesContext(connection) as captured:
            gos = work(agent, world, name, 0)["go"]
        return len(gos), len(captured)

    (many_gos, many), (one_gos, one) = cost("many"), cost("one")
    assert (many_gos, one_gos) == (4, 1) and many == one
