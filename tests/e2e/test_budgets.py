"""A budget set in the share editor, in a real browser, held back by the next pass and shown on the overview
that a member has open, without reloading."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from scheduling.models import InstanceType, JobStatus, ShareConsumption
from scheduling.passes import run as passes
from tests.factories import job_in
from tests.pages.conftest import P5, build_world

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def world(transactional_db):
    return build_world()


def test_a_budget_set_in_the_share_editor_shows_on_the_open_overview_after_a_pass(
    world, sign_in, live_server
):
    ShareConsumption.objects.create(
        quota_share=world.nlp,
        instance_type=InstanceType.objects.get(name=P5),
        day=timezone.now().date(),
        gpu_hours=50,
    )
    waiting = job_in(world.nlp, [(P5, 1)], name="waits-for-the-reset")
    member = sign_in("ana")
    card = member.locator(f"#share-{world.nlp.pk}")
    expect(card).not_to_contain_text("GPU-hours")

    admin = sign_in("admin")
    admin.goto(f"{live_server.url}/manage/shares/{world.nlp.pk}/")
    admin.fill("#id_budget_gpu_hours", "40")
    admin.select_option("#id_budget_period", "MONTH")
    admin.select_option("#id_budget_scope", "ALL")
    admin.click("form.form button.primary")
    admin.wait_for_url(re.compile(r"/manage/shares/$"))
    passes.queue_pass_run(job_queue_id=world.queue.pk, trigger="test")

    expect(card).to_contain_text("Budget spent:")
    expect(card).to_contain_text("50 of 40 GPU-hours spent for")
    expect(card).to_contain_text("share nlp: budget of 40 GPU-hours for")
    waiting.refresh_from_db()
    assert waiting.status == JobStatus.RUNNABLE
