"""The pages and the AWS-compatible API: an attempt duration on the form and the job page, a mark on jobs
that came through the AWS API, and the API docs' link to the AWS endpoint."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scheduling.models import Job
from tests.factories import job_in
from tests.pages.conftest import P4, P5
from tests.pages.test_jobs import form_data

pytestmark = pytest.mark.django_db


def test_the_submit_form_takes_an_attempt_duration_and_the_job_page_shows_it(world, client_for):
    client = client_for(world.ana)
    data = form_data(world, [(P5, 2, None)], attempt_duration_seconds=7200)
    client.post(reverse("job_new"), data)
    job = Job.objects.get()
    assert job.attempt_duration_seconds == 7200
    assert "at most 7200 s an attempt" in client.get(reverse("job_detail", args=[job.pk])).content.decode()


def test_the_submit_form_takes_relocate_and_the_job_page_says_where_it_moves(world, client_for):
    client = client_for(world.ana)
    client.post(reverse("job_new"), form_data(world, [(P5, 2, None), (P4, 2, None)], relocate="on"))
    job = Job.objects.get()
    assert job.relocate
    page = client.get(reverse("job_detail", args=[job.pk])).content.decode()
    assert "moves to an earlier preference when it has room nobody waiting asks for, after 600 s" in page
    job.nominated_entry, job.nominated_victims = 0, [job.pk]
    job.save(update_fields=["nominated_entry", "nominated_victims"])
    assert "moving to preference 1 now" in client.get(reverse("job_detail", args=[job.pk])).content.decode()


def test_an_attempt_duration_out_of_range_is_refused_on_its_field(world, client_for):
    data = form_data(world, [(P5, 2, None)], attempt_duration_seconds=2_592_001)
    response = client_for(world.ana).post(reverse("job_new"), data)
    assert response.status_code == 400 and not Job.objects.exists()
    assert "less than or equal to 2592000" in response.content.decode()


def test_jobs_that_came_through_the_aws_api_are_marked_on_the_list_and_their_page(world, client_for):
    aws = job_in(world.nlp, [(P4, 1)], name="from-boto3", submitted_via="aws")
    plain = job_in(world.nlp, [(P4, 1)], name="from-the-form")
    client = client_for(world.ana)
    listing = client.get(reverse("job_list"), {"whose": "all"}).content.decode()
    row_of = {
        name: listing[listing.index(name) : listing.index(name) + 400]
        for name in ("from-boto3", "from-the-form")
    }
    assert "submitted through the AWS-compatible API" in row_of["from-boto3"]
    assert "AWS-compatible API" not in row_of["from-the-form"]
    assert "via AWS API" in client.get(reverse("job_detail", args=[aws.pk])).content.decode()
    assert "via AWS API" not in client.get(reverse("job_detail", args=[plain.pk])).content.decode()


def test_the_api_docs_point_to_the_aws_endpoint_and_the_access_keys(world, client_for):
    schema = client_for(world.ana).get("/api/v1/schema/", HTTP_ACCEPT="application/json").content.decode()
    assert "/aws/batch" in schema and "/profile/access-keys/" in schema and "/api/v1/access-keys/" in schema
