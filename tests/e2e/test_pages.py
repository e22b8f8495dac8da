"""The pages in a real browser: sign-in, the submit form's rows, and live updates without reloading."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from scheduling.models import Job, JobStatus
from tests.e2e.conftest import page_loads
from tests.factories import job_in
from tests.pages.conftest import G5, P4, P5, build_world

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def world(transactional_db):
    return build_world()


def test_an_admin_and_a_member_sign_in_and_see_what_they_may(world, sign_in, live_server):
    admin = sign_in("admin")
    expect(admin.locator("nav.nav")).to_contain_text("Queues")
    expect(admin.locator("#overview-live")).to_contain_text("Queue training")
    member = sign_in("ana")
    expect(member.locator("nav.nav")).not_to_contain_text("Queues")
    expect(member.locator(".signout .who")).to_have_text("ana")
    member.click("text=Sign out")
    member.wait_for_url(re.compile(r"/accounts/login/"))


def test_a_member_submits_three_preferences_and_sees_the_job_placed_without_reloading(world, sign_in):
    page = sign_in("ana")
    page.click("nav >> text=Submit a job")
    page.fill("#id_name", "pretrain-e2e")
    page.select_option("#id_quota_share", label="training / nlp (NLP)")
    for row in (1, 2):  # rows come in place, from the server, without a reload
        page.click("button[value=add]")
        page.locator(f"#id_pref-{row}-instance_type").wait_for()
    page.select_option("#id_pref-0-instance_type", label=P5)
    page.fill("#id_pref-0-instance_count", "2")
    page.select_option("#id_pref-0-training_plan", label="nlp-p5-december (ml.p5.48xlarge x4, training)")
    page.select_option("#id_pref-1-instance_type", label=P5)
    page.fill("#id_pref-1-instance_count", "2")
    page.select_option("#id_pref-2-instance_type", label=P4)
    page.fill("#id_pref-2-instance_count", "9")
    page.locator("#id_pref-2-instance_count").blur()
    # Validated inline by the API's rules: nlp may never hold 9 P4 (its limit is 4; RESERVE never borrows).
    expect(page.locator("#errors-pref-2-instance_count")).to_contain_text(
        "can never run: share nlp may hold at most 4"
    )
    page.fill("#id_pref-2-instance_count", "2")
    page.locator("#id_pref-2-instance_count").blur()
    expect(page.locator("#errors-pref-2-instance_count")).to_be_empty()
    page.fill("#id_payload", '{"command": ["python3", "pretrain.py"]}')  # what gpu-fleet's executor runs
    page.click("button[value=submit]")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    expect(page.locator("#job-live")).to_contain_text("RUNNABLE")
    job = Job.objects.get(name="pretrain-e2e")
    assert [e.instance_count for e in job.instance_preferences.all()] == [2, 2, 2]
    moves = page_loads(page)
    world.run_pass()
    expect(page.locator("#job-live")).to_contain_text("SCHEDULED", timeout=8000)
    expect(page.locator("#job-live")).to_contain_text("training plan nlp-p5-december")
    assert moves == []


def test_a_preemption_appears_on_the_overview_and_the_share_page_without_reloading(
    world, sign_in, live_server
):
    job_in(world.vision, [(P4, 12)], name="vision-borrower", user=world.chen)
    world.run_pass()
    overview = sign_in("admin")
    share = overview.context.new_page()
    share.goto(f"{live_server.url}/shares/{world.vision.pk}/")
    expect(share.locator("#share-live")).to_contain_text("vision-borrower")
    moves = page_loads(overview), page_loads(share)
    job_in(world.speech, [(P4, 3)], name="speech-reclaims", user=world.eli)
    world.run_pass()
    for page in (overview, share):
        evictions = page.locator(".eviction")
        expect(evictions.first).to_contain_text("reclaim", timeout=8000)
        expect(evictions.first).to_contain_text("vision-borrower")
        expect(evictions.first).to_contain_text("speech-reclaims")
    expect(share.locator("#share-live")).to_contain_text("Pending jobs (1)")
    assert moves == ([], [])
    assert Job.objects.get(name="vision-borrower").status == JobStatus.RUNNABLE


def test_a_member_cannot_open_another_teams_job(world, sign_in, live_server):
    job = job_in(world.nlp, [(P5, 1)], name="nlp-private", user=world.ana)
    page = sign_in("chen")
    response = page.goto(f"{live_server.url}/jobs/{job.pk}/")
    assert response.status == 404
    expect(page.locator("body")).not_to_contain_text("nlp-private")
    page.goto(f"{live_server.url}/jobs/")
    expect(page.locator("#job-table")).not_to_contain_text("nlp-private")


def test_the_share_chart_window_changes_in_place_and_keeps_a_real_link(world, sign_in, live_server):
    job_in(world.vision, [(G5, 4)], name="vision-small", user=world.chen)
    world.run_pass()
    page = sign_in("chen")
    page.goto(f"{live_server.url}/shares/{world.vision.pk}/")
    expect(page.locator("#share-chart figure").first).to_contain_text("ml.g5.12xlarge")
    moves = page_loads(page)
    page.click("#share-chart >> text=last week")
    expect(page.locator('#share-chart a[aria-current="true"]')).to_have_text("last week")
    assert page.url.endswith("?window=week")  # pushed into the address bar, so the link can be shared
    assert moves == []
