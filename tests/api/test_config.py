"""Configuration through the API: names in bodies, nested limits written whole, the rules of behaviour.md (what there
is, capacity) as 400s naming the field, and a CONFIG_CHANGED event for every change (none for a rejected one)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import (
    EnvironmentCapacity,
    Event,
    EventKind,
    InstanceType,
    Job,
    JobQueue,
    JobStatus,
    Membership,
    QuotaShare,
    ServiceEnvironment,
    State,
    Team,
    TrainingPlan,
)
from tests.api.support import G5, P4, P5, placed
from tests.factories import InstanceTypeFactory, ServiceEnvironmentFactory, UserFactory, job_in

pytestmark = pytest.mark.django_db

API = "/api/v1"


def caps(**by_type) -> list[dict]:
    """capacity_limits as the API takes them: caps(P5=2) -> [{"instance_type": "ml.p5.48xlarge", ...}]."""
    names = {"P5": P5, "P4": P4, "G5": G5}
    return [{"instance_type": names[key], "max_capacity": n} for key, n in by_type.items()]


def audit(obj_label: str, action: str) -> list[Event]:
    return [
        event
        for event in Event.objects.filter(kind=EventKind.CONFIG_CHANGED).order_by("id")
        if event.data.get("object") == obj_label and event.data.get("action") == action
    ]


# --- instance types --------------------------------------------------------------------------------------


def test_staff_creates_an_instance_type_and_it_is_audited(world, client_for):
    response = client_for(world.admin).post(
        f"{API}/instance-types/",
        {"name": "ml.g6.xlarge", "gpu_count": 1, "hourly_price": "1.2500"},
        format="json",
    )

    assert response.status_code == 201, response.json()
    assert response.json() == {
        "id": response.json()["id"],
        "name": "ml.g6.xlarge",
        "gpu_count": 1,
        "hourly_price": "1.2500",
        "accelerated": True,
    }
    [event] = audit("scheduling.InstanceType", "created")
    assert event.actor == world.admin
    assert event.data["after"]["name"] == "ml.g6.xlarge"


def test_members_read_but_do_not_write_configuration(world, client_for):
    client = client_for(world.ana)

    assert client.get(f"{API}/instance-types/").status_code == 200
    response = client.post(f"{API}/instance-types/", {"name": "ml.x", "gpu_count": 0}, format="json")

    assert response.status_code == 403
    assert response.json() == {"detail": "only staff may change the configuration"}
    assert not InstanceType.objects.filter(name="ml.x").exists()


def test_a_duplicate_instance_type_name_is_a_400_naming_name(world, client_for):
    body = {"name": P5, "gpu_count": 8}

    response = client_for(world.admin).post(f"{API}/instance-types/", body, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["name"]


def test_deleting_an_instance_type_in_use_is_409_and_nothing_is_recorded(world, client_for):
    p5 = InstanceType.objects.get(name=P5)

    response = client_for(world.admin).delete(f"{API}/instance-types/{p5.pk}/")

    assert response.status_code == 409
    assert response.json()["detail"].startswith("instance type ml.p5.48xlarge is still referenced by ")
    assert InstanceType.objects.filter(pk=p5.pk).exists()
    assert audit("scheduling.InstanceType", "deleted") == []


def test_deleting_an_unused_instance_type_is_audited(world, client_for):
    unused = InstanceTypeFactory(name="ml.unused")

    response = client_for(world.admin).delete(f"{API}/instance-types/{unused.pk}/")

    assert response.status_code == 204
    assert not InstanceType.objects.filter(pk=unused.pk).exists()
    [event] = audit("scheduling.InstanceType", "deleted")
    assert event.data["before"]["name"] == "ml.unused"


def test_patch_changes_only_what_it_names(world, client_for):
    p4 = InstanceType.objects.get(name=P4)

    response = client_for(world.admin).patch(f"{API}/instance-types/{p4.pk}/", {"gpu_count": 4})

    assert response.status_code == 200
    assert response.json()["gpu_count"] == 4
    assert response.json()["name"] == P4
    [event] = audit("scheduling.InstanceType", "changed")
    assert (event.data["before"]["gpu_count"], event.data["after"]["gpu_count"]) == (8, 4)


# --- teams and members -----------------------------------------------------------------------------------


def test_teams_list_their_members_with_roles(world, client_for):
    body = client_for(world.chen).get(f"{API}/teams/{world.team_nlp.pk}/").json()

    assert body == {
        "id": world.team_nlp.pk,
        "name": "NLP",
        "slug": "nlp",
        "members": [{"username": "ana", "role": "member"}, {"username": "ben", "role": "manager"}],
    }


def test_a_manager_adds_a_member_to_their_team(world, client_for):
    UserFactory(username="dana")

    response = client_for(world.ben).post(
        f"{API}/teams/{world.team_nlp.pk}/members/", {"username": "dana", "role": "member"}, format="json"
    )

    assert response.status_code == 201
    assert response.json() == {"username": "dana", "role": "member"}
    assert Membership.objects.filter(team=world.team_nlp, user__username="dana", role="member").exists()
    assert len(audit("scheduling.Membership", "created")) == 1


def test_staff_changes_a_members_role(world, client_for):
    response = client_for(world.admin).post(
        f"{API}/teams/{world.team_nlp.pk}/members/", {"username": "ana", "role": "manager"}, format="json"
    )

    assert response.status_code == 200
    assert Membership.objects.get(team=world.team_nlp, user=world.ana).role == "manager"
    assert len(audit("scheduling.Membership", "changed")) == 1


@pytest.mark.parametrize("who", ["ana", "chen", "executor"])
def test_only_staff_and_the_teams_managers_change_members(world, client_for, who):
    response = client_for(world.users[who]).post(
        f"{API}/teams/{world.team_nlp.pk}/members/", {"username": "chen", "role": "member"}, format="json"
    )

    assert response.status_code == 403
    assert not Membership.objects.filter(team=world.team_nlp, user=world.chen).exists()


def test_a_manager_of_another_team_may_not_change_members(world, client_for):
    response = client_for(world.ben).post(
        f"{API}/teams/{world.team_vision.pk}/members/", {"username": "ana", "role": "member"}, format="json"
    )

    assert response.status_code == 403


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"username": "nobody", "role": "member"}, "username"),
        ({"username": "chen", "role": "owner"}, "role"),
    ],
)
def test_unknown_user_or_role_is_a_400_naming_it(world, client_for, body, field):
    response = client_for(world.ben).post(f"{API}/teams/{world.team_nlp.pk}/members/", body, format="json")

    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_deleting_a_team_that_owns_shares_is_409(world, client_for):
    response = client_for(world.admin).delete(f"{API}/teams/{world.team_nlp.pk}/")

    assert response.status_code == 409
    assert Team.objects.filter(pk=world.team_nlp.pk).exists()


# --- service environments --------------------------------------------------------------------------------


def test_staff_creates_an_environment_with_its_capacities(world, client_for):
    response = client_for(world.admin).post(
        f"{API}/service-environments/",
        {
            "name": "spare-fleet",
            "executor": "external",
            "capacity_limits": caps(P5=2, G5=0),
        },
        format="json",
    )

    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["state"] == "ENABLED"
    assert body["capacity_limits"] == [
        {"instance_type": G5, "max_capacity": 0},
        {"instance_type": P5, "max_capacity": 2},
    ]
    [event] = audit("scheduling.ServiceEnvironment", "created")
    assert event.data["after"]["capacity_limits"] == {P5: 2, G5: 0}


def test_environment_capacity_below_the_shares_limits_is_a_400_and_nothing_changes(world, client_for):
    environment = world.queue.service_environment

    response = client_for(world.admin).patch(
        f"{API}/service-environments/{environment.pk}/",
        {
            "capacity_limits": caps(P5=2, P4=16, G5=24),
        },
        format="json",
    )

    assert response.status_code == 400
    assert response.json() == {
        "capacity_limits": [
            "ml.p5.48xlarge: the shares of queue training hold limits totalling 4, so capacity cannot be 2; "
            "lower those limits first"
        ]
    }
    assert environment.capacity_by_type()[P5] == 8
    assert audit("scheduling.ServiceEnvironment", "changed") == []


def test_environment_capacities_are_written_whole(world, client_for):
    environment = world.queue.service_environment

    response = client_for(world.admin).patch(
        f"{API}/service-environments/{environment.pk}/",
        {
            "capacity_limits": caps(P5=10, P4=10, G5=8),
        },
        format="json",
    )

    assert response.status_code == 200, response.json()
    assert environment.capacity_by_type() == {P5: 10, P4: 10, G5: 8}
    [event] = audit("scheduling.ServiceEnvironment", "changed")
    assert event.data["before"]["capacity_limits"] == {P5: 8, P4: 16, G5: 24}
    assert event.data["after"]["capacity_limits"] == {P5: 10, P4: 10, G5: 8}


def test_a_type_listed_twice_in_capacities_is_a_400(world, client_for):
    response = client_for(world.admin).post(
        f"{API}/service-environments/",
        {
            "name": "twice",
            "capacity_limits": [
                {"instance_type": P5, "max_capacity": 1},
                {"instance_type": P5, "max_capacity": 2},
            ],
        },
        format="json",
    )

    assert response.status_code == 400
    assert response.json() == {"capacity_limits": ["instance type ml.p5.48xlarge is listed more than once"]}
    assert not ServiceEnvironment.objects.filter(name="twice").exists()


def test_an_unknown_type_in_nested_limits_names_its_path(world, client_for):
    response = client_for(world.admin).post(
        f"{API}/service-environments/",
        {
            "name": "x",
            "capacity_limits": [
                {"instance_type": P5, "max_capacity": 1},
                {"instance_type": "ml.nope", "max_capacity": -1},
            ],
        },
        format="json",
    )

    assert response.status_code == 400
    assert set(response.json()) == {"capacity_limits[1].instance_type", "capacity_limits[1].max_capacity"}


def test_deleting_an_environment_that_serves_a_queue_is_409(world, client_for):
    environment_id = world.queue.service_environment_id

    response = client_for(world.admin).delete(f"{API}/service-environments/{environment_id}/")

    assert response.status_code == 409
    assert "job queue" in response.json()["detail"]


# --- job queues ------------------------------------------------------------------------------------------


def test_staff_creates_a_queue_on_a_free_environment(world, client_for):
    ServiceEnvironmentFactory(name="spare")

    response = client_for(world.admin).post(
        f"{API}/job-queues/", {"name": "batch", "priority": 10, "service_environment": "spare"}, format="json"
    )

    assert response.status_code == 201, response.json()
    body = response.json()
    assert body == {
        "id": body["id"],
        "name": "batch",
        "priority": 10,
        "state": "ENABLED",
        "service_environment": "spare",
        "ordering": "BEST_EFFORT_FIFO",
        "idle_capacity_assignment": "FIFO",
        "preemption_min_runtime_seconds": 0,
        "relocation_min_runtime_seconds": 600,
    }
    assert len(audit("scheduling.JobQueue", "created")) == 1


def test_a_queues_relocation_min_runtime_is_bounded_and_named_when_out_of_range(world, client_for):
    ServiceEnvironmentFactory(name="spare")
    client = client_for(world.admin)
    body = {"name": "batch", "service_environment": "spare", "relocation_min_runtime_seconds": 86_401}
    response = client.post(f"{API}/job-queues/", body, format="json")
    assert response.status_code == 400 and "relocation_min_runtime_seconds" in response.json()
    body["relocation_min_runtime_seconds"] = 0
    assert (
        client.post(f"{API}/job-queues/", body, format="json").json()["relocation_min_runtime_seconds"] == 0
    )


def test_an_environment_serves_one_queue_only(world, client_for):
    response = client_for(world.admin).post(
        f"{API}/job-queues/", {"name": "batch", "service_environment": "gpu-fleet"}, format="json"
    )

    assert response.status_code == 400
    assert response.json() == {
        "service_environment": ["this service environment already serves another job queue"]
    }


def test_queue_priority_above_1000_is_a_400(world, client_for):
    response = client_for(world.admin).patch(
        f"{API}/job-queues/{world.queue.pk}/", {"priority": 1001}, format="json"
    )

    assert response.status_code == 400
    assert list(response.json()) == ["priority"]


def test_moving_a_queue_to_a_too_small_environment_is_a_400_naming_service_environment(world, client_for):
    small = ServiceEnvironmentFactory(name="small")
    EnvironmentCapacity.objects.create(
        service_environment=small, max_capacity=1, instance_type=InstanceType.objects.get(name=P5)
    )

    response = client_for(world.admin).patch(
        f"{API}/job-queues/{world.queue.pk}/", {"service_environment": "small"}, format="json"
    )

    assert response.status_code == 400
    assert list(response.json()) == ["service_environment"]
    world.queue.refresh_from_db()
    assert world.queue.service_environment.name == "gpu-fleet"


def test_an_enabled_queue_cannot_be_deleted(world, client_for):
    response = client_for(world.admin).delete(f"{API}/job-queues/{world.queue.pk}/")

    assert response.status_code == 400
    assert response.json() == {"state": ["disable queue training before deleting it"]}


def test_deleting_a_disabled_queue_removes_its_shares_and_plans_and_keeps_its_jobs(world, client_for):
    job = job_in(world.nlp, [(P5, 1)])
    JobQueue.objects.filter(pk=world.queue.pk).update(state=State.DISABLED)

    response = client_for(world.admin).delete(f"{API}/job-queues/{world.queue.pk}/")

    assert response.status_code == 204
    assert not JobQueue.objects.filter(pk=world.queue.pk).exists()
    assert not QuotaShare.objects.exists()
    assert not TrainingPlan.objects.exists()
    assert Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED
    assert len(audit("scheduling.JobQueue", "deleted")) == 1


# --- quota shares ----------------------------------------------------------------------------------------


def test_quota_shares_filter_by_queue_name(world, client_for):
    other = JobQueue.objects.create(name="other", service_environment=ServiceEnvironmentFactory())
    QuotaShare.objects.create(name="nlp", job_queue=other, team=world.team_nlp)
    client = client_for(world.ana)

    training = client.get(f"{API}/quota-shares/?job_queue=training").json()
    everything = client.get(f"{API}/quota-shares/").json()

    assert [(s["job_queue"], s["name"]) for s in training["results"]] == [
        ("training", "nlp"),
        ("training", "vision"),
    ]
    assert everything["count"] == 3


def test_a_share_reads_with_names_and_its_limits(world, client_for):
    body = client_for(world.ana).get(f"{API}/quota-shares/{world.nlp.pk}/").json()

    assert body == {
        "id": world.nlp.pk,
        "name": "nlp",
        "job_queue": "training",
        "team": "nlp",
        "capacity_limits": [
            {"instance_type": P4, "max_capacity": 4},
            {"instance_type": P5, "max_capacity": 4},
        ],
        "strategy": "RESERVE",
        "borrow_limit": -1,
        "in_share_preemption": False,
        "fair_share_weight": "1.000",
        "state": "ENABLED",
        "budget": None,
        "budget_used_gpu_hours": None,
        "budget_resets_at": None,
    }


def test_staff_creates_a_share_within_the_spare_capacity(world, client_for):
    response = client_for(world.admin).post(
        f"{API}/quota-shares/",
        {
            "name": "speech",
            "job_queue": "training",
            "team": "vision",
            "strategy": "LEND",
            "capacity_limits": caps(P4=6, G5=16),
        },
        format="json",
    )

    assert response.status_code == 201, response.json()
    share = QuotaShare.objects.get(name="speech")
    assert {limit.instance_type.name: limit.max_capacity for limit in share.capacity_limits.all()} == {
        P4: 6,
        G5: 16,
    }
    [event] = audit("scheduling.QuotaShare", "created")
    assert event.quota_share == share
    assert event.data["after"]["capacity_limits"] == {P4: 6, G5: 16}


def test_share_limits_over_the_environments_capacity_are_a_400_and_nothing_is_created(world, client_for):
    response = client_for(world.admin).post(
        f"{API}/quota-shares/",
        {
            "name": "speech",
            "job_queue": "training",
            "team": "vision",
            "capacity_limits": [{"instance_type": P5, "max_capacity": 5}],
        },
        format="json",
    )

    assert response.status_code == 400
    assert response.json() == {
        "capacity_limits": [
            "ml.p5.48xlarge: limits would total 9 but the environment has 8 (other shares hold 4, "
            "so at most 4 is left)"
        ]
    }
    assert not QuotaShare.objects.filter(name="speech").exists()
    assert audit("scheduling.QuotaShare", "created") == []


def test_share_rules_report_every_field_at_once(world, client_for):
    response = client_for(world.admin).post(
        f"{API}/quota-shares/",
        {
            "name": "nlp",
            "job_queue": "training",
            "team": "nlp",
            "strategy": "RESERVE",
            "borrow_limit": 50,
            "capacity_limits": [],
        },
        format="json",
    )

    assert response.status_code == 400
    assert set(response.json()) == {"name", "borrow_limit", "capacity_limits"}


def test_a_share_limit_of_zero_is_refused_by_the_share_rule(world, client_for):
    response = client_for(world.admin).patch(
        f"{API}/quota-shares/{world.nlp.pk}/",
        {"capacity_limits": [{"instance_type": P5, "max_capacity": 0}]},
        format="json",
    )

    assert response.status_code == 400
    assert response.json() == {"capacity_limits": ["ml.p5.48xlarge: max_capacity must be at least 1"]}


def test_share_limits_are_replaced_whole_on_patch(world, client_for):
    response = client_for(world.admin).patch(
        f"{API}/quota-shares/{world.nlp.pk}/",
        {"capacity_limits": [{"instance_type": P5, "max_capacity": 8}]},
        format="json",
    )

    assert response.status_code == 200, response.json()
    assert response.json()["capacity_limits"] == [{"instance_type": P5, "max_capacity": 8}]
    [event] = audit("scheduling.QuotaShare", "changed")
    assert event.data["before"]["capacity_limits"] == {P5: 4, P4: 4}
    assert event.data["after"]["capacity_limits"] == {P5: 8}


def test_patching_a_share_without_limits_keeps_them_and_still_checks_the_rule(world, client_for):
    client = client_for(world.admin)

    ok = client.patch(f"{API}/quota-shares/{world.vision.pk}/", {"borrow_limit": 50}, format="json")
    refused = client.patch(f"{API}/quota-shares/{world.nlp.pk}/", {"borrow_limit": 50}, format="json")

    assert ok.status_code == 200
    assert ok.json()["capacity_limits"] == [
        {"instance_type": G5, "max_capacity": 8},
        {"instance_type": P4, "max_capacity": 6},
    ]
    assert refused.status_code == 400
    assert list(refused.json()) == ["borrow_limit"]


def test_a_share_cannot_move_to_another_queue(world, client_for):
    JobQueue.objects.create(name="other", service_environment=ServiceEnvironmentFactory())

    response = client_for(world.admin).patch(
        f"{API}/quota-shares/{world.nlp.pk}/", {"job_queue": "other"}, format="json"
    )

    assert response.status_code == 400
    assert list(response.json()) == ["job_queue"]


def test_an_enabled_share_cannot_be_deleted(world, client_for):
    response = client_for(world.admin).delete(f"{API}/quota-shares/{world.nlp.pk}/")

    assert response.status_code == 400
    assert response.json() == {"state": ["disable share nlp before deleting it"]}
    assert QuotaShare.objects.filter(pk=world.nlp.pk).exists()


def test_deleting_a_disabled_share_cancels_its_jobs_and_is_audited(world, client_for):
    job = placed(job_in(world.nlp, [(P5, 2)]))
    client = client_for(world.admin)
    client.patch(f"{API}/quota-shares/{world.nlp.pk}/", {"state": "DISABLED"}, format="json")

    response = client.delete(f"{API}/quota-shares/{world.nlp.pk}/")

    assert response.status_code == 204
    assert not QuotaShare.objects.filter(pk=world.nlp.pk).exists()
    assert Event.objects.filter(kind=EventKind.CANCELLED, message__contains="share nlp was deleted").exists()
    assert Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED  # kept: tests/api/test_nothing_lost.py
    assert len(audit("scheduling.QuotaShare", "deleted")) == 1


# --- training plans --------------------------------------------------------------------------------------


def test_plans_show_status_and_derived_counts(world, client_for):
    placed(job_in(world.nlp, [(P5, 3, world.plan)]), count=3, plan=world.plan)
    placed(job_in(world.nlp, [(P5, 2)]), count=2)  # on-demand: not on the plan

    body = client_for(world.ana).get(f"{API}/training-plans/{world.plan.pk}/").json()

    assert body["status"] == "ACTIVE"
    assert body["quota_shares"] == ["nlp"]
    assert (body["in_use_instance_count"], body["available_instance_count"]) == (3, 1)


def test_a_plan_not_yet_started_has_no_available_instances(world, client_for):
    start = timezone.now() + timedelta(days=2)
    client = client_for(world.admin)

    response = client.post(
        f"{API}/training-plans/",
        {
            "name": "jan-p4",
            "job_queue": "training",
            "instance_type": P4,
            "instance_count": 2,
            "start_time": start.isoformat(),
            "end_time": (start + timedelta(days=5)).isoformat(),
            "quota_shares": ["nlp", "vision"],
        },
        format="json",
    )

    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "SCHEDULED"
    assert (body["in_use_instance_count"], body["available_instance_count"]) == (0, 0)
    assert body["quota_shares"] == ["nlp", "vision"]
    [event] = audit("scheduling.TrainingPlan", "created")
    assert event.data["after"]["quota_shares"] == ["nlp", "vision"]


def test_a_plan_that_ends_before_it_starts_is_a_400_naming_end_time(world, client_for):
    start = timezone.now()

    response = client_for(world.admin).post(
        f"{API}/training-plans/",
        {
            "name": "bad",
            "job_queue": "training",
            "instance_type": P4,
            "instance_count": 2,
            "start_time": start.isoformat(),
            "end_time": (start - timedelta(hours=1)).isoformat(),
        },
        format="json",
    )

    assert response.status_code == 400
    assert response.json() == {"end_time": ["end_time must be after start_time"]}


def test_a_plan_open_to_an_unknown_share_is_a_400_naming_quota_shares(world, client_for):
    response = client_for(world.admin).patch(
        f"{API}/training-plans/{world.plan.pk}/", {"quota_shares": ["nlp", "ghost"]}, format="json"
    )

    assert response.status_code == 400
    assert response.json() == {"quota_shares": ["queue training has no quota share named ghost"]}


def test_a_plans_shares_are_replaced_on_patch(world, client_for):
    response = client_for(world.admin).patch(
        f"{API}/training-plans/{world.plan.pk}/", {"quota_shares": []}, format="json"
    )

    assert response.status_code == 200
    assert response.json()["quota_shares"] == []
    [event] = audit("scheduling.TrainingPlan", "changed")
    assert (event.data["before"]["quota_shares"], event.data["after"]["quota_shares"]) == (["nlp"], [])


def test_a_plan_named_by_a_job_cannot_be_deleted(world, client_for):
    job_in(world.nlp, [(P5, 1, world.plan)])

    response = client_for(world.admin).delete(f"{API}/training-plans/{world.plan.pk}/")

    assert response.status_code == 409
    assert response.json()["detail"] == (
        "training plan nlp-p5-december is still referenced by 1 job preference; remove those first"
    )


def test_a_lending_limit_above_max_capacity_or_on_a_reserve_share_is_named_in_the_400(world, client_for):
    body = {
        "name": "lender",
        "job_queue": "training",
        "team": "nlp",
        "strategy": "RESERVE",
        "capacity_limits": [{"instance_type": P5, "max_capacity": 1, "lending_limit": 1}],
    }
    response = client_for(world.admin).post(f"{API}/quota-shares/", body, format="json")
    assert response.status_code == 400
    assert "capacity_limits[0].lending_limit" in str(response.json())

    body.update(
        strategy="LEND", capacity_limits=[{"instance_type": P5, "max_capacity": 1, "lending_limit": 2}]
    )
    response = client_for(world.admin).post(f"{API}/quota-shares/", body, format="json")
    assert response.status_code == 400
    assert "lending_limit 2 must be between 0 and max_capacity 1" in str(response.json())


def test_staff_see_and_write_an_environments_executor_accounts_members_do_not_see_them(world, client_for):
    environment = world.queue.service_environment
    url = f"{API}/service-environments/{environment.pk}/"
    assert client_for(world.admin).get(url).json()["executor_accounts"] == ["executor"]
    assert "executor_accounts" not in client_for(world.users["ana"]).get(url).json()
    assert "executor_accounts" not in client_for(world.executor).get(url).json()

    unknown = client_for(world.admin).patch(url, {"executor_accounts": ["nobody"]}, format="json")
    assert unknown.status_code == 400 and "executor_accounts" in unknown.json()
    assert list(environment.executor_accounts.values_list("username", flat=True)) == ["executor"]

    response = client_for(world.admin).patch(url, {"executor_accounts": []}, format="json")
    assert response.status_code == 200 and response.json()["executor_accounts"] == []
    assert not environment.executor_accounts.exists()
    [event] = audit("scheduling.ServiceEnvironment", "changed")
    assert (event.data["before"]["executor_accounts"], event.data["after"]["executor_accounts"]) == (
        ["executor"],
        [],
    )
