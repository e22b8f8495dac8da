"""GET /events/: a member reads their teams' and the configuration's, never a job's payload; filters and the
tailing cursors."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Event, EventKind
from tests.api.support import P4, P5
from tests.factories import job_in

pytestmark = pytest.mark.django_db

EVENTS = "/api/v1/events/"


@pytest.fixture
def history(world):
    """Four events a minute apart: nlp's job submitted and admitted, vision's submitted, a config change."""
    start = timezone.now() - timedelta(minutes=10)
    nlp_job = job_in(world.nlp, [(P5, 1)], name="secret-nlp", payload={"token": "s3cr3t"})
    vision_job = job_in(world.vision, [(P4, 1)], name="vision-job", payload={"token": "v1s10n"})
    rows = [
        Event.objects.create(
            kind=EventKind.SUBMITTED,
            job=nlp_job,
            team=world.team_nlp,
            quota_share=world.nlp,
            job_queue=world.queue,
            message="submitted",
            created_at=start,
        ),
        Event.objects.create(
            kind=EventKind.ADMITTED,
            job=nlp_job,
            team=world.team_nlp,
            quota_share=world.nlp,
            job_queue=world.queue,
            message="admitted",
            created_at=start + timedelta(minutes=1),
        ),
        Event.objects.create(
            kind=EventKind.SUBMITTED,
            job=vision_job,
            team=world.team_vision,
            quota_share=world.vision,
            job_queue=world.queue,
            message="submitted",
            created_at=start + timedelta(minutes=2),
        ),
        Event.objects.create(
            kind=EventKind.PREEMPTED_RECLAIM,
            job=vision_job,
            team=world.team_vision,
            other_job=nlp_job,
            quota_share=world.vision,
            other_share=world.nlp,
            job_queue=world.queue,
            message="reclaimed",
            created_at=start + timedelta(minutes=3),
        ),
    ]
    return {"events": rows, "nlp_job": nlp_job, "vision_job": vision_job}


def ids(response) -> list[int]:
    assert response.status_code == 200, response.json()
    return [event["id"] for event in response.json()["results"]]


def test_events_are_newest_first(world, client_for, history):
    assert ids(client_for(world.admin).get(EVENTS)) == [e.pk for e in reversed(history["events"])]


def test_a_member_reads_only_events_of_their_teams_jobs_and_other_teams_jobs_there_have_no_name(
    world, client_for, history
):
    response = client_for(world.chen).get(EVENTS)

    assert b"s3cr3t" not in response.content and b"secret-nlp" not in response.content
    assert b"v1s10n" not in response.content
    assert ids(response) == [history["events"][3].pk, history["events"][2].pk]  # vision's, not nlp's
    reclaim = response.json()["results"][0]
    assert reclaim["job"] == {
        "id": history["vision_job"].pk,
        "name": "vision-job",
        "team": "vision",
        "status": "RUNNABLE",
    }
    assert reclaim["other_job"] == {
        "id": history["nlp_job"].pk,
        "name": None,
        "team": "nlp",
        "status": "RUNNABLE",
    }
    assert (reclaim["quota_share"], reclaim["other_share"]) == ("vision", "nlp")
    assert reclaim["job_queue"] == "training"


def test_an_event_body_names_its_references(world, client_for, history):
    body = client_for(world.ana).get(EVENTS).json()["results"][-1]

    assert set(body) == {
        "id",
        "kind",
        "job_queue",
        "job",
        "quota_share",
        "other_job",
        "other_share",
        "instance_type",
        "instances",
        "actor",
        "message",
        "data",
        "created_at",
    }
    assert (body["kind"], body["other_job"], body["actor"]) == ("SUBMITTED", None, None)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("kind=SUBMITTED", [2, 0]),
        ("kind=PREEMPTED_RECLAIM", [3]),
        ("quota_share=nlp", [1, 0]),
        ("quota_share=vision", [3, 2]),
        ("quota_share=vision&kind=SUBMITTED", [2]),
    ],
)
def test_event_filters(world, client_for, history, query, expected):
    events = history["events"]

    assert ids(client_for(world.admin).get(f"{EVENTS}?{query}")) == [events[i].pk for i in expected]


def test_events_filter_by_job_id(world, client_for, history):
    events = history["events"]

    response = client_for(world.admin).get(EVENTS, {"job": history["nlp_job"].pk})

    assert ids(response) == [events[1].pk, events[0].pk]


def test_since_returns_events_strictly_after_it_oldest_first(world, client_for, history):
    events = history["events"]
    since = events[1].created_at.isoformat().replace("+00:00", "Z")

    response = client_for(world.admin).get(EVENTS, {"since": since})

    assert ids(response) == [events[2].pk, events[3].pk]


def test_since_id_is_a_cursor_for_tailing(world, client_for, history):
    events = history["events"]
    client = client_for(world.admin)

    first = ids(client.get(EVENTS, {"since_id": events[0].pk}))
    newer = Event.objects.create(kind=EventKind.CONFIG_CHANGED, message="later", job_queue=world.queue)
    tail = ids(client.get(EVENTS, {"since_id": first[-1]}))

    assert first == [events[1].pk, events[2].pk, events[3].pk]
    assert tail == [newer.pk]


def test_a_bad_since_is_a_400_naming_since(world, client_for, history):
    response = client_for(world.ana).get(EVENTS, {"since": "yesterday"})

    assert response.status_code == 400
    assert list(response.json()) == ["since"]


@pytest.mark.parametrize(
    "parameter,value",
    [
        ("job", "99999999999999999999999"),
        ("job", "9223372036854775808"),
        ("job", "1.5"),
        ("job", "0"),
        ("since_id", "9223372036854775808"),
        ("since_id", "2.5"),
        ("since_id", "-1"),
    ],
)
def test_an_id_filter_no_id_can_match_is_a_400_naming_it(world, client_for, history, parameter, value):
    client = client_for(world.ana)
    client.raise_request_exception = False

    response = client.get(EVENTS, {parameter: value})

    assert response.status_code == 400
    assert list(response.json()) == [parameter]


def test_config_changes_through_the_api_are_events_with_their_actor(world, client_for):
    client_for(world.admin).patch(f"/api/v1/job-queues/{world.queue.pk}/", {"priority": 9}, format="json")

    [event] = client_for(world.ana).get(EVENTS, {"kind": "CONFIG_CHANGED"}).json()["results"]

    assert event["actor"] == "admin"
    assert event["job_queue"] == "training"
    assert event["data"]["before"]["priority"] == 0
    assert event["data"]["after"]["priority"] == 9
    assert event["message"] == "admin changed job queue training: priority"
