"""The Django admin saves configuration through the services: their rules (shown on the form), their audit
with before and after, and the pass they ask for."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from scheduling import tasks
from scheduling.models import (
    EnvironmentCapacity,
    Event,
    EventKind,
    InstanceType,
    Job,
    Membership,
    QuotaShare,
    ShareCapacityLimit,
    State,
    TrainingPlan,
)
from scheduling.services import demo
from tests.factories import (
    InstanceTypeFactory,
    JobQueueFactory,
    ServiceEnvironmentFactory,
    TeamFactory,
    UserFactory,
    environment_with,
    share_with,
)

pytestmark = pytest.mark.django_db

P5 = "ml.p5.48xlarge"


@pytest.fixture
def staff_client(client):
    admin = UserFactory(username="root", is_staff=True, is_superuser=True)
    client.force_login(admin)
    return client


@pytest.fixture
def queue():
    queue = JobQueueFactory(name="training")
    environment_with(queue, {P5: 8})
    return queue


def share_form(queue, team, *, name, limit, strategy="RESERVE", borrow_limit=-1, share=None):
    limit_row = share.capacity_limits.get() if share else None
    return {
        "name": name,
        "job_queue": queue.pk,
        "team": team.pk,
        "strategy": strategy,
        "borrow_limit": borrow_limit,
        "state": State.ENABLED,
        "capacity_limits-TOTAL_FORMS": "1",
        "capacity_limits-INITIAL_FORMS": "1" if share else "0",
        "capacity_limits-MIN_NUM_FORMS": "0",
        "capacity_limits-MAX_NUM_FORMS": "5",
        "capacity_limits-0-id": limit_row.pk if limit_row else "",
        "capacity_limits-0-quota_share": share.pk if share else "",
        "capacity_limits-0-instance_type": InstanceTypeFactory(name=P5).pk,
        "capacity_limits-0-max_capacity": limit,
    }


def test_admin_refuses_share_limits_above_capacity_and_saves_nothing(staff_client, queue):
    share_with(queue, "nlp", {P5: 6})
    response = staff_client.post(
        reverse("admin:scheduling_quotashare_add"), share_form(queue, TeamFactory(), name="vision", limit=3)
    )
    assert response.status_code == 200
    assert (
        "ml.p5.48xlarge: limits would total 9 but the environment has 8 (other shares hold 6, "
        "so at most 2 is left)"
    ) in response.content.decode()
    assert not QuotaShare.objects.filter(name="vision").exists()
    assert not Event.objects.filter(kind=EventKind.CONFIG_CHANGED).exists()


def test_admin_refuses_borrow_limit_on_a_reserve_share(staff_client, queue):
    response = staff_client.post(
        reverse("admin:scheduling_quotashare_add"),
        share_form(queue, TeamFactory(), name="vision", limit=1, borrow_limit=30),
    )
    assert "borrow_limit applies only to LEND_AND_BORROW shares" in response.content.decode()
    assert not QuotaShare.objects.filter(name="vision").exists()


def test_admin_change_is_audited_with_before_and_after(staff_client, queue):
    share = share_with(queue, "nlp", {P5: 2})
    response = staff_client.post(
        reverse("admin:scheduling_quotashare_change", args=[share.pk]),
        share_form(queue, share.team, name="nlp", limit=5, share=share),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert ShareCapacityLimit.objects.get(quota_share=share).max_capacity == 5
    event = Event.objects.get(kind=EventKind.CONFIG_CHANGED)
    assert event.actor.username == "root" and event.quota_share_id == share.pk
    assert event.data["before"]["capacity_limits"] == {P5: 2}
    assert event.data["after"]["capacity_limits"] == {P5: 5}
    assert event.message == "root changed quota share nlp: capacity limits"


def test_admin_environment_capacity_cannot_drop_below_limits(staff_client, queue):
    share_with(queue, "nlp", {P5: 6})
    environment = queue.service_environment
    row = environment.capacity_limits.get()
    data = {
        "name": environment.name,
        "state": "ENABLED",
        "executor": environment.executor,
        "stop_grace_seconds": environment.stop_grace_seconds,
        "lease_seconds": environment.lease_seconds,
        "start_deadline_seconds": environment.start_deadline_seconds,
        "capacity_limits-TOTAL_FORMS": "1",
        "capacity_limits-INITIAL_FORMS": "1",
        "capacity_limits-MIN_NUM_FORMS": "0",
        "capacity_limits-MAX_NUM_FORMS": "1000",
        "capacity_limits-0-id": row.pk,
        "capacity_limits-0-service_environment": environment.pk,
        "capacity_limits-0-instance_type": row.instance_type_id,
        "capacity_limits-0-max_capacity": 4,
    }
    response = staff_client.post(
        reverse("admin:scheduling_serviceenvironment_change", args=[environment.pk]), data
    )
    assert "hold limits totalling 6, so capacity cannot be 4" in response.content.decode()
    row.refresh_from_db()
    assert row.max_capacity == 8


def test_admin_offers_no_delete_for_an_enabled_share(staff_client, queue):
    share = share_with(queue, "nlp", {P5: 1})
    response = staff_client.get(reverse("admin:scheduling_quotashare_delete", args=[share.pk]))
    assert response.status_code == 403


@pytest.mark.parametrize(
    "model",
    [
        "instancetype",
        "team",
        "serviceenvironment",
        "jobqueue",
        "quotashare",
        "trainingplan",
        "job",
        "event",
        "schedulingpass",
        "shareusagesample",
    ],
)
def test_every_admin_changelist_renders_with_the_demo(staff_client, model, django_assert_max_num_queries):
    call_command("seed_demo", jobs=12, force=True, stdout=open("/dev/null", "w"))
    with django_assert_max_num_queries(25):
        response = staff_client.get(reverse(f"admin:scheduling_{model}_changelist"))
    assert response.status_code == 200


def test_seed_demo_is_idempotent():
    call_command("seed_demo", jobs=12, force=True, stdout=open("/dev/null", "w"))
    counts = (QuotaShare.objects.count(), Job.objects.count(), ShareCapacityLimit.objects.count())
    call_command("seed_demo", jobs=12, force=True, stdout=open("/dev/null", "w"))
    assert (QuotaShare.objects.count(), Job.objects.count(), ShareCapacityLimit.objects.count()) == counts
    strategies = set(QuotaShare.objects.values_list("strategy", flat=True))
    assert strategies == {"RESERVE", "LEND", "LEND_AND_BORROW"}
    assert QuotaShare.objects.filter(in_share_preemption=True).exists()
    assert QuotaShare.objects.exclude(borrow_limit=-1).exists()
    assert counts[1] == 12 + len(demo.BORROWER_JOBS) + len(demo.LOCAL_BORROWER_JOBS)  # lenders come later


# --- one write path: the admin saves configuration through the services ----------------------------------


def test_admin_change_of_a_share_takes_the_service_path_and_asks_for_a_pass(
    staff_client, queue, settings, django_capture_on_commit_callbacks
):
    settings.QUOTAPORTAL_AUTOPASS = True
    share = share_with(queue, "nlp", {P5: 2})
    with mock.patch.object(tasks.run_queue_pass, "delay") as delay:
        with django_capture_on_commit_callbacks(execute=True):
            response = staff_client.post(
                reverse("admin:scheduling_quotashare_change", args=[share.pk]),
                share_form(queue, share.team, name="nlp", limit=4, strategy="LEND_AND_BORROW", share=share),
            )
    assert response.status_code == 302, response.content.decode()[:2000]
    event = Event.objects.get(kind=EventKind.CONFIG_CHANGED)
    before, after = event.data["before"], event.data["after"]
    assert before["strategy"] == "RESERVE" and after["strategy"] == "LEND_AND_BORROW"
    assert before["capacity_limits"] == {P5: 2} and after["capacity_limits"] == {P5: 4}
    assert event.job_queue_id == queue.pk
    delay.assert_called_once_with(queue.pk, "config")


def test_admin_refuses_an_over_capacity_change_with_the_rules_message_and_changes_nothing(
    staff_client, queue, settings, django_capture_on_commit_callbacks
):
    settings.QUOTAPORTAL_AUTOPASS = True
    share_with(queue, "nlp", {P5: 6})
    vision = share_with(queue, "vision", {P5: 2})
    with mock.patch.object(tasks.run_queue_pass, "delay") as delay:
        with django_capture_on_commit_callbacks(execute=True):
            response = staff_client.post(
                reverse("admin:scheduling_quotashare_change", args=[vision.pk]),
                share_form(queue, vision.team, name="vision", limit=3, share=vision),
            )
    assert response.status_code == 200
    page = response.content.decode()
    assert (
        "ml.p5.48xlarge: limits would total 9 but the environment has 8 (other shares hold 6, "
        "so at most 2 is left)"
    ) in page
    assert 'name="capacity_limits-0-max_capacity" value="3"' in page  # the form comes back as posted
    assert ShareCapacityLimit.objects.get(quota_share=vision).max_capacity == 2
    assert not Event.objects.filter(kind=EventKind.CONFIG_CHANGED).exists()
    delay.assert_not_called()


def test_admin_keeps_a_share_in_its_queue(staff_client, queue):
    share = share_with(queue, "nlp", {P5: 2})
    response = staff_client.get(reverse("admin:scheduling_quotashare_change", args=[share.pk]))
    assert 'name="job_queue"' not in response.content.decode()


def test_admin_adds_a_share_through_the_service_with_its_limits(staff_client, queue):
    team = TeamFactory()
    response = staff_client.post(
        reverse("admin:scheduling_quotashare_add"), share_form(queue, team, name="vision", limit=3)
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    share = QuotaShare.objects.get(name="vision")
    assert response["Location"].endswith(reverse("admin:scheduling_quotashare_changelist"))
    assert ShareCapacityLimit.objects.get(quota_share=share).max_capacity == 3
    event = Event.objects.get(kind=EventKind.CONFIG_CHANGED)
    assert event.data["action"] == "created" and event.data["after"]["capacity_limits"] == {P5: 3}
    assert (
        LogEntry.objects.get(object_id=str(share.pk)).get_change_message()
        == "Added. Added share capacity limit “ml.p5.48xlarge x3”."
    )


def test_admin_queue_change_to_a_smaller_environment_is_refused_on_the_field(staff_client, queue):
    share_with(queue, "nlp", {P5: 6})
    small = ServiceEnvironmentFactory(name="small")
    EnvironmentCapacity.objects.create(
        service_environment=small, instance_type=InstanceType.objects.get(name=P5), max_capacity=2
    )
    data = {
        "name": queue.name,
        "priority": queue.priority,
        "state": queue.state,
        "service_environment": small.pk,
        "ordering": queue.ordering,
    }
    response = staff_client.post(reverse("admin:scheduling_jobqueue_change", args=[queue.pk]), data)
    assert response.status_code == 200
    assert "errorlist" in response.content.decode()
    queue.refresh_from_db()
    assert queue.service_environment_id != small.pk


def test_admin_training_plan_is_saved_through_the_service(staff_client, queue):
    nlp = share_with(queue, "nlp", {P5: 2})
    start = timezone.now() + timedelta(days=1)
    data = {
        "name": "dec-p5",
        "job_queue": queue.pk,
        "instance_type": InstanceType.objects.get(name=P5).pk,
        "instance_count": 2,
        "start_time_0": start.strftime("%Y-%m-%d"),
        "start_time_1": "00:00:00",
        "end_time_0": (start + timedelta(days=7)).strftime("%Y-%m-%d"),
        "end_time_1": "00:00:00",
        "quota_shares": [nlp.pk],
    }
    response = staff_client.post(reverse("admin:scheduling_trainingplan_add"), data)
    assert response.status_code == 302, response.content.decode()[:3000]
    plan = TrainingPlan.objects.get(name="dec-p5")
    assert list(plan.quota_shares.all()) == [nlp]
    event = Event.objects.get(kind=EventKind.CONFIG_CHANGED)
    assert event.data["after"]["quota_shares"] == ["nlp"] and event.job_queue_id == queue.pk


def test_admin_team_members_are_set_and_removed_through_the_service(staff_client):
    team = TeamFactory(name="nlp", slug="nlp")
    ana, ben = UserFactory(username="ana"), UserFactory(username="ben")
    Membership.objects.create(team=team, user=ana, role=Membership.Role.MEMBER)
    row = Membership.objects.get(team=team, user=ana)
    data = {
        "name": "nlp",
        "slug": "nlp",
        "memberships-TOTAL_FORMS": "2",
        "memberships-INITIAL_FORMS": "1",
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
        "memberships-0-id": row.pk,
        "memberships-0-team": team.pk,
        "memberships-0-user": ana.pk,
        "memberships-0-role": Membership.Role.MEMBER,
        "memberships-0-DELETE": "on",
        "memberships-1-id": "",
        "memberships-1-team": team.pk,
        "memberships-1-user": ben.pk,
        "memberships-1-role": Membership.Role.MANAGER,
    }
    response = staff_client.post(reverse("admin:scheduling_team_change", args=[team.pk]), data)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert list(team.memberships.values_list("user__username", "role")) == [("ben", Membership.Role.MANAGER)]
    audited = Event.objects.filter(kind=EventKind.CONFIG_CHANGED)
    actions = sorted(audited.values_list("data__action", flat=True))
    assert actions == ["created", "deleted"]


def test_admin_links_executor_accounts_through_the_service_audited(staff_client, queue):
    from scheduling.models import Event, EventKind
    from tests.factories import UserFactory

    environment = queue.service_environment
    agent = UserFactory(username="admin-linked-agent")
    row = environment.capacity_limits.get()
    data = {
        "name": environment.name,
        "state": "ENABLED",
        "executor": environment.executor,
        "stop_grace_seconds": environment.stop_grace_seconds,
        "lease_seconds": environment.lease_seconds,
        "start_deadline_seconds": environment.start_deadline_seconds,
        "executor_accounts": [agent.pk],
        "capacity_limits-TOTAL_FORMS": "1",
        "capacity_limits-INITIAL_FORMS": "1",
        "capacity_limits-MIN_NUM_FORMS": "0",
        "capacity_limits-MAX_NUM_FORMS": "1000",
        "capacity_limits-0-id": row.pk,
        "capacity_limits-0-service_environment": environment.pk,
        "capacity_limits-0-instance_type": row.instance_type_id,
        "capacity_limits-0-max_capacity": row.max_capacity,
    }
    response = staff_client.post(
        reverse("admin:scheduling_serviceenvironment_change", args=[environment.pk]), data
    )
    assert response.status_code == 302
    assert list(environment.executor_accounts.all()) == [agent]
    event = Event.objects.filter(kind=EventKind.CONFIG_CHANGED, data__id=environment.pk).latest("pk")
    assert (event.data["before"]["executor_accounts"], event.data["after"]["executor_accounts"]) == (
        [],
        ["admin-linked-agent"],
    )


def test_admin_sets_a_budget_through_the_service_and_shows_what_is_spent(staff_client, queue):
    share = share_with(queue, "nlp", {P5: 2})
    data = share_form(queue, share.team, name="nlp", limit=2, share=share)
    data.update(budget_gpu_hours="120", budget_period="WEEK", budget_scope="BORROWED")

    response = staff_client.post(reverse("admin:scheduling_quotashare_change", args=[share.pk]), data)

    assert response.status_code == 302, response.content.decode()[:2000]
    share.refresh_from_db()
    assert share.budget == {"gpu_hours": 120, "period": "WEEK", "scope": "BORROWED"}
    event = Event.objects.get(kind=EventKind.CONFIG_CHANGED)
    assert event.message == "root changed quota share nlp: budget gpu hours, budget period, budget scope"
    page = staff_client.get(reverse("admin:scheduling_quotashare_change", args=[share.pk])).content.decode()
    assert "0 of 120 GPU-hours on borrowing spent for the week of" in page
    refused = staff_client.post(
        reverse("admin:scheduling_quotashare_change", args=[share.pk]), {**data, "budget_gpu_hours": "-1"}
    )
    assert refused.status_code == 200 and "Ensure this value is greater than or equal to 0.001." in (
        refused.content.decode()
    )
