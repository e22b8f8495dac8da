"""A small organisation for the page tests: queue `training` with shares nlp (RESERVE, team NLP), vision
(LEND_AND_BORROW 100%, team Vision) and speech (LEND, team Speech), a plan open to nlp, a user per role."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.test import Client

from scheduling.models import JobQueue, Membership, QuotaShare, Team, TrainingPlan
from scheduling.passes import run as passes
from tests.factories import (
    JobQueueFactory,
    MembershipFactory,
    ServiceEnvironmentFactory,
    TeamFactory,
    UserFactory,
    environment_with,
    plan_for,
    share_with,
)

P5, P4, G5 = "ml.p5.48xlarge", "ml.p4d.24xlarge", "ml.g5.12xlarge"


@dataclass
class World:
    queue: JobQueue
    nlp: QuotaShare
    vision: QuotaShare
    speech: QuotaShare
    plan: TrainingPlan
    team_nlp: Team
    team_vision: Team
    users: dict

    def __getattr__(self, name):
        try:
            return self.users[name]
        except KeyError:
            raise AttributeError(name) from None

    def run_pass(self):
        return passes.queue_pass_run(job_queue_id=self.queue.pk, trigger="test")


def build_world() -> World:
    queue = JobQueueFactory(name="training", service_environment=ServiceEnvironmentFactory(name="gpu-fleet"))
    environment_with(queue, {P5: 8, P4: 16, G5: 24})
    team_nlp = TeamFactory(name="NLP", slug="nlp")
    team_vision = TeamFactory(name="Vision", slug="vision")
    team_speech = TeamFactory(name="Speech", slug="speech")
    nlp = share_with(queue, "nlp", {P5: 4, P4: 4}, team=team_nlp)
    vision = share_with(
        queue, "vision", {P4: 6, G5: 8}, team=team_vision, strategy="LEND_AND_BORROW", borrow_limit=100
    )
    speech = share_with(queue, "speech", {P4: 4, G5: 8}, team=team_speech, strategy="LEND")
    plan = plan_for(queue, "nlp-p5-december", P5, 4, shares=[nlp])
    users = {name: UserFactory(username=name) for name in ("ana", "ben", "chen", "eli")}
    users["admin"] = UserFactory(username="admin", is_staff=True)
    MembershipFactory(team=team_nlp, user=users["ana"], role=Membership.Role.MEMBER)
    MembershipFactory(team=team_nlp, user=users["ben"], role=Membership.Role.MANAGER)
    MembershipFactory(team=team_vision, user=users["chen"], role=Membership.Role.MEMBER)
    MembershipFactory(team=team_speech, user=users["eli"], role=Membership.Role.MEMBER)
    return World(
        queue=queue,
        nlp=nlp,
        vision=vision,
        speech=speech,
        plan=plan,
        team_nlp=team_nlp,
        team_vision=team_vision,
        users=users,
    )


@pytest.fixture
def world(db) -> World:
    return build_world()


@pytest.fixture
def client_for():
    """A test client signed in as the user."""

    def make(user) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return make


HTMX = {"HX-Request": "true"}


def htmx_headers(target: str | None = None) -> dict:
    headers = dict(HTMX)
    if target:
        headers["HX-Target"] = target
    return headers
