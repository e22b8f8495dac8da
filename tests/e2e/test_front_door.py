"""A newcomer's path at a laptop's width and a phone's (1440 x 900, 390 x 844): a submission the environment's
executor could not run is refused on the form, naming payload.command, and nothing is placed; the overview
raises no alarm while the beat and the workers beat; the job list is compact and the menu one row on a phone;
a job being cancelled says so and offers nothing more."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from scheduling.models import Job, JobStatus, SchedulingPass
from scheduling.services import jobs as job_services
from scheduling.services.executor import job_report
from scheduling.services.heartbeat import heartbeat_record
from tests.factories import job_in
from tests.pages.conftest import P5, build_world

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DESKTOP, PHONE = (1440, 900), (390, 844)
SMALL_DESKTOP = (1360, 900)  # the screenshots' window, where the staff menu once wrapped
WIDTHS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
SHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"


def shot(page, name: str, viewport) -> None:
    """Kept under var/ (not committed) to look at."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}-{viewport[0]}.png"), full_page=True)


def no_sideways_scroll(page) -> None:
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


@pytest.fixture
def world(transactional_db):
    return build_world()


@WIDTHS
def test_a_payload_without_command_is_refused_on_the_form_and_nothing_is_placed(
    world, sign_in, live_server, viewport
):
    page = sign_in("ana", viewport=viewport)
    page.goto(f"{live_server.url}/jobs/new/")
    needs = page.locator("#payload-needs")
    expect(needs).to_contain_text("runs jobs as real processes: the payload needs payload.command")
    page.fill("#id_name", "bad name!")
    # the rows come back with the chosen queue's instance types
    with page.expect_response(lambda response: "/rows/" in response.url):
        page.select_option("#id_quota_share", label="training / nlp (NLP)")
    page.select_option("#id_pref-0-instance_type", label=P5)
    page.fill("#id_payload", "{}")
    page.click("button[value=submit]")
    # one round: the name and the payload are named together
    expect(page.locator("#errors-payload")).to_contain_text("payload.command is required")
    expect(page.locator("#errors-name")).not_to_be_empty()
    no_sideways_scroll(page)
    shot(page, "submit-refused", viewport)
    assert not Job.objects.exists()
    page.fill("#id_name", "pretrain")
    page.fill("#id_payload", '{"command": ["python3", "train.py"]}')
    page.click("button[value=submit]")
    expect(page.locator("h1")).to_contain_text("pretrain")
    assert Job.objects.get().payload == {"command": ["python3", "train.py"]}


@WIDTHS
def test_the_overview_raises_no_alarm_for_a_settled_queue_and_names_a_silent_beat(
    world, sign_in, live_server, viewport
):
    job_in(world.nlp, [(P5, 1)], name="long-placed")
    world.run_pass()
    SchedulingPass.objects.update(started_at=timezone.now() - timedelta(hours=2))
    heartbeat_record(component="beat")
    heartbeat_record(component="worker")
    page = sign_in("ana", viewport=viewport)
    expect(page.locator("#queue-" + str(world.queue.pk))).to_contain_text("Last pass")
    expect(page.locator(".scheduler-silent")).to_have_count(0)
    no_sideways_scroll(page)
    shot(page, "overview-settled", viewport)
    heartbeat_record(component="beat", now=timezone.now() - timedelta(minutes=10))
    page.reload()
    expect(page.locator(".scheduler-silent")).to_contain_text("The beat has been silent for 10 min")


@pytest.mark.parametrize("viewport", [DESKTOP, SMALL_DESKTOP, PHONE], ids=["desktop", "1360", "phone"])
def test_a_staff_member_s_menu_is_one_row_from_a_phone_to_a_desktop_and_jobs_are_compact(
    world, sign_in, live_server, viewport
):
    for n in range(6):
        job_in(world.nlp, [(P5, 1)], name=f"nlp-{n}", user=world.ana)
    world.run_pass()
    page = sign_in("admin", viewport=viewport)
    page.goto(f"{live_server.url}/jobs/")
    nav_height = page.locator("nav.nav").bounding_box()["height"]
    assert nav_height < 45, nav_height  # one row of links (it wrapped to three)
    first = page.locator("table.jobs tbody tr").first.bounding_box()["height"]
    limit = 130 if viewport == PHONE else 90
    assert first < limit, first  # a 250 px card before
    no_sideways_scroll(page)
    shot(page, "jobs", viewport)


@WIDTHS
def test_a_job_being_cancelled_says_so_and_offers_nothing_more(world, sign_in, live_server, viewport):
    job = job_in(world.nlp, [(P5, 1)], name="to-cancel", user=world.ana)
    world.run_pass()
    job_report(job_id=job.pk, attempt=1, status=JobStatus.RUNNING)
    page = sign_in("ana", viewport=viewport)
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    cancel = page.get_by_role("button", name="Cancel job…")
    expect(cancel).to_be_visible()
    shot(page, "job-running", viewport)
    cancel.click()
    page.get_by_role("button", name="Yes, cancel to-cancel").click()
    expect(page.locator(".flash")).to_contain_text("Stopping to-cancel")
    expect(page.locator("#cancelling")).to_contain_text("Being cancelled")
    expect(page.get_by_role("button", name="Change priority")).to_have_count(0)
    expect(page.get_by_role("button", name="Cancel job…")).to_have_count(0)
    no_sideways_scroll(page)
    shot(page, "job-cancelling", viewport)
    assert Job.objects.get(pk=job.pk).status == JobStatus.STOPPING
    job_services.job_cancel(job_id=job.pk, actor=None)  # a second cancel changes nothing
