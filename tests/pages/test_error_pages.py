"""Error pages in the site's layout with a sentence of why, one log line for a 403, the favicon, the skip link,
and form fields that say which of them are wrong."""

from __future__ import annotations

import logging

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from django.urls import reverse

from tests.factories import job_in
from tests.pages.conftest import P5


@pytest.fixture
def member(world, client_for) -> Client:
    client = client_for(world.ana)
    client.raise_request_exception = False
    return client


def test_a_member_following_an_admin_link_gets_a_styled_403_with_the_reason(member):
    response = member.get(reverse("manage_queues"))
    html = response.content.decode()
    assert response.status_code == 403
    assert 'class="topbar"' in html and "You may not open this page" in html
    assert "The administration pages are for staff." in html and "ana, who is not staff" in html
    assert f'href="{reverse("overview")}"' in html


def test_a_missing_page_and_another_teams_job_get_a_styled_404_with_why(world, member):
    html = member.get("/no/such/page/").content.decode()
    assert "There is nothing here" in html and "<code>/no/such/page/</code>" in html
    assert 'class="topbar"' in html
    hidden = job_in(world.vision, [(P5, 1)], name="vision-only")
    response = member.get(reverse("job_detail", args=[hidden.pk]))
    assert response.status_code == 404
    assert "No such job, or it belongs to another team." in response.content.decode()


def test_the_500_page_stands_alone_with_a_way_back(rf):
    from portal.views.errors import server_error

    response = server_error(rf.get("/"))
    html = response.content.decode()
    assert response.status_code == 500 and "Something went wrong on our side" in html
    assert 'href="/"' in html


def test_a_403_is_logged_once_in_one_line_without_a_traceback(member, caplog):
    with caplog.at_level(logging.INFO):
        member.get(reverse("manage_queues"))
    refused = [r for r in caplog.records if r.name == "django.request"]
    assert len(refused) == 1 and refused[0].levelno == logging.WARNING
    assert refused[0].exc_info is None and "Forbidden" in refused[0].getMessage()


def test_every_page_links_a_favicon_that_exists_and_a_skip_link_to_main(member):
    html = member.get(reverse("overview")).content.decode()
    assert 'rel="icon" href="/static/portal/favicon.svg"' in html
    assert finders.find("portal/favicon.svg")
    assert '<a class="skip-link" href="#main">Skip to main content</a>' in html and 'id="main"' in html
    assert member.get("/favicon.ico").status_code in (301, 302)


def test_fields_with_errors_are_marked_invalid_and_described_by_their_errors(world, client_for):
    client = client_for(world.ana)
    response = client.post(reverse("job_new"), {"name": "", "action": "submit"})
    html = response.content.decode()
    assert response.status_code == 400
    assert 'aria-invalid="true"' in html
    assert 'aria-describedby="id_name_helptext errors-name"' in html and 'id="errors-name"' in html
    quiet = client.get(reverse("job_new")).content.decode()
    assert 'aria-invalid="true"' not in quiet and 'aria-describedby="id_name_helptext"' in quiet
    assert 'id="errors-name"' in quiet  # the slot stays, empty, for the inline check to fill


def test_capacity_bars_say_their_numbers_to_screen_readers(world, client_for):
    job_in(world.nlp, [(P5, 2)], name="p5-pair", user=world.ana)
    world.run_pass()
    html = client_for(world.admin).get(reverse("overview")).content.decode()
    assert f'role="img" aria-label="{P5}: 2 of 8 in use, 0 borrowed;' in html
    assert f'aria-label="{P5}: 2 of a limit of 4 in use, 0 borrowed; 0 lent to other shares' in html
