"""Issue 16 in a real browser, at a desktop and a phone width: the job page stays live until the job ends, a
refused action says why in place, cancelling asks first, the API docs render, the audit log shows values, error
pages look like the site and say why, the favicon is served and a skip link leads to the content."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from scheduling.models import InstanceType, JobStatus
from scheduling.rules import LimitInput
from scheduling.services.configuration import quota_share_update
from scheduling.services.executor import job_report
from scheduling.services.jobs import job_cancel
from tests.factories import job_in
from tests.pages.conftest import G5, P4, P5, build_world

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

VIEWPORTS = {"desktop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}
SHOTS = Path(os.environ.get("QUOTAPORTAL_SHOTS", "/tmp/quotaportal-e2e-shots"))


@pytest.fixture
def world(transactional_db):
    return build_world()


@pytest.fixture(params=sorted(VIEWPORTS))
def width(request) -> str:
    return request.param


@pytest.fixture
def open_as(browser, live_server, fast_pages, width):
    """A page signed in as `username` at the test's width; `shot(page, name)` keeps a screenshot to look at."""
    contexts = []

    def open_page(username: str):
        context = browser.new_context(viewport=VIEWPORTS[width])
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(10_000)
        page.goto(f"{live_server.url}/accounts/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", "pw-for-tests-1")
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")
        return page

    yield open_page
    for context in contexts:
        context.close()


def shot(page, name: str, width: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)


def test_the_job_page_follows_the_job_to_its_end_without_reloading(world, open_as, live_server, width):
    job = job_in(world.nlp, [(P5, 2)], name="watch-me", user=world.ana)
    world.run_pass()
    page = open_as("ana")
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    expect(page.locator("#job-live")).to_contain_text("SCHEDULED")
    expect(page.get_by_role("button", name="Change priority")).to_be_visible()
    job_report(job_id=job.pk, status=JobStatus.RUNNING)
    job_report(job_id=job.pk, status=JobStatus.SUCCEEDED, reason="exit code 0")
    expect(page.locator("#job-live .status")).to_have_text("SUCCEEDED", timeout=8000)
    expect(page.get_by_role("button", name="Change priority")).to_have_count(0)
    expect(page.get_by_role("link", name="Cancel job…")).to_have_count(0)
    expect(page.locator("#job-attempts")).not_to_contain_text("Not placed yet")
    expect(page.locator("#job-attempts")).to_contain_text(f"{P5} x2")
    expect(page.locator("#job-events")).to_contain_text("succeeded")
    expect(page.locator("#job-live")).not_to_have_attribute("hx-trigger", re.compile("."))
    shot(page, "job-finished", width)


def test_an_action_the_job_moved_past_is_refused_in_place(world, open_as, live_server, settings, width):
    settings.PAGE_REFRESH_SECONDS = 3600  # the page stays as it was while the job ends elsewhere
    job = job_in(world.nlp, [(P5, 1)], name="stale-page", user=world.ana)
    page = open_as("ana")
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    job_cancel(job_id=job.pk, actor=world.ben, reason="freeing the p5s")
    page.fill("#id_scheduling_priority", "50")
    page.get_by_role("button", name="Change priority").click()
    expect(page.get_by_role("alert")).to_contain_text(
        "stale-page has already ended (CANCELLED), so it can no longer change priority"
    )
    expect(page.locator("h1")).to_contain_text("stale-page")
    expect(page.locator("#job-live .status")).to_have_text("CANCELLED")
    expect(page.get_by_role("button", name="Change priority")).to_have_count(0)
    shot(page, "job-refused", width)


def test_cancelling_asks_first_and_then_cancels(world, open_as, live_server, width):
    job = job_in(world.nlp, [(P5, 1)], name="cancel-me", user=world.ana)
    page = open_as("ana")
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    page.get_by_role("button", name="Cancel job…").click()
    expect(page.locator("h1")).to_have_text("Cancel cancel-me?")
    shot(page, "job-cancel-confirm", width)
    page.fill("#id_reason", "wrong image")
    page.get_by_role("button", name="Yes, cancel cancel-me").click()
    expect(page.locator("#job-live .status")).to_have_text("CANCELLED")
    expect(page.locator(".flash")).to_contain_text("Cancelled cancel-me.")


def test_the_api_docs_render_their_operations_under_the_csp(world, open_as, live_server, width):
    page = open_as("ana")
    refused = []
    page.on(
        "console",
        lambda message: refused.append(message.text) if "Content Security" in message.text else None,
    )
    page.goto(f"{live_server.url}/api/v1/docs/")
    expect(page.locator(".opblock").first).to_be_visible(timeout=15_000)
    assert page.locator(".opblock").count() > 10
    expect(page.locator(".swagger-ui")).to_contain_text("/api/v1/jobs/")
    assert refused == []
    shot(page, "api-docs", width)


def test_the_event_log_shows_what_a_configuration_change_changed(world, open_as, live_server, width):
    p4, g5 = InstanceType.objects.get(name=P4), InstanceType.objects.get(name=G5)
    quota_share_update(
        share=world.vision, changes={}, limits=[LimitInput(p4, 4), LimitInput(g5, 8)], actor=world.admin
    )
    page = open_as("admin")
    page.goto(f"{live_server.url}/events/")
    row = page.locator("tr.event-config_changed").first
    expect(row).to_contain_text(f"capacity limits: {P4} 6 -> 4")
    expect(row.locator(".kind")).to_have_text("configuration changed")
    expect(row.locator(".kind")).to_have_attribute("title", "CONFIG_CHANGED")
    shot(page, "events-diff", width)


def test_error_pages_look_like_the_site_and_say_why(world, open_as, live_server, width):
    page = open_as("ana")
    response = page.goto(f"{live_server.url}/manage/queues/")
    assert response.status == 403
    expect(page.locator("h1")).to_have_text("You may not open this page")
    expect(page.locator(".error-page")).to_contain_text("The administration pages are for staff.")
    expect(page.locator("header.topbar")).to_be_visible()
    expect(page.get_by_role("link", name="Back to the overview")).to_be_visible()
    shot(page, "error-403", width)
    response = page.goto(f"{live_server.url}/no/such/page/")
    assert response.status == 404
    expect(page.locator("h1")).to_have_text("There is nothing here")
    expect(page.locator(".error-page")).to_contain_text("/no/such/page/")
    shot(page, "error-404", width)


def test_the_favicon_is_served_and_a_skip_link_leads_to_the_content(world, open_as, live_server, width):
    page = open_as("ana")
    href = page.locator("link[rel=icon]").get_attribute("href")
    icon = page.request.get(f"{live_server.url}{href}")
    assert icon.status == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    skip = page.locator("a.skip-link")
    expect(skip).not_to_be_in_viewport()
    page.keyboard.press("Tab")
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    shot(page, "skip-link", width)
    page.keyboard.press("Enter")
    expect(page.locator("main#main")).to_be_focused()
