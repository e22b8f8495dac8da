"""A repeated client_token returns the earlier job only to a submitter who may still see it."""

from __future__ import annotations

import pytest

from scheduling.models import Job, Membership
from tests.api.support import submission
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
SECRET = {"image": "registry.example.com/nlp/secret-trainer:7", "token": "s3cr3t", "command": ["train"]}


def test_a_former_member_repeating_a_client_token_gets_409_and_nothing_of_the_job(world, client_for):
    client = client_for(world.ana)
    first = client.post(
        JOBS, submission(name="private-run", client_token="batch-1", payload=SECRET), format="json"
    )
    Membership.objects.filter(user=world.ana, team=world.team_nlp).delete()
    MembershipFactory(team=world.team_vision, user=world.ana)

    again = client.post(
        JOBS,
        submission(
            quota_share="vision",
            instance_preferences=[{"instance_type": "ml.g5.12xlarge", "instance_count": 1}],
            client_token="batch-1",
        ),
        format="json",
    )

    assert first.status_code == 201
    assert again.status_code == 409
    assert list(again.json()) == ["detail"]
    assert "client_token 'batch-1'" in again.json()["detail"]
    body = again.content.decode()
    for leak in ("private-run", "secret-trainer", "s3cr3t", "nlp"):
        assert leak not in body
    assert Job.objects.count() == 1


def test_a_member_still_in_the_team_repeating_a_client_token_gets_the_job(world, client_for):
    client = client_for(world.ben)
    first = client.post(JOBS, submission(client_token="batch-2"), format="json")
    Membership.objects.filter(user=world.ben, team=world.team_nlp).update(role=Membership.Role.MEMBER)

    again = client.post(JOBS, submission(client_token="batch-2"), format="json")

    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
