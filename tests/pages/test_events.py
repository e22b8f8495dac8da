"""The event log: filters, a live tail that appends only what is newer, and other teams kept out."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scheduling.models import Event, EventKind
from tests.factories import job_in
from tests.pages.conftest import G5, P4, P5, htmx_headers

pytestmark = pytest.mark.django_db


def test_event_log_lists_events_newest_first_with_filters(world, client_for):
    job_in(world.nlp, [(P5, 1)], name="first")
    world.run_pass()
    Event.objects.create(kind=EventKind.CONFIG_CHANGED, message="admin changed quota share nlp: state")
    client = client_for(world.admin)
    html = client.get(reverse("event_log")).content.decode()
    assert html.index("admin changed quota share nlp") < html.index("placed on ml.p5.48xlarge x1")
    only_config = client.get(reverse("event_log"), {"kind": "CONFIG_CHANGED"}).content.decode()
    assert "admin changed quota share" in only_config and "placed on" not in only_config
    by_share = client.get(reverse("event_log"), {"quota_share": world.vision.pk}).content.decode()
    assert "placed on" not in by_share


def test_event_tail_returns_only_newer_rows_and_a_poller_that_remembers_the_last(world, client_for):
    client = client_for(world.admin)
    old = Event.objects.create(kind=EventKind.CONFIG_CHANGED, message="old news")
    page = client.get(reverse("event_log")).content.decode()
    assert f'after={old.pk}"' in page and "old news" in page and "<template>" not in page
    new = Event.objects.create(kind=EventKind.CONFIG_CHANGED, message="fresh news")
    tail = client.get(
        reverse("event_log"), {"after": old.pk}, headers=htmx_headers("event-tail")
    ).content.decode()
    assert "fresh news" in tail and "old news" not in tail and "<html" not in tail
    assert 'hx-swap-oob="afterbegin:#event-rows"' in tail and f'after={new.pk}"' in tail
    quiet = client.get(
        reverse("event_log"), {"after": new.pk}, headers=htmx_headers("event-tail")
    ).content.decode()
    assert "<tr" not in quiet and f'after={new.pk}"' in quiet


def test_event_tail_keeps_the_filters(world, client_for):
    html = client_for(world.admin).get(reverse("event_log"), {"kind": "FAILED"}).content.decode()
    assert "?kind=FAILED&amp;after=0" in html


def test_a_member_sees_their_teams_events_and_configuration_changes_only(world, client_for):
    job_in(world.nlp, [(P5, 1)], name="nlp-job")
    borrower = job_in(world.vision, [(P4, 12)], name="vision-borrower")
    world.run_pass()
    reclaimer = job_in(world.speech, [(P4, 3)], name="speech-reclaims")
    world.run_pass()
    Event.objects.create(kind=EventKind.CONFIG_CHANGED, message="admin changed queue training")
    html = client_for(world.ana).get(reverse("event_log")).content.decode()
    assert "nlp-job" in html and "admin changed queue training" in html
    assert (
        "vision-borrower" not in html and "speech-reclaims" not in html and f"job {borrower.pk}" not in html
    )
    chen = client_for(world.chen).get(reverse("event_log")).content.decode()
    assert "vision-borrower" in chen and "speech-reclaims" not in chen
    assert "of share speech to reclaim" in chen  # why its job stopped, in the engine's words (ids, no names)
    assert f"vision-borrower (#{borrower.pk}) of share vision preempted by a job of another team" in chen
    admin = client_for(world.admin).get(reverse("event_log")).content.decode()
    assert (
        f"vision-borrower (#{borrower.pk}) of share vision preempted by speech-reclaims (#{reclaimer.pk}) "
        "of share speech to reclaim"
    ) in admin


def test_event_log_keeps_its_query_budget(world, client_for, django_assert_max_num_queries):
    for i in range(30):
        job_in(world.vision, [(G5, 1)], name=f"v{i}")
    world.run_pass()
    client = client_for(world.chen)
    with django_assert_max_num_queries(7):  # session + user, viewer, events, filter choices (queues, shares)
        assert client.get(reverse("event_log")).status_code == 200
    with django_assert_max_num_queries(7):
        assert (
            client.get(reverse("event_log"), {"after": 1}, headers=htmx_headers("event-tail")).status_code
            == 200
        )


def test_event_log_pages_back_to_older_events_without_a_tail(world, client_for, settings):
    settings.PAGE_LIST_SIZE = 2
    events = [Event.objects.create(kind=EventKind.CONFIG_CHANGED, message=f"change {i}") for i in range(5)]
    client = client_for(world.admin)
    first = client.get(reverse("event_log")).content.decode()
    assert "change 4" in first and "change 2" not in first and f"before={events[3].pk}" in first
    older = client.get(reverse("event_log"), {"before": events[3].pk}).content.decode()
    assert "change 2" in older and "change 1" in older and "change 4" not in older
    assert 'id="event-tail"' not in older and "Back to the newest" in older
