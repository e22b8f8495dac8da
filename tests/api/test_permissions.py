"""Every role against every endpoint (api.md), the forbidden cases included.

Roles: anonymous; eve, a member of team nlp who submitted the job; ana, another member of nlp; ben, a manager
of nlp; chen, a member of vision (an outsider to nlp's jobs); executor, no team but `report_job_status`; admin
(staff). Another team's job is a 404 for a member, never a 403: its existence is not theirs to know.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Job, Membership, TrainingPlan
from scheduling.services import configuration as config_services
from scheduling.services import jobs as job_services
from tests.api.support import P4, P5, placed, submission
from tests.factories import (
    InstanceTypeFactory,
    MembershipFactory,
    ServiceEnvironmentFactory,
    UserFactory,
    job_in,
)

pytestmark = pytest.mark.django_db

ROLES = ["anonymous", "eve", "ana", "ben", "chen", "executor", "admin"]
STAFF_ONLY = {"anonymous": 401, "*": 403}
SIGNED_IN = {"anonymous": 401, "*": 200}


def later(days: int) -> str:
    return (timezone.now() + timedelta(days=days)).isoformat()


# (method, path, body, expected status per role; "*" = every role not named)
CASES = [
    # configuration: read by anyone signed in, written by staff
    *[
        ("GET", f"/{resource}/", None, SIGNED_IN)
        for resource in (
            "instance-types",
            "teams",
            "service-environments",
            "job-queues",
            "quota-shares",
            "training-plans",
        )
    ],
    ("GET", "/instance-types/{p5}/", None, SIGNED_IN),
    ("GET", "/teams/{team_nlp}/", None, SIGNED_IN),
    ("GET", "/service-environments/{environment}/", None, SIGNED_IN),
    ("GET", "/job-queues/{queue}/", None, SIGNED_IN),
    ("GET", "/quota-shares/{nlp}/", None, SIGNED_IN),
    ("GET", "/training-plans/{plan}/", None, SIGNED_IN),
    ("POST", "/instance-types/", {"name": "ml.new", "gpu_count": 1}, {**STAFF_ONLY, "admin": 201}),
    ("PATCH", "/instance-types/{p5}/", {"gpu_count": 8}, {**STAFF_ONLY, "admin": 200}),
    ("DELETE", "/instance-types/{unused_type}/", None, {**STAFF_ONLY, "admin": 204}),
    ("POST", "/teams/", {"name": "Speech", "slug": "speech"}, {**STAFF_ONLY, "admin": 201}),
    ("PATCH", "/teams/{team_nlp}/", {"name": "Language"}, {**STAFF_ONLY, "admin": 200}),
    ("DELETE", "/teams/{team_nlp}/", None, {**STAFF_ONLY, "admin": 409}),  # it owns shares
    (
        "POST",
        "/service-environments/",
        {"name": "spare", "capacity_limits": []},
        {**STAFF_ONLY, "admin": 201},
    ),
    ("PATCH", "/service-environments/{environment}/", {"executor": "external"}, {**STAFF_ONLY, "admin": 200}),
    ("DELETE", "/service-environments/{environment}/", None, {**STAFF_ONLY, "admin": 409}),  # serves a queue
    ("POST", "/job-queues/", {"name": "q2", "service_environment": "free-env"}, {**STAFF_ONLY, "admin": 201}),
    ("PATCH", "/job-queues/{queue}/", {"priority": 7}, {**STAFF_ONLY, "admin": 200}),
    ("DELETE", "/job-queues/{queue}/", None, {**STAFF_ONLY, "admin": 400}),  # enabled: disable it first
    (
        "POST",
        "/quota-shares/",
        {
            "name": "speech",
            "job_queue": "training",
            "team": "vision",
            "capacity_limits": [{"instance_type": P4, "max_capacity": 2}],
        },
        {**STAFF_ONLY, "admin": 201},
    ),
    ("PATCH", "/quota-shares/{nlp}/", {"in_share_preemption": True}, {**STAFF_ONLY, "admin": 200}),
    ("DELETE", "/quota-shares/{nlp}/", None, {**STAFF_ONLY, "admin": 400}),  # enabled: disable it first
    (
        "POST",
        "/training-plans/",
        {
            "name": "jan",
            "job_queue": "training",
            "instance_type": P4,
            "instance_count": 1,
            "start_time": later(1),
            "end_time": later(2),
        },
        {**STAFF_ONLY, "admin": 201},
    ),
    ("PATCH", "/training-plans/{plan}/", {"instance_count": 5}, {**STAFF_ONLY, "admin": 200}),
    ("DELETE", "/training-plans/{unused_plan}/", None, {**STAFF_ONLY, "admin": 204}),
    # team membership: staff and the team's managers
    (
        "POST",
        "/teams/{team_nlp}/members/",
        {"username": "chen", "role": "member"},
        {"anonymous": 401, "ben": 201, "admin": 201, "*": 403},
    ),
    # jobs: the team's members; another team's job is a 404
    ("GET", "/jobs/", None, SIGNED_IN),
    ("POST", "/jobs/", submission(), {"anonymous": 401, "chen": 403, "executor": 403, "*": 201}),
    ("GET", "/jobs/{job}/", None, {"anonymous": 401, "chen": 404, "*": 200}),
    (
        "PATCH",
        "/jobs/{job}/",
        {"scheduling_priority": 9},
        {"anonymous": 401, "ana": 403, "chen": 404, "executor": 403, "*": 200},
    ),
    (
        "POST",
        "/jobs/{job}/cancel/",
        {},
        {"anonymous": 401, "ana": 403, "chen": 404, "executor": 403, "*": 200},
    ),
    (
        "POST",
        "/jobs/{placed_job}/report/",
        {"status": "STARTING"},
        {"anonymous": 401, "executor": 200, "admin": 200, "*": 403},
    ),
    # the queue's scheduling endpoints
    ("POST", "/job-queues/{queue}/schedule/", None, {**STAFF_ONLY, "admin": 200}),
    ("GET", "/job-queues/{queue}/snapshot/", None, SIGNED_IN),
    # events
    ("GET", "/events/", None, SIGNED_IN),
    ("GET", "/events/?job={job}", None, SIGNED_IN),
    ("GET", "/events/?since=2026-01-01T00:00:00Z&kind=SUBMITTED", None, SIGNED_IN),
    # the schema and its docs are public
    ("GET", "/schema/", None, {"*": 200}),
]


def expected_status(expected: dict, role: str) -> int:
    return expected[role] if role in expected else expected["*"]


@pytest.fixture
def ids(world):
    eve = UserFactory(username="eve")
    MembershipFactory(team=world.team_nlp, user=eve, role=Membership.Role.MEMBER)
    world.users["eve"] = eve
    ServiceEnvironmentFactory(name="free-env")
    unused_plan = TrainingPlan.objects.create(
        name="unused",
        job_queue=world.queue,
        instance_type=world.plan.instance_type,
        instance_count=1,
        start_time=timezone.now(),
        end_time=timezone.now() + timedelta(days=1),
    )
    return {
        "p5": world.plan.instance_type_id,
        "unused_type": InstanceTypeFactory(name="ml.unused").pk,
        "team_nlp": world.team_nlp.pk,
        "environment": world.queue.service_environment_id,
        "queue": world.queue.pk,
        "nlp": world.nlp.pk,
        "plan": world.plan.pk,
        "unused_plan": unused_plan.pk,
        "job": job_in(world.nlp, [(P5, 1)], user=eve, name="eves-job").pk,
        "placed_job": placed(job_in(world.nlp, [(P5, 2)], user=eve, name="placed")).pk,
    }


@pytest.mark.parametrize(
    ("method", "path", "body", "expected"),
    [
        pytest.param(method, path, body, expected, id=f"{method} {path}")
        for method, path, body, expected in CASES
    ],
)
@pytest.mark.parametrize("role", ROLES)
def test_role_gets_the_expected_status(world, ids, client_for, role, method, path, body, expected):
    user = None if role == "anonymous" else world.users[role]
    client = client_for(user)

    response = client.generic(
        method,
        "/api/v1" + path.format(**ids),
        data=None if body is None else json.dumps(body),
        content_type="application/json",
    )

    assert response.status_code == expected_status(expected, role), response.content[:300]


# --- the same jobs after their share or queue is deleted, or their share moved to another team ------------


def _share_deleted(world):
    share = config_services.quota_share_update(
        share=world.nlp, changes={"state": "DISABLED"}, limits=None, actor=None
    )
    config_services.quota_share_delete(share=share, actor=None)


def _queue_deleted(world):
    queue = config_services.job_queue_update(job_queue=world.queue, changes={"state": "DISABLED"}, actor=None)
    config_services.job_queue_delete(job_queue=queue, actor=None)


def _share_moved(world):
    for job in Job.objects.filter(quota_share=world.nlp):
        job_services.job_cancel(job_id=job.pk, actor=None)
    config_services.quota_share_update(
        share=world.nlp, changes={"team": world.team_vision}, limits=None, actor=None
    )


AFTER = {"share deleted": _share_deleted, "queue deleted": _queue_deleted, "share moved": _share_moved}
CASES_AFTER = [
    ("GET", "/jobs/{job}/", {"anonymous": 401, "chen": 404, "*": 200}),
    ("POST", "/jobs/{job}/cancel/", {"anonymous": 401, "ana": 403, "chen": 404, "executor": 403, "*": 409}),
    ("PATCH", "/jobs/{job}/", {"anonymous": 401, "ana": 403, "chen": 404, "executor": 403, "*": 409}),
    ("GET", "/events/?job={job}", SIGNED_IN),
]


@pytest.mark.parametrize(
    ("method", "path", "expected"), CASES_AFTER, ids=[f"{m} {p}" for m, p, _ in CASES_AFTER]
)
@pytest.mark.parametrize("change", list(AFTER))
@pytest.mark.parametrize("role", ROLES)
def test_a_job_keeps_its_readers_after_its_share_or_queue_is_deleted_or_its_share_moved(
    world, ids, client_for, role, change, method, path, expected
):
    TrainingPlan.objects.filter(job_queue=world.queue).delete()  # no job names them: the queue may go
    AFTER[change](world)
    client = client_for(None if role == "anonymous" else world.users[role])

    response = client.generic(
        method,
        "/api/v1" + path.format(**ids),
        data=json.dumps({"scheduling_priority": 3} if method == "PATCH" else {}),
        content_type="application/json",
    )

    assert response.status_code == expected_status(expected, role), response.content[:300]
    if path.startswith("/events/") and role != "anonymous":
        events = response.json()["results"]
        assert (events == []) == (role == "chen")
        assert b"eves-job" not in response.content or role != "chen"
