"""Every page at a laptop's width and a phone's (390 x 844): nothing wider than the window, the reasons (why a
job waits, what happened, why an attempt ended) on screen, plan use beside on-demand use, a job found by name."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from scheduling.models import Job, JobStatus
from scheduling.services.executor import job_report
from tests.factories import job_in
from tests.pages.conftest import G5, P4, P5, build_world
from whatif import services as whatif_services

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DESKTOP, PHONE = (1440, 900), (390, 844)
WIDTHS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])


@pytest.fixture
def busy(transactional_db):
    """Jobs on the plan and on demand, a borrower reclaimed, a job that waits with a long reason, a finished
    job, a finished what-if run."""
    world = build_world()
    begin = timezone.now() - timedelta(hours=3)
    for n in range(3):
        at = begin + timedelta(minutes=n)
        job_in(
            world.vision,
            [(P4, 5)],
            name=f"vision-old-{n}",
            created_at=at,
            runnable_since=at,
            duration_seconds=600,
        )
    job_in(world.nlp, [(P5, 4)], name="nlp-on-demand", user=world.ana)
    job_in(world.nlp, [(P5, 3, world.plan)], name="nlp-on-the-plan", user=world.ana)
    job_in(world.nlp, [(P5, 2), (P4, 9)], name="nlp-waits-for-a-very-long-while", user=world.ana)
    done = job_in(world.nlp, [(P4, 1)], name="nlp-finished", user=world.ana)
    job_in(world.vision, [(P4, 12)], name="vision-borrower", user=world.chen)
    world.run_pass()
    job_in(world.speech, [(P4, 3)], name="speech-reclaims", user=world.eli)
    world.run_pass()
    # From now on placed jobs are protected from early preemption for an hour; speech lends at most 2 G5.
    world.queue.preemption_min_runtime_seconds = 3600
    world.queue.save()
    world.speech.capacity_limits.filter(instance_type__name=G5).update(lending_limit=2)
    job_report(job_id=done.pk, status=JobStatus.RUNNING)
    job_report(job_id=done.pk, status=JobStatus.SUCCEEDED, reason="the trainer exited 0 after 20 epochs")
    world.waiting = Job.objects.get(name="nlp-waits-for-a-very-long-while")
    world.finished = done
    run = whatif_services.whatif_run_start(
        job_queue=world.queue,
        source="HISTORY",
        start=begin.replace(minute=0, second=0, microsecond=0),
        days=1.0,
        actor=world.admin,
        proposal=[
            whatif_services.ShareProposal("nlp", {P5: 4, P4: 4}, "LEND"),
            whatif_services.ShareProposal("vision", {P4: 6, G5: 8}, "LEND_AND_BORROW", borrow_limit=-1),
            whatif_services.ShareProposal("speech", {P4: 4, G5: 8}, "LEND", lending_limits={G5: 4}),
        ],
        queue_proposal=whatif_services.QueueProposal("FAIR_SHARE", 600),
    )
    world.run = whatif_services.whatif_run_execute(run_id=run.pk)
    return world


def fits(page) -> None:
    """Nothing on the page reaches past the window's right edge (the page does not scroll sideways)."""
    widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"{page.url} is {widths[0]} px wide in a {widths[1]} px window"


def on_screen(locator) -> None:
    """The element is shown and lies within the window's width: a person reads it without scrolling sideways."""
    expect(locator).to_be_visible()
    box = locator.bounding_box()
    width = locator.page.evaluate("window.innerWidth")
    assert box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5, f"{box} outside 0..{width}"


def pages(world) -> list[tuple[str, list[str]]]:
    """Every page, with the selectors of the reasons it shows."""
    return [
        ("/", [".card .why", ".recent-evictions .eviction .why"]),
        (f"/shares/{world.nlp.pk}/", ["#share-live td.reason", "#share-live .badge-protected >> nth=0"]),
        (f"/shares/{world.vision.pk}/", ["#share-live .eviction .why"]),
        ("/jobs/", ["#job-table td.reason"]),
        (f"/jobs/{world.waiting.pk}/", [".reason-box"]),
        (f"/jobs/{world.finished.pk}/", ["td.reason"]),
        ("/jobs/new/", []),
        ("/events/", ["table.events td.reason"]),
        ("/manage/queues/", []),
        (f"/manage/queues/{world.queue.pk}/", []),
        ("/manage/environments/", []),
        (f"/manage/environments/{world.queue.service_environment_id}/", []),
        ("/manage/shares/", []),
        (f"/manage/shares/{world.vision.pk}/", []),
        ("/manage/plans/", []),
        ("/manage/plans/new/", []),
        ("/manage/whatif/", []),
        (f"/manage/whatif/{world.run.pk}/", []),
    ]


@WIDTHS
def test_no_page_is_wider_than_the_window_and_the_reasons_are_on_screen(busy, sign_in, live_server, viewport):
    page = sign_in("admin", viewport=viewport)
    for path, reasons in pages(busy):
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")
        fits(page)
        for selector in reasons:
            on_screen(page.locator(selector).first)


@WIDTHS
def test_plan_use_shows_beside_on_demand_use(busy, sign_in, live_server, viewport):
    page = sign_in("ana", viewport=viewport)
    card = page.locator(f"#share-{busy.nlp.pk}")
    expect(card.locator("table.usage")).to_contain_text("4/4")
    expect(card.locator("tr.plan-row")).to_contain_text("+3")
    on_screen(card.locator("tr.plan-row td.note"))
    expect(card.locator("tr.plan-row")).to_contain_text("on plan nlp-p5-december")
    on_screen(page.locator(".capacity .plan-use").first)
    expect(page.locator(".capacity .plan-use").first).to_contain_text(
        "+ on plan nlp-p5-december: 3 of 4 in use"
    )
    page.goto(f"{live_server.url}/shares/{busy.nlp.pk}/")
    p5 = page.locator("#share-live tr", has_text=P5).locator("td.plan-use")
    on_screen(p5)
    expect(p5).to_contain_text("+3 on plan nlp-p5-december")
    page.goto(f"{live_server.url}/jobs/")
    expect(page.locator("#job-table")).to_contain_text("ml.p5.48xlarge x3, plan nlp-p5-december")


@WIDTHS
def test_a_member_finds_a_job_by_name_and_reads_why_it_waits(busy, sign_in, live_server, viewport):
    page = sign_in("ana", viewport=viewport)
    page.goto(f"{live_server.url}/jobs/")
    page.fill("#id_q", "very-long")
    expect(page.locator("#job-table tbody tr")).to_have_count(1)  # in place, as the name is typed
    row = page.locator("#job-table tbody tr").first
    expect(row).to_contain_text("nlp-waits-for-a-very-long-while")
    on_screen(row.locator("td.reason"))
    expect(row.locator("td.reason")).to_contain_text("share nlp")
    assert "q=very-long" in page.url
    page.fill("#id_q", f"#{busy.finished.pk}")
    expect(page.locator("#job-table tbody tr")).to_have_count(1)
    expect(page.locator("#job-table tbody tr").first).to_contain_text("nlp-finished")


@WIDTHS
def test_the_overview_explains_its_card_colours(busy, sign_in, viewport):
    page = sign_in("ana", viewport=viewport)
    legend = page.locator(".card-legend").first
    on_screen(legend)
    for words in ("nothing waits", "jobs wait", "starved"):
        expect(legend).to_contain_text(words)
