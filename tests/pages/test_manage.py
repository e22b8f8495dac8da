"""The administration pages: every change goes through the configuration services (rules, audit)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scheduling.models import (
    Event,
    EventKind,
    InstanceType,
    JobQueue,
    QuotaShare,
    ServiceEnvironment,
    TrainingPlan,
)
from tests.factories import ServiceEnvironmentFactory
from tests.pages.conftest import G5, P4, P5, htmx_headers

pytestmark = pytest.mark.django_db


def type_ids():
    return {t.name: t.pk for t in InstanceType.objects.all()}


def share_data(world, *, name="audio", limits=None, **fields):
    ids = type_ids()
    data = {
        "name": name,
        "job_queue": world.queue.pk,
        "team": world.team_nlp.pk,
        "strategy": "LEND",
        "borrow_limit": -1,
        "state": "ENABLED",
    }
    for type_name, maximum in (limits or {}).items():
        data[f"limit_{ids[type_name]}"] = maximum
    data.update(fields)
    return data


def audits(obj) -> list[str]:
    return list(
        Event.objects.filter(
            kind=EventKind.CONFIG_CHANGED, data__id=obj.pk, data__object=obj._meta.label
        ).values_list("data__action", flat=True)
    )


def test_queue_list_and_create_and_edit_are_audited(world, client_for):
    client = client_for(world.admin)
    assert "training" in client.get(reverse("manage_queues")).content.decode()
    spare = ServiceEnvironmentFactory(name="spare-fleet")
    response = client.post(
        reverse("manage_queue_new"),
        {
            "name": "inference",
            "priority": 10,
            "state": "ENABLED",
            "service_environment": spare.pk,
            "ordering": "STRICT_FIFO",
        },
    )
    assert response.status_code == 302
    queue = JobQueue.objects.get(name="inference")
    client.post(
        reverse("manage_queue_edit", args=[queue.pk]),
        {
            "name": "inference",
            "priority": 20,
            "state": "DISABLED",
            "service_environment": spare.pk,
            "ordering": "STRICT_FIFO",
            "relocation_min_runtime_seconds": 1800,
        },
    )
    queue.refresh_from_db()
    assert (queue.priority, queue.state, queue.relocation_min_runtime_seconds) == (20, "DISABLED", 1800)
    assert audits(queue) == ["changed", "created"]


def test_queue_form_offers_only_environments_no_other_queue_uses(world, client_for):
    ServiceEnvironmentFactory(name="spare-fleet")
    html = client_for(world.admin).get(reverse("manage_queue_new")).content.decode()
    assert "spare-fleet" in html and "gpu-fleet" not in html


def test_environment_capacity_below_the_share_limits_is_refused_next_to_the_field(world, client_for):
    environment = world.queue.service_environment
    ids = type_ids()
    data = {
        "name": environment.name,
        "state": "ENABLED",
        "executor": environment.executor,
        f"capacity_{ids[P5]}": 8,
        f"capacity_{ids[P4]}": 10,
        f"capacity_{ids[G5]}": 24,
    }
    response = client_for(world.admin).post(reverse("manage_environment_edit", args=[environment.pk]), data)
    html = response.content.decode()
    assert response.status_code == 200
    slot = html[html.index('id="errors-capacity_limits"') :]
    assert "ml.p4d.24xlarge: the shares of queue training hold limits totalling 14" in slot[:400]
    assert environment.capacity_limits.get(instance_type__name=P4).max_capacity == 16
    data[f"capacity_{ids[P4]}"] = 20
    assert (
        client_for(world.admin)
        .post(reverse("manage_environment_edit", args=[environment.pk]), data)
        .status_code
        == 302
    )
    assert environment.capacity_limits.get(instance_type__name=P4).max_capacity == 20
    assert audits(environment) == ["changed"]


def test_environment_page_shows_what_the_shares_hold(world, client_for):
    environment = world.queue.service_environment
    html = (
        client_for(world.admin)
        .get(reverse("manage_environment_edit", args=[environment.pk]))
        .content.decode()
    )
    assert (
        "Held by the shares of queue training" in html
        and '<td class="num" data-label="Held by shares">14</td>' in html
    )


def test_creating_a_share_over_capacity_is_refused_with_the_rules_message(world, client_for):
    client = client_for(world.admin)
    response = client.post(reverse("manage_share_new"), share_data(world, limits={P4: 3}))
    html = response.content.decode()
    assert response.status_code == 200 and not QuotaShare.objects.filter(name="audio").exists()
    slot = html[html.index('id="errors-capacity_limits"') :]  # next to the limits, not at the top of the form
    assert "ml.p4d.24xlarge: limits would total 17 but the environment has 16" in slot[:400]
    response = client.post(reverse("manage_share_new"), share_data(world, limits={P4: 2, G5: 8}))
    assert response.status_code == 302
    share = QuotaShare.objects.get(name="audio")
    assert {limit.instance_type.name: limit.max_capacity for limit in share.capacity_limits.all()} == {
        P4: 2,
        G5: 8,
    }
    assert audits(share) == ["created"]


def test_share_form_shows_the_sum_of_limits_against_capacity_live(world, client_for):
    client = client_for(world.admin)
    page = client.get(reverse("manage_share_edit", args=[world.nlp.pk])).content.decode()
    assert 'hx-post="' + reverse("manage_share_edit_check", args=[world.nlp.pk]) + '"' in page
    assert "Sum of limits against the capacity" in page
    live = client.post(
        reverse("manage_share_edit_check", args=[world.nlp.pk]),
        share_data(world, name="nlp", strategy="RESERVE", limits={P5: 4, P4: 8}),
        headers=htmx_headers("limit-sums"),
    ).content.decode()
    assert "<html" not in live and "over by 2" in live  # P4: others 10 + 8 = 18 of 16
    assert "ml.p4d.24xlarge: limits would total 18 but the environment has 16" in live
    assert 'id="errors-borrow_limit" hx-swap-oob="true"></ul>' in live
    fine = client.post(
        reverse("manage_share_edit_check", args=[world.nlp.pk]),
        share_data(world, name="nlp", strategy="RESERVE", limits={P5: 4, P4: 6}),
        headers=htmx_headers("limit-sums"),
    ).content.decode()
    assert "over by" not in fine and "limits would total" not in fine


def test_share_live_check_names_a_borrow_limit_that_needs_lend_and_borrow(world, client_for):
    live = (
        client_for(world.admin)
        .post(
            reverse("manage_share_check"),
            share_data(world, limits={G5: 2}, borrow_limit=50),
            headers=htmx_headers("limit-sums"),
        )
        .content.decode()
    )
    slot = live[live.index('id="errors-borrow_limit"') :]
    assert "borrow_limit applies only to LEND_AND_BORROW shares" in slot[:300]


def test_editing_a_share_goes_through_the_service_and_is_audited(world, client_for):
    response = client_for(world.admin).post(
        reverse("manage_share_edit", args=[world.vision.pk]),
        share_data(
            world,
            name="vision",
            team=world.team_vision.pk,
            strategy="LEND_AND_BORROW",
            borrow_limit=50,
            limits={P4: 6, G5: 6},
        ),
    )
    assert response.status_code == 302
    world.vision.refresh_from_db()
    assert world.vision.borrow_limit == 50
    event = Event.objects.filter(kind=EventKind.CONFIG_CHANGED, quota_share=world.vision).get()
    assert event.actor == world.admin and event.data["after"]["capacity_limits"] == {P4: 6, G5: 6}


def test_training_plans_are_drawn_on_a_timeline_and_created_through_the_service(world, client_for):
    client = client_for(world.admin)
    html = client.get(reverse("manage_plans")).content.decode()
    assert "nlp-p5-december" in html and 'class="plan plan-active"' in html and 'class="now"' in html
    start = timezone.now() + timedelta(days=2)
    response = client.post(
        reverse("manage_plan_new"),
        {
            "name": "jan-p4",
            "job_queue": world.queue.pk,
            "instance_type": type_ids()[P4],
            "instance_count": 2,
            "start_time": start.strftime("%Y-%m-%dT%H:%M"),
            "end_time": (start + timedelta(days=5)).strftime("%Y-%m-%dT%H:%M"),
            "quota_shares": [world.vision.pk],
        },
    )
    assert response.status_code == 302
    plan = TrainingPlan.objects.get(name="jan-p4")
    assert list(plan.quota_shares.all()) == [world.vision] and audits(plan) == ["created"]
    assert 'class="plan plan-scheduled"' in client.get(reverse("manage_plans")).content.decode()


def test_a_plan_that_ends_before_it_starts_is_refused(world, client_for):
    start = timezone.now() + timedelta(days=2)
    response = client_for(world.admin).post(
        reverse("manage_plan_edit", args=[world.plan.pk]),
        {
            "name": world.plan.name,
            "job_queue": world.queue.pk,
            "instance_type": type_ids()[P5],
            "instance_count": 4,
            "start_time": start.strftime("%Y-%m-%dT%H:%M"),
            "end_time": start.strftime("%Y-%m-%dT%H:%M"),
        },
    )
    assert response.status_code == 200 and "End time must be after start time" in response.content.decode()


def test_administration_pages_keep_their_query_budgets(world, client_for, django_assert_max_num_queries):
    client = client_for(world.admin)
    environment = ServiceEnvironment.objects.get(name="gpu-fleet")
    budgets = [
        (reverse("manage_queues"), 3),
        (reverse("manage_queue_edit", args=[world.queue.pk]), 6),
        (reverse("manage_environments"), 4),
        (
            reverse("manage_environment_edit", args=[environment.pk]),
            10,
        ),  # 7, its Executors and their accounts
        (reverse("manage_shares"), 4),
        (reverse("manage_share_edit", args=[world.nlp.pk]), 10),
        (reverse("manage_share_new"), 6),
        (reverse("manage_plans"), 5),
        (reverse("manage_plan_edit", args=[world.plan.pk]), 8),
    ]
    for url, budget in budgets:
        with django_assert_max_num_queries(budget, info=url):
            assert client.get(url).status_code == 200
    with django_assert_max_num_queries(14):
        client.post(
            reverse("manage_share_edit_check", args=[world.nlp.pk]),
            share_data(world, name="nlp", strategy="RESERVE", limits={P5: 4, P4: 8}),
            headers=htmx_headers("limit-sums"),
        )


def test_a_share_edit_form_offers_only_the_types_its_queue_can_run(world, client_for):
    # local.slot is in the instance type table but not in this queue's environment nor in its plans.
    local = InstanceType.objects.create(name="local.slot", gpu_count=1)
    page = client_for(world.admin).get(reverse("manage_share_edit", args=[world.speech.pk])).content.decode()
    ids = type_ids()
    for name in (P5, P4, G5):
        assert f'name="limit_{ids[name]}"' in page
    assert f'name="limit_{local.pk}"' not in page
    # A new share's queue is picked in the form itself: every type is offered there.
    new_page = client_for(world.admin).get(reverse("manage_share_new")).content.decode()
    assert f'name="limit_{local.pk}"' in new_page


def test_plan_timeline_labels_near_an_edge_are_anchored_inside_it(world, client_for, monkeypatch):
    # Date ticks fall at midnights: an hour before one, the first tick lands at the axis's left edge.
    real_now = timezone.now()
    before_midnight = real_now.replace(hour=23, minute=0, second=0, microsecond=0)
    monkeypatch.setattr(timezone, "now", lambda: before_midnight)
    page = client_for(world.admin).get(reverse("manage_plans")).content.decode()
    labels = re.findall(r'<text x="([\d.]+)%" y="13" text-anchor="(\w+)" class="tick">', page)
    assert labels, "the timeline has date labels"
    assert any(float(x) >= 90 or float(x) <= 10 for x, _ in labels), labels
    for x, anchor in labels:
        expected = "end" if float(x) >= 90 else "start" if float(x) <= 10 else "middle"
        assert anchor == expected, (x, anchor)


def test_environment_form_links_executor_accounts_audited_and_the_page_names_them(world, client_for):
    from django.contrib.auth.models import Permission

    from tests.factories import UserFactory

    environment = world.queue.service_environment
    agent = UserFactory(username="fleet-agent")
    agent.user_permissions.add(Permission.objects.get(codename="report_job_status"))
    ids = type_ids()
    data = {
        "name": environment.name,
        "state": "ENABLED",
        "executor": environment.executor,
        f"capacity_{ids[P5]}": 8,
        f"capacity_{ids[P4]}": 16,
        f"capacity_{ids[G5]}": 24,
        "executor_accounts": [agent.pk],
    }
    url = reverse("manage_environment_edit", args=[environment.pk])
    assert client_for(world.admin).post(url, data).status_code == 302
    assert list(environment.executor_accounts.all()) == [agent]
    event = Event.objects.filter(kind=EventKind.CONFIG_CHANGED, data__id=environment.pk).latest("pk")
    assert event.data["before"]["executor_accounts"] == [] and event.data["after"]["executor_accounts"] == [
        "fleet-agent"
    ]
    html = client_for(world.admin).get(url).content.decode()
    served = html[html.index('id="executor-accounts"') :]
    assert "<strong>fleet-agent</strong>" in served[:300]
    data["executor_accounts"] = []
    assert client_for(world.admin).post(url, data).status_code == 302
    assert not environment.executor_accounts.exists()


def test_share_form_says_a_blank_limit_is_zero_as_the_engine_and_the_sums_count_it(world, client_for):
    client = client_for(world.admin)
    page = client.get(reverse("manage_share_edit", args=[world.nlp.pk])).content.decode()
    assert "no limit for that type" not in page
    assert "a blank limit is 0: the share owns none of that type" in page
    # the sums beside it agree: nlp's P4 left blank counts as 0 in "This share"
    live = client.post(
        reverse("manage_share_edit_check", args=[world.nlp.pk]),
        share_data(world, name="nlp", strategy="RESERVE", limits={P5: 4}),
        headers=htmx_headers("limit-sums"),
    ).content.decode()
    p4_row = live[live.index(f'<th scope="row">{P4}</th>') :][:400]
    assert '<td class="num" data-label="This share">0</td>' in p4_row


def test_a_reserve_share_shows_no_borrow_limit_in_its_form_or_the_admin(world, client_for):
    world.admin.is_superuser = True
    world.admin.save()
    client = client_for(world.admin)
    assert world.nlp.strategy == "RESERVE" and world.nlp.borrow_limit == -1
    form = client.get(reverse("manage_share_edit", args=[world.nlp.pk])).content.decode()
    field = form[form.index('name="borrow_limit"') - 200 :][:400]
    assert 'value="-1"' not in field
    listing = client.get(reverse("admin:scheduling_quotashare_changelist")).content.decode()
    nlp_row = listing[listing.index(">nlp</a>") :][:1500]
    assert "— (does not borrow)" in nlp_row and '<td class="field-borrowing">-1</td>' not in nlp_row


def test_environment_page_shows_what_its_executors_offer_against_capacity_and_warns_when_they_differ(
    world, client_for
):
    from django.utils import timezone

    from scheduling.models import Executor

    environment = world.queue.service_environment
    for name, slots in (("gpu-1", 2), ("gpu-2", 4)):
        Executor.objects.create(
            service_environment=environment,
            name=name,
            last_seen_at=timezone.now(),
            offered_instance_type=P5,
            offered_slots=1,
            total_slots=slots,
            gang_capable=True,
        )
    Executor.objects.create(
        service_environment=environment,
        name="g5-host",
        last_seen_at=timezone.now(),
        offered_instance_type=G5,
        offered_slots=0,
        total_slots=24,
    )
    html = (
        client_for(world.admin)
        .get(reverse("manage_environment_edit", args=[environment.pk]))
        .content.decode()
    )
    offers = html[html.index('id="offers"') :]
    assert "hold 6 instances but the capacity is 8" in offers  # ml.p5: 2 + 4 slots, capacity 8
    assert f"polling for {G5}" not in offers  # 24 slots, capacity 24: no warning
    assert f"No executor has asked for {P4} work lately" in offers
