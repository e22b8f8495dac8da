"""Issue 14, items 1-3: deleting a share, queue, environment or team loses nothing a user submitted; events
keep their team for good and are read by it alone; a share does not move to another team under its jobs."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from scheduling.models import (
    Event,
    EventKind,
    Job,
    JobQueue,
    JobStatus,
    QuotaShare,
    ServiceEnvironment,
    Team,
    TrainingPlan,
)
from scheduling.services import jobs as job_services
from tests.api.support import P4, P5, placed, submission
from tests.factories import job_in

pytestmark = pytest.mark.django_db

API = "/api/v1"


def submit(client, **overrides) -> dict:
    response = client.post(f"{API}/jobs/", submission(**overrides), format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def on_demand(count: int = 1) -> list[dict]:
    return [{"instance_type": P5, "instance_count": count}]


def disable(client, path: str) -> None:
    assert client.patch(path, {"state": "DISABLED"}, format="json").status_code == 200


def event_kinds(client, job_id: int) -> list[str]:
    response = client.get(f"{API}/events/?job={job_id}")
    assert response.status_code == 200
    return [event["kind"] for event in response.json()["results"]]


# --- item 1: a deleted share's or queue's jobs stay, cancelled, readable with their history ---------------


def test_deleting_a_share_cancels_its_jobs_and_the_submitter_still_reads_them_whole(world, client_for):
    ana, admin = client_for(world.ana), client_for(world.admin)
    running = submit(
        ana, name="running", instance_preferences=on_demand(), payload={"secret": "s1", "command": ["true"]}
    )
    waiting = submit(
        ana, name="waiting", instance_preferences=on_demand(), payload={"secret": "s2", "command": ["true"]}
    )
    placed(Job.objects.get(pk=running["id"]), count=1)
    disable(admin, f"{API}/quota-shares/{world.nlp.pk}/")

    assert admin.delete(f"{API}/quota-shares/{world.nlp.pk}/").status_code == 204

    for body in (running, waiting):
        job = ana.get(f"{API}/jobs/{body['id']}/")
        assert job.status_code == 200
        read = job.json()
        assert (read["status"], read["quota_share"], read["job_queue"], read["team"]) == (
            JobStatus.CANCELLED,
            "nlp",
            "training",
            "nlp",
        )
        assert read["payload"] == body["payload"]
        assert read["status_reason"] == "cancelled: share nlp was deleted"
        assert event_kinds(ana, body["id"])[0] == EventKind.CANCELLED
        assert EventKind.SUBMITTED in event_kinds(ana, body["id"])
    attempts = ana.get(f"{API}/jobs/{running['id']}/").json()["attempts"]
    assert len(attempts) == 1 and attempts[0]["stopped_at"] is not None  # its capacity is free
    listed = ana.get(f"{API}/jobs/?quota_share=nlp").json()
    assert {job["id"] for job in listed["results"]} == {running["id"], waiting["id"]}


def test_a_deleted_shares_jobs_stay_hidden_from_other_teams(world, client_for):
    job = submit(client_for(world.ana), instance_preferences=on_demand())
    admin = client_for(world.admin)
    disable(admin, f"{API}/quota-shares/{world.nlp.pk}/")
    admin.delete(f"{API}/quota-shares/{world.nlp.pk}/")

    chen = client_for(world.chen)
    assert chen.get(f"{API}/jobs/{job['id']}/").status_code == 404
    assert chen.get(f"{API}/events/?job={job['id']}").json()["results"] == []
    assert b"pretrain" not in chen.get(f"{API}/events/").content


def test_deleting_a_queue_cancels_its_jobs_which_stay_readable_and_keeps_the_audit(world, client_for):
    ana, admin = client_for(world.ana), client_for(world.admin)
    job = submit(ana, instance_preferences=on_demand(), payload={"keep": True, "command": ["true"]})
    world.plan.delete()  # a plan no job names goes with its queue
    disable(admin, f"{API}/job-queues/{world.queue.pk}/")

    assert admin.delete(f"{API}/job-queues/{world.queue.pk}/").status_code == 204

    assert not JobQueue.objects.exists() and not QuotaShare.objects.exists()
    read = ana.get(f"{API}/jobs/{job['id']}/").json()
    assert (read["status"], read["job_queue"], read["quota_share"], read["payload"]) == (
        JobStatus.CANCELLED,
        "training",
        "nlp",
        {"keep": True, "command": ["true"]},
    )
    assert read["status_reason"] == "cancelled: queue training was deleted"
    assert event_kinds(ana, job["id"]) == [EventKind.CANCELLED, EventKind.SUBMITTED]
    assert Event.objects.filter(data__object="scheduling.JobQueue", data__action="deleted").count() == 1
    assert len(ana.get(f"{API}/jobs/?job_queue=training").json()["results"]) == 1


def test_a_queue_whose_training_plan_a_job_names_is_409_naming_the_plan(world, client_for):
    job_in(world.nlp, [(P5, 1, world.plan)])
    admin = client_for(world.admin)
    disable(admin, f"{API}/job-queues/{world.queue.pk}/")

    response = admin.delete(f"{API}/job-queues/{world.queue.pk}/")

    assert response.status_code == 409
    assert "nlp-p5-december" in response.json()["detail"]
    assert JobQueue.objects.filter(pk=world.queue.pk).exists() and TrainingPlan.objects.exists()
    assert Job.objects.get().status == JobStatus.RUNNABLE  # nothing half-done


def test_an_environment_serving_a_queue_is_409_and_once_the_queue_is_gone_it_deletes(world, client_for):
    admin = client_for(world.admin)
    environment = world.queue.service_environment
    job = submit(client_for(world.ana), instance_preferences=on_demand())

    refused = admin.delete(f"{API}/service-environments/{environment.pk}/")
    assert refused.status_code == 409 and "job queue" in refused.json()["detail"]

    world.plan.delete()
    disable(admin, f"{API}/job-queues/{world.queue.pk}/")
    admin.delete(f"{API}/job-queues/{world.queue.pk}/")
    assert admin.delete(f"{API}/service-environments/{environment.pk}/").status_code == 204
    assert not ServiceEnvironment.objects.filter(pk=environment.pk).exists()
    assert client_for(world.ana).get(f"{API}/jobs/{job['id']}/").status_code == 200


def test_a_team_with_jobs_is_409_naming_them_even_once_its_shares_are_gone(world, client_for):
    admin = client_for(world.admin)
    submit(client_for(world.ana), instance_preferences=on_demand())
    disable(admin, f"{API}/quota-shares/{world.nlp.pk}/")
    admin.delete(f"{API}/quota-shares/{world.nlp.pk}/")
    world.plan.delete()

    response = admin.delete(f"{API}/teams/{world.team_nlp.pk}/")

    assert response.status_code == 409
    assert "1 job" in response.json()["detail"]
    assert Team.objects.filter(pk=world.team_nlp.pk).exists()


def test_a_team_that_owns_nothing_deletes(world, client_for):
    team = Team.objects.create(name="empty", slug="empty")

    assert client_for(world.admin).delete(f"{API}/teams/{team.pk}/").status_code == 204


def test_a_cancelled_job_of_a_deleted_queue_answers_cancel_with_409(world, client_for):
    ana, admin = client_for(world.ana), client_for(world.admin)
    job = submit(ana, instance_preferences=on_demand())
    world.plan.delete()
    disable(admin, f"{API}/job-queues/{world.queue.pk}/")
    admin.delete(f"{API}/job-queues/{world.queue.pk}/")

    assert ana.post(f"{API}/jobs/{job['id']}/cancel/", {}, format="json").status_code == 409
    assert ana.patch(f"{API}/jobs/{job['id']}/", {"scheduling_priority": 5}, format="json").status_code == 409


# --- item 2: events keep their team and are read by it ----------------------------------------------------


def test_events_keep_their_team_after_their_share_is_deleted_and_other_teams_never_read_them(
    world, client_for
):
    job = submit(client_for(world.ana), name="secret-run", instance_preferences=on_demand())
    admin = client_for(world.admin)
    disable(admin, f"{API}/quota-shares/{world.nlp.pk}/")
    admin.delete(f"{API}/quota-shares/{world.nlp.pk}/")

    events = Event.objects.filter(job_id=job["id"])
    assert events.count() == 2 and set(events.values_list("team_id", flat=True)) == {world.team_nlp.pk}
    outsider = client_for(world.chen).get(f"{API}/events/").json()["results"]
    assert all(event["job"] is None for event in outsider)
    assert not any("secret-run" in event["message"] or "ana" in event["message"] for event in outsider)
    mine = client_for(world.ana).get(f"{API}/events/?job={job['id']}").json()["results"]
    assert [event["quota_share"] for event in mine] == ["nlp", "nlp"]  # the name outlives the share
    assert "ana submitted secret-run to share nlp" in mine[-1]["message"]


def test_a_pass_writes_its_events_with_the_jobs_team(world, client_for):
    job = job_in(world.vision, [(P4, 1)])
    admin = client_for(world.admin)

    assert admin.post(f"{API}/job-queues/{world.queue.pk}/schedule/").status_code == 200

    admitted = Event.objects.get(job=job, kind=EventKind.ADMITTED)
    assert admitted.team_id == world.team_vision.pk


def test_members_read_only_their_teams_events_and_configuration_changes(world, client_for):
    nlp_job = submit(client_for(world.ana), name="nlp-secret", instance_preferences=on_demand())
    client_for(world.admin).patch(f"{API}/job-queues/{world.queue.pk}/", {"priority": 7}, format="json")

    chen = client_for(world.chen).get(f"{API}/events/").json()["results"]
    assert [event["kind"] for event in chen] == [EventKind.CONFIG_CHANGED]
    ana = client_for(world.ana).get(f"{API}/events/").json()["results"]
    assert {event["kind"] for event in ana} == {EventKind.CONFIG_CHANGED, EventKind.SUBMITTED}
    assert ana[-1]["job"]["id"] == nlp_job["id"]


def test_a_preempted_teams_event_names_the_other_teams_job_without_its_name(world, client_for):
    victim = job_in(world.vision, [(P4, 1)], name="vision-victim")
    preemptor = job_in(world.nlp, [(P4, 1)], name="nlp-preemptor")
    Event.objects.create(
        kind=EventKind.PREEMPTED_RECLAIM,
        job=victim,
        team=world.team_vision,
        other_job=preemptor,
        quota_share=world.vision,
        other_share=world.nlp,
        job_queue=world.queue,
        message="nlp-preemptor reclaimed from vision-victim",
    )

    chen = client_for(world.chen).get(f"{API}/events/").json()["results"][0]
    assert chen["job"]["name"] == "vision-victim" and chen["other_job"]["name"] is None
    ana = client_for(world.ana).get(f"{API}/events/").json()["results"][0]
    assert ana["other_job"]["name"] == "nlp-preemptor" and ana["job"]["name"] is None
    assert "vision-victim" not in ana["message"]


def test_an_executor_account_reads_every_event(world, client_for):
    submit(client_for(world.ana), instance_preferences=on_demand())

    events = client_for(world.executor).get(f"{API}/events/").json()["results"]
    assert [event["kind"] for event in events] == [EventKind.SUBMITTED]
    assert "ana submitted" in events[0]["message"]


# --- item 3: a share does not move to another team under its jobs ---------------------------------------


def test_moving_a_share_with_unfinished_jobs_to_another_team_is_a_400_naming_team_and_count(
    world, client_for
):
    submit(client_for(world.ana), instance_preferences=on_demand())
    submit(client_for(world.ana), instance_preferences=on_demand(), name="second")

    response = client_for(world.admin).patch(
        f"{API}/quota-shares/{world.nlp.pk}/", {"team": "vision"}, format="json"
    )

    assert response.status_code == 400
    assert list(response.json()) == ["team"]
    assert "2 unfinished job(s) of team NLP" in response.json()["team"][0]
    assert QuotaShare.objects.get(pk=world.nlp.pk).team_id == world.team_nlp.pk


def test_a_share_moves_once_its_jobs_have_finished_and_they_stay_the_old_teams(world, client_for):
    ana = client_for(world.ana)
    job = submit(ana, instance_preferences=on_demand())
    job_services.job_cancel(job_id=job["id"], actor=None)

    response = client_for(world.admin).patch(
        f"{API}/quota-shares/{world.nlp.pk}/", {"team": "vision"}, format="json"
    )

    assert response.status_code == 200 and response.json()["team"] == "vision"
    assert ana.get(f"{API}/jobs/{job['id']}/").json()["team"] == "nlp"
    chen = client_for(world.chen)
    assert chen.get(f"{API}/jobs/{job['id']}/").status_code == 404
    assert len(chen.get(f"{API}/jobs/?quota_share=nlp").json()["results"]) == 0
    assert chen.get(f"{API}/events/?job={job['id']}").json()["results"] == []


def test_renaming_a_share_renames_it_on_its_jobs(world, client_for):
    ana = client_for(world.ana)
    job = submit(ana, instance_preferences=on_demand())

    client_for(world.admin).patch(f"{API}/quota-shares/{world.nlp.pk}/", {"name": "nlp-2"}, format="json")

    assert ana.get(f"{API}/jobs/{job['id']}/").json()["quota_share"] == "nlp-2"
    assert len(ana.get(f"{API}/jobs/?quota_share=nlp-2").json()["results"]) == 1


def test_the_database_refuses_an_unfinished_job_without_its_share(world):
    job = job_in(world.nlp, [(P5, 1)])

    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(pk=job.pk).update(quota_share=None)
