"""Every role against every page and fragment, and CSRF on every form and htmx post.

Roles: anonymous, member (ana, NLP), manager (ben, NLP), manager of another team (dana, Vision), executor
account (holds report_job_status, no team), staff. The job at stake belongs to team NLP.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scheduling.models import Membership
from tests.factories import MembershipFactory, UserFactory, job_in
from tests.pages.conftest import P5, htmx_headers
from whatif.models import WhatIfRun

pytestmark = pytest.mark.django_db

ROLES = ("anonymous", "member", "manager", "other_manager", "executor", "staff")
SIGN_IN, OK, FORBIDDEN, NOT_FOUND = "sign-in", 200, 403, 404


@pytest.fixture
def people(world):
    other_manager = UserFactory(username="dana")
    MembershipFactory(team=world.team_vision, user=other_manager, role=Membership.Role.MANAGER)
    executor = UserFactory(username="executor")
    executor.user_permissions.add(Permission.objects.get(codename="report_job_status"))
    job = job_in(world.nlp, [(P5, 1)], user=world.ana, name="nlp-job")
    now = timezone.now()
    whatif = WhatIfRun.objects.create(
        job_queue=world.queue,
        source=WhatIfRun.Source.HISTORY,
        window_days=1,
        window_start=now - timedelta(days=1),
        window_end=now,
        baseline={},
        proposal=[],
    )
    return {
        "member": world.ana,
        "manager": world.ben,
        "other_manager": other_manager,
        "executor": executor,
        "staff": world.admin,
        "job": job,
        "whatif": whatif,
    }


def client_as(role: str, people) -> Client:
    client = Client()
    if role != "anonymous":
        client.force_login(people[role])
    return client


def expected(role: str, rule: str):
    """What a role gets from a page of this kind."""
    if role == "anonymous":
        return SIGN_IN
    if rule == "signed-in":
        return OK
    if rule == "staff":
        return OK if role == "staff" else FORBIDDEN
    # "team": the NLP job's pages; members of other teams (and teamless accounts) do not learn it exists
    return OK if role in ("member", "manager", "staff") else NOT_FOUND


def pages(world, job, whatif):
    """(method, url, rule, htmx target or None)"""
    return [
        ("get", reverse("overview"), "signed-in", None),
        ("get", reverse("overview"), "signed-in", "overview-live"),
        ("get", reverse("share_detail", args=[world.nlp.pk]), "signed-in", None),
        ("get", reverse("job_list"), "signed-in", None),
        ("get", reverse("job_list"), "signed-in", "job-table"),
        ("get", reverse("job_new"), "signed-in", None),
        ("get", reverse("job_detail", args=[job.pk]), "team", None),
        ("get", reverse("job_detail", args=[job.pk]), "team", "job-live"),
        ("get", reverse("event_log"), "signed-in", None),
        ("get", reverse("manage_queues"), "staff", None),
        ("get", reverse("manage_queue_edit", args=[world.queue.pk]), "staff", None),
        ("get", reverse("manage_environments"), "staff", None),
        ("get", reverse("manage_shares"), "staff", None),
        ("get", reverse("manage_share_edit", args=[world.nlp.pk]), "staff", None),
        ("get", reverse("manage_plans"), "staff", None),
        ("get", reverse("manage_plan_edit", args=[world.plan.pk]), "staff", None),
        ("get", reverse("manage_whatif"), "staff", None),
        ("get", reverse("manage_whatif"), "staff", "whatif-editor"),
        ("get", reverse("manage_whatif_run", args=[whatif.pk]), "staff", None),
        ("get", reverse("manage_whatif_run", args=[whatif.pk]), "staff", "whatif-live"),
    ]


@pytest.mark.parametrize("role", ROLES)
def test_every_role_gets_what_it_may_from_every_page_and_fragment(world, people, role):
    client = client_as(role, people)
    for _method, url, rule, target in pages(world, people["job"], people["whatif"]):
        response = client.get(url, headers=htmx_headers(target) if target else {})
        want = expected(role, rule)
        if want == SIGN_IN:
            if target:
                assert response.headers.get("HX-Redirect", "").startswith(reverse("login")), (
                    role,
                    url,
                    target,
                )
            else:
                assert response.status_code == 302 and response["Location"].startswith(reverse("login")), (
                    role,
                    url,
                )
        else:
            assert response.status_code == want, (role, url, target, response.status_code)


@pytest.mark.parametrize("role", ROLES)
def test_job_actions_are_for_the_submitter_team_managers_and_staff(world, people, role):
    client = client_as(role, people)
    job = people["job"]
    response = client.post(reverse("job_priority", args=[job.pk]), {"scheduling_priority": 7})
    job.refresh_from_db()
    if role == "anonymous":
        assert response.status_code == 302 and job.scheduling_priority == 0
    elif role in ("member", "manager", "staff"):
        assert response.status_code in (200, 302) and job.scheduling_priority == 7
    else:
        assert response.status_code == 404 and job.scheduling_priority == 0


POSTS = [
    # (url name, args, data): every form and htmx post of the pages
    ("job_new", (), {}),
    ("job_new_rows", (), {"action": "add"}),
    ("job_new_validate", (), {}),
    ("job_cancel", ("job",), {}),
    ("job_priority", ("job",), {"scheduling_priority": 3}),
    ("manage_share_check", (), {}),
    ("manage_queue_new", (), {}),
    ("manage_environment_new", (), {}),
    ("manage_share_new", (), {}),
    ("manage_plan_new", (), {}),
    ("manage_whatif", (), {}),
    ("manage_whatif_apply", ("whatif",), {"confirm": "on"}),
    ("logout", (), {}),
]


@pytest.mark.parametrize("name,args,data", POSTS, ids=[post[0] for post in POSTS])
def test_every_form_and_htmx_post_needs_the_csrf_token(world, people, name, args, data):
    client = Client(enforce_csrf_checks=True)
    client.force_login(people["staff"])
    url = reverse(name, args=[people[a].pk for a in args])
    assert client.post(url, data).status_code == 403
    assert client.post(url, data, headers=htmx_headers()).status_code == 403
    client.get(reverse("overview"))  # the page sets the cookie its forms and hx-headers carry
    token = client.cookies["csrftoken"].value
    response = client.post(url, data, headers={**htmx_headers(), "X-CSRFToken": token})
    assert response.status_code != 403, (name, response.status_code)
