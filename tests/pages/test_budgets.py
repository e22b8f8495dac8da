"""Budgets on the pages: set in the share editor, held back by the next pass, shown on the overview and the
share page with the projection to the period's end and the money where prices are known."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from scheduling.models import InstanceType, JobStatus, QuotaShare, ShareConsumption
from tests.factories import job_in
from tests.pages.conftest import P4, P5

pytestmark = pytest.mark.django_db


def editor_data(share: QuotaShare, **fields) -> dict:
    """The share editor's fields as they stand, with `fields` changed."""
    data = {
        "name": share.name,
        "team": share.team_id,
        "strategy": share.strategy,
        "borrow_limit": share.borrow_limit,
        "state": share.state,
        "fair_share_weight": share.fair_share_weight,
    }
    for limit in share.capacity_limits.all():
        data[f"limit_{limit.instance_type_id}"] = limit.max_capacity
    data.update(fields)
    return data


def spend(share: QuotaShare, type_name: str, gpu_hours: int) -> None:
    ShareConsumption.objects.create(
        quota_share=share,
        instance_type=InstanceType.objects.get(name=type_name),
        day=timezone.now().date(),
        gpu_hours=gpu_hours,
    )


def test_a_budget_set_in_the_share_editor_holds_the_share_back_on_the_overview_after_one_pass(
    world, client_for
):
    spend(world.nlp, P5, 50)
    waiting = job_in(world.nlp, [(P5, 1)], name="waits-for-the-reset")
    admin = client_for(world.admin)

    page = admin.get(reverse("manage_share_edit", args=[world.nlp.pk])).content.decode()
    assert 'name="budget_gpu_hours"' in page and 'name="budget_scope"' in page
    response = admin.post(
        reverse("manage_share_edit", args=[world.nlp.pk]),
        editor_data(world.nlp, budget_gpu_hours="40", budget_period="MONTH", budget_scope="ALL"),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    world.run_pass()

    waiting.refresh_from_db()
    assert waiting.status == JobStatus.RUNNABLE
    assert waiting.current_reason.startswith("share nlp: budget of 40 GPU-hours for ")
    overview = client_for(world.ana).get("/").content.decode()
    card = overview[overview.index(f'id="share-{world.nlp.pk}"') :]
    card = card[: card.index("</article>")]
    assert "Budget spent:" in card and "starts no new job until the reset" in card
    assert "50 of 40 GPU-hours spent for" in card
    assert "at this rate: " in card


def test_a_bad_budget_in_the_editor_is_refused_next_to_its_field(world, client_for):
    response = client_for(world.admin).post(
        reverse("manage_share_edit", args=[world.nlp.pk]), editor_data(world.nlp, budget_gpu_hours="0")
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "Ensure this value is greater than or equal to 0.001." in html
    assert QuotaShare.objects.get(pk=world.nlp.pk).budget_gpu_hours is None


def test_the_share_page_shows_spent_projection_and_money_where_prices_are_set(world, client_for):
    InstanceType.objects.filter(name=P4).update(hourly_price=Decimal("32.00"))  # 8 GPUs: $4 a GPU-hour
    QuotaShare.objects.filter(pk=world.nlp.pk).update(budget_gpu_hours=1000, budget_period="DAY")
    spend(world.nlp, P4, 100)

    html = client_for(world.ana).get(reverse("share_detail", args=[world.nlp.pk])).content.decode()

    assert "GPU-hour budget" in html
    assert "100 of 1,000 GPU-hours spent for" in html and ", $400;" in html
    # The day's average rate so far, carried to its end: at least what is spent, priced at $4 a GPU-hour.
    projection = html[html.index("at this rate: ") :]
    projection = projection[: projection.index("</p>")]
    projected = Decimal(projection.split(" of ")[0].removeprefix("at this rate: ").replace(",", ""))
    assert projected >= 100
    money = Decimal(projection.split("($")[1].split(" of ")[0].replace(",", ""))
    assert abs(money - projected * 4) <= 4  # both rounded to whole units
    assert projection.endswith(" of $4,000)")


def test_a_share_without_a_budget_shows_none(world, client_for):
    html = client_for(world.ana).get(reverse("share_detail", args=[world.vision.pk])).content.decode()
    assert "GPU-hour budget" not in html


def test_budget_events_read_in_the_event_log(world, client_for):
    from scheduling.models import Event, EventKind

    Event.objects.create(
        kind=EventKind.BUDGET_EXHAUSTED,
        team=world.team_nlp,
        job_queue=world.queue,
        quota_share=world.nlp,
        message="share nlp has spent its budget of 40 GPU-hours for December (41): it starts no new job until "
        "2027-01-01 00:00 UTC",
    )
    html = client_for(world.ana).get(reverse("event_log") + "?kind=BUDGET_EXHAUSTED").content.decode()
    assert "share nlp has spent its budget of 40 GPU-hours for December (41)" in html
    assert "budget spent" in html


def test_the_overview_reads_every_budget_in_three_more_queries(
    world, client_for, django_assert_max_num_queries
):
    QuotaShare.objects.filter(job_queue=world.queue).update(budget_gpu_hours=1000)
    for share in (world.nlp, world.vision, world.speech):
        spend(share, P4, 10)
        job_in(share, [(P4, 1)], name=f"{share.name}-job")
    world.run_pass()
    client = client_for(world.ana)
    # as without budgets (19), and the budgets' meters, instance types and consumption rows
    with django_assert_max_num_queries(22):
        page = client.get("/").content.decode()
    assert page.count("data-budget") == 3
