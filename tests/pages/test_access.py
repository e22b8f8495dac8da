"""Sign-in, sign-out and who may open which page."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from scheduling.models import Job, TrainingPlan
from scheduling.services import configuration as config_services
from scheduling.services import jobs as job_services
from tests.factories import job_in
from tests.pages.conftest import P5

pytestmark = pytest.mark.django_db

PAGES = [
    "overview",
    "job_list",
    "job_new",
    "event_log",
    "manage_queues",
    "manage_environments",
    "manage_shares",
    "manage_plans",
    "manage_queue_new",
    "manage_environment_new",
    "manage_share_new",
    "manage_plan_new",
]
ADMIN_PAGES = [name for name in PAGES if name.startswith("manage_")]


@pytest.mark.parametrize("name", PAGES)
def test_every_page_sends_an_anonymous_visitor_to_sign_in(client, name):
    url = reverse(name)
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next={url}"


def test_pages_with_ids_and_fragments_require_sign_in_too(client, world):
    for url in [
        reverse("share_detail", args=[world.nlp.pk]),
        reverse("job_detail", args=[1]),
        reverse("job_new_validate"),
        reverse("job_new_rows"),
        reverse("manage_share_check"),
    ]:
        response = client.post(url) if "new/" in url or "check" in url else client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login"))


def test_login_page_signs_a_member_in_and_lands_on_the_overview(world):
    client = Client()
    page = client.get(reverse("login"))
    assert page.status_code == 200 and b'name="username"' in page.content and b"app.css" in page.content
    response = client.post(reverse("login"), {"username": "ana", "password": "pw-for-tests-1"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_login_page_says_when_the_password_is_wrong(world):
    response = Client().post(reverse("login"), {"username": "ana", "password": "nope"})
    assert response.status_code == 200
    assert b"Please enter a correct username and password" in response.content


def test_sign_out_is_a_post_that_ends_the_session(world, client_for):
    client = client_for(world.ana)
    response = client.post(reverse("logout"))
    assert response.status_code == 302 and response["Location"] == reverse("login")
    assert client.get("/").status_code == 302


def test_navigation_shows_the_administration_to_staff_only(world, client_for):
    member = client_for(world.ana).get("/").content.decode()
    staff = client_for(world.admin).get("/").content.decode()
    for name in ("manage_queues", "manage_environments", "manage_shares", "manage_plans"):
        assert f'href="{reverse(name)}"' in staff
        assert f'href="{reverse(name)}"' not in member
    assert 'href="/admin/"' in staff and 'href="/admin/"' not in member
    for name in ("overview", "job_list", "job_new", "event_log"):
        assert f'href="{reverse(name)}"' in member


@pytest.mark.parametrize("name", ADMIN_PAGES)
def test_administration_pages_are_forbidden_to_members(world, client_for, name):
    assert client_for(world.ben).get(reverse(name)).status_code == 403


def test_every_page_carries_csrf_for_htmx_and_no_inline_script(world, client_for):
    client = client_for(world.admin)
    for name in PAGES:
        html = client.get(reverse(name)).content.decode()
        assert """hx-headers='{"X-CSRFToken": """ in html, name
        assert "/static/django_htmx/htmx-2.min.js" in html and "/static/portal/app.js" in html
        assert "<script>" not in html and " onclick=" not in html and " style=" not in html, name


def test_htmx_is_served_from_the_app_not_a_cdn(world, client_for):
    html = client_for(world.ana).get("/").content.decode()
    assert "https://" not in html.split("<body")[0]


def test_a_live_region_polling_after_sign_out_sends_the_whole_tab_to_sign_in(client):
    response = client.get(
        "/",
        headers={
            "HX-Request": "true",
            "HX-Target": "overview-live",
            "HX-Current-URL": "http://testserver/shares/3/?window=day",
        },
    )
    assert response.status_code == 200
    assert response["HX-Redirect"] == f"{reverse('login')}?next=/shares/3/%3Fwindow%3Dday"


# --- jobs of a deleted or moved share, or a deleted queue: their team reads them, no one else -------------


def _share_deleted(world):
    share = config_services.quota_share_update(
        share=world.nlp, changes={"state": "DISABLED"}, limits=None, actor=None
    )
    config_services.quota_share_delete(share=share, actor=None)


def _queue_deleted(world):
    TrainingPlan.objects.all().delete()  # no job names them
    queue = config_services.job_queue_update(job_queue=world.queue, changes={"state": "DISABLED"}, actor=None)
    config_services.job_queue_delete(job_queue=queue, actor=None)


def _share_moved(world):
    for job in Job.objects.filter(quota_share=world.nlp):
        job_services.job_cancel(job_id=job.pk, actor=None)
    config_services.quota_share_update(
        share=world.nlp, changes={"team": world.team_vision}, limits=None, actor=None
    )


@pytest.mark.parametrize("change", [_share_deleted, _queue_deleted, _share_moved])
def test_a_jobs_page_and_events_stay_its_teams_after_its_share_or_queue_goes_or_moves(
    world, client_for, change
):
    job = job_in(world.nlp, [(P5, 1)], user=world.ana, name="nlp-secret-run", payload={"k": "hidden"})
    world.run_pass()
    change(world)

    page = client_for(world.ana).get(reverse("job_detail", args=[job.pk]))
    assert page.status_code == 200 and "nlp-secret-run" in page.content.decode()
    assert "CANCELLED" in page.content.decode()
    assert client_for(world.chen).get(reverse("job_detail", args=[job.pk])).status_code == 404
    for outsider in (world.chen, world.eli):
        events = client_for(outsider).get(reverse("event_log")).content.decode()
        assert "nlp-secret-run" not in events and "ana submitted" not in events
    assert "nlp-secret-run" in client_for(world.ana).get(reverse("event_log")).content.decode()
    assert "nlp-secret-run" in client_for(world.ana).get(reverse("job_list")).content.decode()
