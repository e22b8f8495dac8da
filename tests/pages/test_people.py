"""People: a profile with the user's teams and API token (made, rotated and revoked there, the key shown once),
teams with their members for staff and managers to change, "my jobs" first on the job list, and a job's copy
in the submit form."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token

from scheduling.models import Event, Job, Membership
from tests.factories import UserFactory, job_in
from tests.pages.conftest import P4, P5

pytestmark = pytest.mark.django_db


# --- the profile --------------------------------------------------------------------------------------------


def test_the_profile_names_the_users_teams_and_roles_and_links_the_api_docs(world, client_for):
    html = client_for(world.ben).get(reverse("profile")).content.decode()
    assert '>NLP</a></td><td data-label="Role">manager' in html
    assert f'href="{reverse("api:docs")}"' in html and "You have no API token" in html
    assert 'curl -s -H "Authorization: Token $QUOTAPORTAL_TOKEN" http://testserver/api/v1/jobs/' in html


def test_the_profile_leads_to_the_access_keys_the_notifications_and_the_command_line(world, client_for):
    html = client_for(world.ana).get(reverse("profile")).content.decode()
    assert f'href="{reverse("access-keys")}"' in html and "http://testserver/aws/batch" in html
    assert f'href="{reverse("notifications")}"' in html and "qp login http://testserver" in html


def test_a_token_is_made_shown_once_and_works_then_rotated_and_revoked(world, client_for):
    client = client_for(world.ana)
    made = client.post(reverse("profile"), {"action": "create"})
    key = Token.objects.get(user=world.ana).key
    assert made["Cache-Control"] == "no-store" and key in made.content.decode()
    assert f"export QUOTAPORTAL_TOKEN={key}" in made.content.decode()
    again = client.get(reverse("profile")).content.decode()
    assert key not in again and "Its key is not shown again" in again
    api = Client()
    assert api.get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 200

    rotated = client.post(reverse("profile"), {"action": "rotate"})
    new_key = Token.objects.get(user=world.ana).key
    assert new_key != key and new_key in rotated.content.decode()
    assert api.get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 401

    client.post(reverse("profile"), {"action": "revoke"})
    assert not Token.objects.filter(user=world.ana).exists()
    assert api.get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {new_key}").status_code == 401


def test_a_second_token_is_refused_and_an_unknown_action_named(world, client_for):
    client = client_for(world.ana)
    client.post(reverse("profile"), {"action": "create"})
    again = client.post(reverse("profile"), {"action": "create"})
    assert again.status_code == 409 and "rotate it" in again.content.decode()
    odd = client.post(reverse("profile"), {"action": "explode"})
    assert odd.status_code == 400 and "unknown action" in odd.content.decode()
    assert Token.objects.filter(user=world.ana).count() == 1


def test_the_profile_and_teams_pages_keep_their_query_budgets(
    world, client_for, django_assert_max_num_queries
):
    client = client_for(world.ana)
    with django_assert_max_num_queries(5):  # session + user, memberships, token
        assert client.get(reverse("profile")).status_code == 200
    with django_assert_max_num_queries(5):  # session + user, viewer, teams, members
        assert client.get(reverse("team_list")).status_code == 200
    with django_assert_max_num_queries(5):
        assert client.get(reverse("team_detail", args=[world.team_nlp.pk])).status_code == 200


# --- teams --------------------------------------------------------------------------------------------------


def test_a_member_sees_their_teams_and_who_is_in_them_but_not_other_teams(world, client_for):
    client = client_for(world.ana)
    listing = client.get(reverse("team_list")).content.decode()
    assert "NLP" in listing and "ben" in listing and "Vision" not in listing
    assert client.get(reverse("team_detail", args=[world.team_vision.pk])).status_code == 404
    page = client.get(reverse("team_detail", args=[world.team_nlp.pk])).content.decode()
    assert "Add a member" not in page and "Remove" not in page


def test_a_manager_adds_changes_and_removes_members_through_the_audited_service(world, client_for):
    newcomer = UserFactory(username="ivy")
    client = client_for(world.ben)  # manager of NLP
    url = reverse("team_detail", args=[world.team_nlp.pk])
    added = client.post(url, {"username": "ivy", "role": "member"}, follow=True)
    assert "Added ivy to NLP as member." in added.content.decode()
    client.post(url, {"username": "ivy", "role": "manager"})
    assert Membership.objects.get(team=world.team_nlp, user=newcomer).role == "manager"
    client.post(reverse("team_member_remove", args=[world.team_nlp.pk, newcomer.pk]))
    assert not Membership.objects.filter(team=world.team_nlp, user=newcomer).exists()
    audit = Event.objects.filter(kind="CONFIG_CHANGED", data__object="scheduling.Membership")
    assert audit.count() == 3 and {e.actor_id for e in audit} == {world.ben.pk}


def test_a_member_who_does_not_manage_the_team_cannot_change_it(world, client_for):
    client = client_for(world.ana)
    url = reverse("team_detail", args=[world.team_nlp.pk])
    assert client.post(url, {"username": "chen", "role": "member"}).status_code == 403
    removal = client.post(reverse("team_member_remove", args=[world.team_nlp.pk, world.ben.pk]))
    assert removal.status_code == 403
    assert Membership.objects.filter(team=world.team_nlp, user=world.ben).exists()


def test_an_unknown_username_is_named_on_its_field(world, client_for):
    response = client_for(world.admin).post(
        reverse("team_detail", args=[world.team_nlp.pk]), {"username": "nobody", "role": "member"}
    )
    assert (
        response.status_code == 400
        and "no active user is named &#x27;nobody&#x27;" in response.content.decode()
    )


def test_the_menu_links_the_profile_and_the_teams(world, client_for):
    html = client_for(world.ana).get(reverse("overview")).content.decode()
    assert f'href="{reverse("profile")}"' in html and f'href="{reverse("team_list")}"' in html


# --- my jobs and a copy -------------------------------------------------------------------------------------


def test_a_members_job_list_opens_on_their_own_jobs_and_shows_the_teams_on_request(world, client_for):
    job_in(world.nlp, [(P5, 1)], name="anas-job", user=world.ana)
    job_in(world.nlp, [(P5, 1)], name="bens-job", user=world.ben)
    client = client_for(world.ana)
    mine = client.get(reverse("job_list")).content.decode()
    assert "anas-job" in mine and "bens-job" not in mine and "submitted by you" in mine
    assert '<option value="mine" selected>my jobs</option>' in mine
    everyone = client.get(reverse("job_list"), {"whose": "all"}).content.decode()
    assert "anas-job" in everyone and "bens-job" in everyone
    by_share = client.get(reverse("job_list"), {"quota_share": world.nlp.pk}).content.decode()
    assert "bens-job" in by_share  # a link filtering by something else shows the team's jobs
    staff = client_for(world.admin).get(reverse("job_list")).content.decode()
    assert "anas-job" in staff and "bens-job" in staff


def test_submit_a_copy_opens_the_form_filled_in_from_the_job(world, client_for):
    job = job_in(world.nlp, [(P5, 2), (P4, 3)], name="sweep-7", user=world.ana, scheduling_priority=40)
    Job.objects.filter(pk=job.pk).update(
        payload={"command": ["python3", "sweep.py", "--lr", "3e-4"]}, attempt_duration_seconds=5400
    )
    client = client_for(world.ana)
    page = client.get(reverse("job_detail", args=[job.pk])).content.decode()
    assert f'href="{reverse("job_new")}?copy={job.pk}">Submit a copy</a>' in page
    form = client.get(reverse("job_new"), {"copy": job.pk}).content.decode()
    assert 'name="name" value="sweep-7"' in form and 'name="scheduling_priority" value="40"' in form
    assert re.search(rf'<option value="{world.nlp.pk}" selected>', form)
    assert 'name="pref-TOTAL_FORMS" value="2"' in form
    assert 'name="pref-1-instance_count" value="3"' in form
    assert 'name="attempt_duration_seconds" value="5400"' in form
    assert "sweep.py" in form and "--lr" in form
    tokens = re.findall(r'name="client_token" value="([0-9a-f]+)"', form)
    assert tokens and tokens[0] != job.client_token


def test_a_copy_of_a_job_the_user_may_not_see_is_an_empty_form(world, client_for):
    other = job_in(world.vision, [(P4, 1)], name="visions-secret", user=world.chen)
    form = client_for(world.ana).get(reverse("job_new"), {"copy": other.pk}).content.decode()
    assert "visions-secret" not in form


def test_share_names_carry_their_queue_in_the_jobs_filter_and_the_plan_editor(world, client_for):
    html = client_for(world.admin).get(reverse("job_list")).content.decode()
    assert f'<option value="{world.nlp.pk}">training / nlp</option>' in html
    plan = client_for(world.admin).get(reverse("manage_plan_edit", args=[world.plan.pk])).content.decode()
    assert "training / nlp" in plan


def test_a_member_without_jobs_of_their_own_is_pointed_at_their_teams_jobs(world, client_for):
    job_in(world.nlp, [(P5, 1)], name="bens-job", user=world.ben)
    html = client_for(world.ana).get(reverse("job_list")).content.decode()
    assert "No job of yours matches" in html and 'href="?whose=all"' in html
