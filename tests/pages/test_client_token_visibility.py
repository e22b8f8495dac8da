"""The submit form's client_token: a former member's repeat is refused with the reason, not sent on."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scheduling.models import Job, Membership
from tests.factories import MembershipFactory
from tests.pages.conftest import G5, P5
from tests.pages.test_jobs import form_data

pytestmark = pytest.mark.django_db


def test_a_former_member_resubmitting_a_form_gets_409_naming_client_token(world, client_for):
    client = client_for(world.ana)
    client.post(
        reverse("job_new"),
        form_data(world, [(P5, 1, None)], name="private-run", client_token="t-1"),
        follow=True,
    )  # shows, and so clears, the "Submitted private-run." message
    Membership.objects.filter(user=world.ana, team=world.team_nlp).delete()
    MembershipFactory(team=world.team_vision, user=world.ana)

    response = client.post(
        reverse("job_new"), form_data(world, [(G5, 1, None)], quota_share=world.vision.pk, client_token="t-1")
    )

    assert response.status_code == 409
    html = response.content.decode()
    assert "client_token" in html and "private-run" not in html
    assert Job.objects.count() == 1
