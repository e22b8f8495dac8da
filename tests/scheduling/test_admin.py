"""The Django admin shows rule violations next to the field and audits every configuration change."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.urls import reverse

from scheduling.models import Event, EventKind, Job, QuotaShare, ShareCapacityLimit, State
from tests.factories import (
    InstanceTypeFactory,
    JobQueueFactory,
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
        "name": name, "job_queue": queue.pk, "team": team.pk, "strategy": strategy, "borrow_limit": borrow_limit,
        "state": State.ENABLED,
        "capacity_limits-TOTAL_FORMS": "1", "capacity_limits-INITIAL_FORMS": "1" if share else "0",
        "capacity_limits-MIN_NUM_FORMS": "0", "capacity_limits-MAX_NUM_FORMS": "5",
        "capacity_limits-0-id": limit_row.pk if limit_row else "",
        "capacity_limits-0-quota_share": share.pk if share else "",
        "capacity_limits-0-instance_type": InstanceTypeFactory(name=P5).pk,
        "capacity_limits-0-max_capacity": limit,
    }


def test_admin_refuses_share_limits_above_capacity_and_saves_nothing(staff_client, queue):
    share_with(queue, "nlp", {P5: 6})
    response = staff_client.post(reverse("admin:scheduling_quotashare_add"),
                                 share_form(queue, TeamFactory(), name="vision", limit=3))
    assert response.status_code == 200
    assert ("ml.p5.48xlarge: limits would total 9 but the environment has 8 (other shares hold 6, so at most 2 "
            "is left)") in response.content.decode()
    assert not QuotaShare.objects.filter(name="vision").exists()
    assert not Event.objects.filter(kind=EventKind.CONFIG_CHANGED).exists()


def test_admin_refuses_borrow_limit_on_a_reserve_share(staff_client, queue):
    response = staff_client.post(reverse("admin:scheduling_quotashare_add"),
                                 share_form(queue, TeamFactory(), name="vision", limit=1, borrow_limit=30))
    assert "borrow_limit applies only to LEND_AND_BORROW shares" in response.content.decode()
    assert not QuotaShare.objects.filter(name="vision").exists()


def test_admin_change_is_audited_with_before_and_after(staff_client, queue):
    share = share_with(queue, "nlp", {P5: 2})
    response = staff_client.post(reverse("admin:scheduling_quotashare_change", args=[share.pk]),
                                 share_form(queue, share.team, name="nlp", limit=5, share=share))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert ShareCapacityLimit.objects.get(quota_share=share).max_capacity == 5
    event = Event.objects.get(kind=EventKind.CONFIG_CHANGED)
    assert event.actor.username == "root" and event.quota_share_id == share.pk
    assert event.data["before"]["capacity_limits"] == {P5: 2}
    assert event.data["after"]["capacity_limits"] == {P5: 5}
    assert event.message == "root changed quota share nlp: capacity_limits"


def test_admin_environment_capacity_cannot_drop_below_limits(staff_client, queue):
    share_with(queue, "nlp", {P5: 6})
    environment = queue.service_environment
    row = environment.capacity_limits.get()
    data = {
        "name": environment.name, "state": "ENABLED", "executor": environment.executor,
        "capacity_limits-TOTAL_FORMS": "1", "capacity_limits-INITIAL_FORMS": "1",
        "capacity_limits-MIN_NUM_FORMS": "0", "capacity_limits-MAX_NUM_FORMS": "1000",
        "capacity_limits-0-id": row.pk, "capacity_limits-0-service_environment": environment.pk,
        "capacity_limits-0-instance_type": row.instance_type_id, "capacity_limits-0-max_capacity": 4,
    }
    response = staff_client.post(reverse("admin:scheduling_serviceenvironment_change", args=[environment.pk]), data)
    assert "hold limits totalling 6, so capacity cannot be 4" in response.content.decode()
    row.refresh_from_db()
    assert row.max_capacity == 8


def test_admin_offers_no_delete_for_an_enabled_share(staff_client, queue):
    share = share_with(queue, "nlp", {P5: 1})
    response = staff_client.get(reverse("admin:scheduling_quotashare_delete", args=[share.pk]))
    assert response.status_code == 403


@pytest.mark.parametrize("model", ["instancetype", "team", "serviceenvironment", "jobqueue", "quotashare",
                                   "trainingplan", "job", "event", "schedulingpass", "shareusagesample"])
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
    assert counts[1] == 12
