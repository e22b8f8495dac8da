"""Jobs and events page by cursor (no count, any depth as fast as the first page); `?page=N` stops at
IdCursors.MAX_PAGE_ROWS rows with a 400 pointing at the cursor."""

from __future__ import annotations

from base64 import b64encode
from datetime import timedelta
from urllib import parse

import pytest

from api.pagination import IdCursors
from scheduling.models import Event, EventKind
from tests.api.support import P5
from tests.factories import job_in

pytestmark = pytest.mark.django_db

EVENTS = "/api/v1/events/"
JOBS = "/api/v1/jobs/"


@pytest.fixture(autouse=True)
def _pages_of_three(monkeypatch):
    monkeypatch.setattr(IdCursors, "page_size", 3)
    monkeypatch.setattr(IdCursors, "MAX_PAGE_ROWS", 9)


@pytest.fixture
def events(world) -> list[Event]:
    return [
        Event.objects.create(kind=EventKind.CONFIG_CHANGED, job_queue=world.queue, message=f"change {i}")
        for i in range(8)
    ]


def ids(response) -> list[int]:
    assert response.status_code == 200, response.json()
    return [row["id"] for row in response.json()["results"]]


def walk(client, url, params=None, link="next") -> list[list[int]]:
    """The ids of every page, following `link` from `url` to the end."""
    pages = []
    response = client.get(url, params)
    while True:
        pages.append(ids(response))
        url = response.json()[link]
        if url is None:
            return pages
        response = client.get(url)


def cursor(position: int, reverse: bool = False) -> str:
    return b64encode(f"p={position}{'&r=1' if reverse else ''}".encode()).decode()


def test_events_follow_cursors_newest_first_to_the_end(world, client_for, events):
    pages = walk(client_for(world.ana), EVENTS)

    assert pages == [[e.pk for e in reversed(events)][i : i + 3] for i in (0, 3, 6)]


def test_a_cursor_list_has_no_count(world, client_for, events):
    body = client_for(world.ana).get(EVENTS).json()

    assert set(body) == {"next", "previous", "results"}
    assert "cursor=" in body["next"]
    assert body["previous"] is None


def test_previous_leads_back_to_the_first_page(world, client_for, events):
    client = client_for(world.ana)
    last = client.get(client.get(client.get(EVENTS).json()["next"]).json()["next"])

    assert walk(client, last.json()["previous"], link="previous") == [
        [events[4].pk, events[3].pk, events[2].pk],
        [events[7].pk, events[6].pk, events[5].pk],
    ]


def test_a_new_event_does_not_shift_the_pages_being_read(world, client_for, events):
    client = client_for(world.ana)
    first = client.get(EVENTS)

    Event.objects.create(kind=EventKind.CONFIG_CHANGED, job_queue=world.queue, message="newer")

    assert ids(client.get(first.json()["next"])) == [events[4].pk, events[3].pk, events[2].pk]


def test_the_since_id_tail_follows_cursors_oldest_first(world, client_for, events):
    pages = walk(client_for(world.ana), EVENTS, {"since_id": events[0].pk, "kind": "CONFIG_CHANGED"})

    assert pages == [[e.pk for e in events[1:4]], [e.pk for e in events[4:7]], [events[7].pk]]


def test_the_since_tail_follows_cursors_oldest_first(world, client_for, events):
    pages = walk(client_for(world.ana), EVENTS, {"since": "1970-01-01T00:00:00Z"})

    assert pages == [[e.pk for e in events[i : i + 3]] for i in (0, 3, 6)]


def test_the_since_tail_goes_by_time_when_ids_and_times_disagree(world, client_for, events):
    late = events[0]
    Event.objects.filter(pk=late.pk).update(created_at=events[-1].created_at + timedelta(seconds=1))
    pages = walk(client_for(world.ana), EVENTS, {"since": "1970-01-01T00:00:00Z"})

    assert pages == [[e.pk for e in events[1:4]], [e.pk for e in events[4:7]], [events[7].pk, late.pk]]


def test_previous_leads_back_along_the_since_tail(world, client_for, events):
    client = client_for(world.ana)
    last = client.get(
        client.get(client.get(EVENTS, {"since": "1970-01-01T00:00:00Z"}).json()["next"]).json()["next"]
    )

    assert walk(client, last.json()["previous"], link="previous") == [
        [e.pk for e in events[3:6]],
        [e.pk for e in events[0:3]],
    ]


