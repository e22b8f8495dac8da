"""Quota share budgets through the API: the budget object, its read-only state, validation naming the field,
and the share list reading every budget in constant queries."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from engine.budgets import period_end
from scheduling.models import Event, EventKind, QuotaShare, ShareConsumption
from scheduling.passes import run as passes
from tests.api.support import P5
from tests.factories import InstanceTypeFactory, job_in

API = "/api/v1"


def test_staff_sets_a_budget_and_reads_it_back_with_its_state(world, client_for):
    response = client_for(world.admin).patch(
        f"{API}/quota-shares/{world.nlp.pk}/",
        {"budget": {"gpu_hours": "5000", "period": "WEEK"}},
        format="json",
    )

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["budget"] == {"gpu_hours": "5000.000", "period": "WEEK", "scope": "ALL"}
    assert body["budget_used_gpu_hours"] == "0.000"
    resets = period_end("WEEK", timezone.now())
    assert body["budget_resets_at"] == resets.isoformat().replace("+00:00", "Z")
    [event] = Event.objects.filter(kind=EventKind.CONFIG_CHANGED, quota_share=world.nlp)
    assert event.data["before"]["budget_gpu_hours"] is None
    assert event.data["after"]["budget_gpu_hours"] == "5000.000"


def test_a_patch_changes_only_the_budget_keys_it_gives_and_null_removes_the_budget(world, client_for):
    client = client_for(world.admin)
    client.patch(f"{API}/quota-shares/{world.nlp.pk}/", {"budget": {"gpu_hours": 10}}, format="json")

    scoped = client.patch(
        f"{API}/quota-shares/{world.nlp.pk}/", {"budget": {"scope": "BORROWED"}}, format="json"
    )
    assert scoped.json()["budget"] == {"gpu_hours": "10.000", "period": "MONTH", "scope": "BORROWED"}

    removed = client.patch(f"{API}/quota-shares/{world.nlp.pk}/", {"budget": None}, format="json")
    assert removed.json()["budget"] is None and removed.json()["budget_used_gpu_hours"] is None


@pytest.mark.parametrize(
    ("budget", "error"),
    [
        (
            {"gpu_hours": 0},
            {"budget.gpu_hours": ["Ensure this value is greater than or equal to 0.001."]},
        ),
        (
            {"gpu_hours": -5},
            {"budget.gpu_hours": ["Ensure this value is greater than or equal to 0.001."]},
        ),
        ({"gpu_hours": 10, "period": "YEAR"}, {"budget.period": ['"YEAR" is not a valid choice.']}),
        ({"gpu_hours": 10, "scope": "SOME"}, {"budget.scope": ['"SOME" is not a valid choice.']}),
        ({"period": "DAY"}, {"budget.gpu_hours": ["This field is required."]}),
        (
            {"gpu_hours": 10, "hours": 3},
            {"budget.hours": ["unknown field; this body takes gpu_hours, period, scope"]},
        ),
    ],
)
def test_a_bad_budget_is_refused_naming_the_field_and_nothing_is_written(world, client_for, budget, error):
    response = client_for(world.admin).patch(
        f"{API}/quota-shares/{world.nlp.pk}/", {"budget": budget}, format="json"
    )

    assert response.status_code == 400
    assert response.json() == error
    assert QuotaShare.objects.get(pk=world.nlp.pk).budget_gpu_hours is None


def test_a_member_cannot_set_a_budget(world, client_for):
    response = client_for(world.ana).patch(
        f"{API}/quota-shares/{world.nlp.pk}/", {"budget": {"gpu_hours": 10}}, format="json"
    )
    assert response.status_code == 403


def test_a_share_is_created_with_a_budget(world, client_for):
    response = client_for(world.admin).post(
        f"{API}/quota-shares/",
        {
            "name": "research",
            "job_queue": "training",
            "team": "vision",
            "capacity_limits": [{"instance_type": P5, "max_capacity": 4}],
            "budget": {"gpu_hours": "120.5", "period": "DAY", "scope": "ALL"},
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert QuotaShare.objects.get(name="research").budget == {
        "gpu_hours": Decimal("120.5"),
        "period": "DAY",
        "scope": "ALL",
    }


def test_the_used_gpu_hours_count_what_the_pass_metered(world, client_for):
    QuotaShare.objects.filter(pk=world.nlp.pk).update(budget_gpu_hours=100)
    ShareConsumption.objects.create(
        quota_share=world.nlp,
        instance_type=InstanceTypeFactory(name=P5),
        day=timezone.now().date(),
        gpu_hours=42,
    )
    body = client_for(world.ana).get(f"{API}/quota-shares/{world.nlp.pk}/").json()
    assert body["budget_used_gpu_hours"] == "42.000"


def test_the_share_list_reads_budgets_in_constant_queries(world, client_for, django_assert_max_num_queries):
    QuotaShare.objects.filter(pk__in=[world.nlp.pk, world.vision.pk]).update(budget_gpu_hours=100)
    job_in(world.nlp, [(P5, 1)])
    passes.queue_pass_run(job_queue_id=world.queue.pk)
    client = client_for(world.ana)
    with django_assert_max_num_queries(12):
        body = client.get(f"{API}/quota-shares/").json()
    assert [s["budget_used_gpu_hours"] is not None for s in body["results"]] == [True, True]
