"""Why a job waits reads the same, word for word, on its page, in the REST API and in the AWS-compatible API."""

from __future__ import annotations

import html

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from scheduling.models import Job
from scheduling.passes import run as passes
from tests.api.support import P4, P5
from tests.factories import job_in

pytestmark = pytest.mark.django_db(transaction=True)

# Two entries, each refused for its own reason, joined as a person reads them today.
EXPECTED = (
    "ml.p5.48xlarge x4: share nlp at its limit 4/4 and RESERVE cannot borrow; "
    "ml.p4d.24xlarge x9: share nlp has 4 left of its limit (0/4) and RESERVE cannot borrow"
)


def test_a_waiting_jobs_reason_reads_the_same_everywhere(world, batch_for):
    job_in(world.nlp, [(P5, 4)], name="holds-p5")
    waits = job_in(world.nlp, [(P5, 4), (P4, 9)], name="waits")
    passes.queue_pass_run(job_queue_id=world.queue.pk, trigger="test")
    stored = Job.objects.select_related("pending").get(pk=waits.pk)
    assert stored.current_reason == EXPECTED and stored.queue_position == 1

    api = APIClient()
    api.force_authenticate(user=world.ana)
    body = api.get(f"/api/v1/jobs/{waits.pk}/").json()
    assert (body["status_reason"], body["queue_position"]) == (EXPECTED, 1)

    aws = batch_for(world.ana).describe_service_job(jobId=str(waits.pk))
    assert aws["statusReason"] == EXPECTED

    page = Client()
    page.force_login(world.ana)
    detail = html.unescape(page.get(reverse("job_detail", args=[waits.pk])).content.decode())
    assert EXPECTED in detail
    share = html.unescape(page.get(reverse("share_detail", args=[world.nlp.pk])).content.decode())
    assert EXPECTED in share
