"""Estimated start times are shown where people look: the job page, the share's pending table, the jobs list,
the API, and the submit form before submitting."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scheduling.services.estimates import queue_estimates_refresh
from tests.factories import job_in
from tests.pages.conftest import P5, htmx_headers
from tests.pages.test_jobs import form_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def waiting(world):
    """nlp's 4 P5s held for an hour by one job; a second waits behind it, estimated."""
    jobs = [job_in(world.nlp, [(P5, 4)], duration_seconds=3600) for _ in range(2)]
    world.run_pass()
    queue_estimates_refresh(job_queue_id=world.queue.pk)
    return jobs[1]


def test_job_page_says_when_a_waiting_job_is_likely_to_start(world, client_for, waiting):
    body = client_for(world.ana).get(reverse("job_detail", args=[waiting.pk])).content.decode()
    assert "likely to start around" in body
    assert f"once 1 job on {P5} (running or placed before it) ends" in body


def test_share_page_and_jobs_list_show_the_likely_start(world, client_for, waiting):
    share_page = client_for(world.ana).get(reverse("share_detail", args=[world.nlp.pk])).content.decode()
    assert "Likely start" in share_page and "likely to start around" in share_page
    jobs_list = client_for(world.ana).get(reverse("job_list"), {"whose": "all"}).content.decode()
    assert "likely to start around" in jobs_list


def test_api_gives_estimated_start_with_its_basis(world, client_for, waiting):
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(world.ana)
    body = api.get(f"/api/v1/jobs/{waiting.pk}/").json()
    assert body["estimated_start"]["basis"].startswith(
        f"once 1 job on {P5} (running or placed before it) ends"
    )
    assert body["estimated_start"]["earliest"] is not None


def test_submit_form_says_when_the_job_would_start_if_submitted_now(world, client_for, waiting):
    data = form_data(world, [(P5, 4, None)], duration_seconds=600)
    body = (
        client_for(world.ana).post(reverse("job_new_validate"), data, headers=htmx_headers()).content.decode()
    )
    assert "If submitted now: likely to start around" in body