def test_a_cursor_built_at_an_old_id_reads_from_there(world, client_for, events):
    response = client_for(world.ana).get(EVENTS, {"cursor": cursor(events[3].pk)})

    assert ids(response) == [events[2].pk, events[1].pk, events[0].pk]
    assert response.json()["next"] is None


def test_page_numbers_still_read_the_first_rows(world, client_for, events):
    body = client_for(world.ana).get(EVENTS, {"page": 2}).json()

    assert [row["id"] for row in body["results"]] == [events[4].pk, events[3].pk, events[2].pk]
    assert set(body) == {"next", "previous", "results"}
    assert body["next"].endswith("?page=3")
    assert body["previous"].endswith("/api/v1/events/")


def test_the_last_numbered_page_leads_on_by_cursor(world, client_for, events):
    client = client_for(world.ana)
    last_numbered = client.get(EVENTS, {"page": 3})  # rows 7-9 of at most 9 by number

    assert ids(last_numbered) == [events[1].pk, events[0].pk]
    assert last_numbered.json()["next"] is None
    more = Event.objects.bulk_create(
        Event(kind=EventKind.CONFIG_CHANGED, job_queue=world.queue, message="more") for _ in range(3)
    )
    third = client.get(EVENTS, {"page": 3}).json()
    assert "page=" not in third["next"] and "cursor=" in third["next"]
    assert ids(client.get(third["next"])) == [events[1].pk, events[0].pk]
    assert len(more) == 3


def test_a_page_past_the_cap_is_a_400_pointing_at_the_cursor(world, client_for, events):
    response = client_for(world.ana).get(EVENTS, {"page": 4})

    assert response.status_code == 400
    [message] = response.json()["page"]
    assert "cursor" in message and "9" in message


def test_a_page_past_the_end_is_a_404_and_page_one_of_nothing_is_empty(world, client_for):
    client = client_for(world.ana)

    assert client.get(EVENTS, {"page": 2}).status_code == 404
    assert client.get(EVENTS, {"page": 1}).json() == {"next": None, "previous": None, "results": []}


@pytest.mark.parametrize(
    "bad",
    [
        "garbage!",
        b64encode(b"p=abc").decode(),
        b64encode(b"p=1.5").decode(),
        b64encode(b"p=99999999999999999999999").decode(),
        b64encode(b"o=5&p=3").decode(),
        b64encode(b"p=3&r=2").decode(),
        b64encode(b"p=2026-01-01T00:00:00 3").decode(),
    ],
)
def test_a_cursor_that_is_not_one_of_ours_is_a_404(world, client_for, events, bad):
    assert client_for(world.ana).get(EVENTS, {"cursor": bad}).status_code == 404


@pytest.mark.parametrize(
    "bad", ["3", "2026-13-01T00:00:00+00:00 3", "0001-01-01T00:00:00+01:00 3", "2026-01-01T00:00:00 3", "x 3"]
)
def test_a_since_cursor_that_is_not_a_time_and_an_id_is_a_404(world, client_for, events, bad):
    token = b64encode(parse.urlencode({"p": bad}).encode()).decode()
    response = client_for(world.ana).get(EVENTS, {"since": "1970-01-01T00:00:00Z", "cursor": token})

    assert response.status_code == 404


def test_an_empty_cursor_is_the_first_page(world, client_for, events):
    assert ids(client_for(world.ana).get(EVENTS, {"cursor": ""})) == [e.pk for e in events[:4:-1]]


@pytest.mark.parametrize("page", ["0", "-1", "abc", "²", ""])
def test_a_page_that_is_not_a_number_is_a_404(world, client_for, events, page):
    assert client_for(world.ana).get(EVENTS, {"page": page}).status_code == 404


def test_jobs_follow_cursors_newest_first(world, client_for):
    jobs = [job_in(world.nlp, [(P5, 1)], name=f"j{i}") for i in range(5)]
    job_in(world.vision, [(P5, 1)], name="theirs")

    pages = walk(client_for(world.ana), JOBS, {"quota_share": "nlp"})

    assert pages == [[j.pk for j in jobs[4:1:-1]], [jobs[1].pk, jobs[0].pk]]
