"""The demo's shape, small: queue `training` with shares `nlp` (team nlp) and `vision` (team vision), a plan
open to nlp, and one user per role the API knows."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from scheduling.models import Membership
from tests.api.support import G5, P4, P5, World
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


@pytest.fixture
def world(db) -> World:
    queue = JobQueueFactory(name="training", service_environment=ServiceEnvironmentFactory(name="gpu-fleet"))
    environment_with(queue, {P5: 8, P4: 16, G5: 24})
    team_nlp = TeamFactory(name="NLP", slug="nlp")
    team_vision = TeamFactory(name="Vision", slug="vision")
    nlp = share_with(queue, "nlp", {P5: 4, P4: 4}, team=team_nlp)
    vision = share_with(
        queue, "vision", {P4: 6, G5: 8}, team=team_vision, strategy="LEND_AND_BORROW", borrow_limit=100
    )
    plan = plan_for(queue, "nlp-p5-december", P5, 4, shares=[nlp])
    ana = UserFactory(username="ana")  # member of nlp
    ben = UserFactory(username="ben")  # manager of nlp
    chen = UserFactory(username="chen")  # member of vision: an outsider to nlp
    executor = UserFactory(username="executor")  # no team; may report job status
    executor.user_permissions.add(Permission.objects.get(codename="report_job_status"))
    queue.service_environment.executor_accounts.add(executor)  # it serves gpu-fleet
    admin = UserFactory(username="admin", is_staff=True)
    MembershipFactory(team=team_nlp, user=ana, role=Membership.Role.MEMBER)
    MembershipFactory(team=team_nlp, user=ben, role=Membership.Role.MANAGER)
    MembershipFactory(team=team_vision, user=chen, role=Membership.Role.MEMBER)
    users = {"ana": ana, "ben": ben, "chen": chen, "executor": executor, "admin": admin}
    return World(
        queue=queue,
        nlp=nlp,
        vision=vision,
        plan=plan,
        team_nlp=team_nlp,
        team_vision=team_vision,
        users=users,
    )


@pytest.fixture
def client_for():
    """An API client signed in as the user (None: anonymous)."""

    def make(user=None) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_authenticate(user=user)
        return client

    return make
