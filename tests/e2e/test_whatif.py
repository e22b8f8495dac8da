"""The what-if page in a real browser: an administrator edits a proposal, follows the run's progress bar to
the end without reloading, reads current against proposed, and applies it."""

from __future__ import annotations

import re
import threading
import time
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone
from playwright.sync_api import expect

from scheduling.models import Event, EventKind, InstanceType, QuotaShare
from tests.e2e.conftest import page_loads
from tests.factories import job_in
from tests.pages.conftest import P4, build_world
from whatif import services as whatif_services
from whatif import tasks as whatif_tasks
from whatif.models import WhatIfRun

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def world(transactional_db):
    world = build_world()
    begin = (timezone.now() - timedelta(days=2)).replace(hour=0, minute=0, second=0, microsecond=0)
    for n in range(4):  # vision wants 20 P4 for an hour; it may hold 12 while nlp keeps its 4 to itself
        at = begin + timedelta(minutes=n)
        job_in(
            world.vision,
            [(P4, 5)],
            name=f"vision-{n}",
            created_at=at,
            runnable_since=at,
            duration_seconds=3600,
        )
    world.begin = begin
    return world


@pytest.fixture
def worker(monkeypatch):
    """Stands in for the Celery worker: runs are recorded when enqueued, and `run(run_id)` executes one in a
    thread of its own, holding each progress report on screen long enough for the page's poll to see it."""
    enqueued: list[int] = []
    monkeypatch.setattr(whatif_tasks.run_whatif, "delay", enqueued.append)
    report = whatif_services._WhatIfProgress.report

    def slow_report(self, fraction):
        written = self.written
        report(self, fraction)
        if self.written != written:
            time.sleep(2.5)

    monkeypatch.setattr(whatif_services._WhatIfProgress, "report", slow_report)
    threads = []

    def work(run_id: int) -> None:
        try:
            whatif_tasks.run_whatif.apply(args=(run_id,))
        finally:
            connections.close_all()  # this thread's own connection, or the test database cannot be dropped

    def run(run_id: int) -> None:
        thread = threading.Thread(target=work, args=(run_id,))
        thread.start()
        threads.append(thread)

    yield enqueued, run
    for thread in threads:
        thread.join(timeout=30)


def test_an_admin_runs_a_what_if_watches_it_finish_and_applies_it(world, sign_in, worker, live_server):
    enqueued, run_worker = worker
    page = sign_in("admin")
    page.click("nav >> text=What-if")
    expect(page.locator("#whatif-editor h2")).to_have_text("Proposal for queue training")
    # nlp lends its idle P4; vision may borrow without a cap.
    page.select_option(f"#id_s{world.nlp.pk}-strategy", "LEND")
    page.fill(f"#id_s{world.vision.pk}-borrow_limit", "-1")
    page.fill("#id_start", world.begin.strftime("%Y-%m-%dT%H:%M"))
    page.fill("#id_hours", "24")
    page.click("text=Run the what-if")
    page.wait_for_url(re.compile(r"/manage/whatif/\d+/$"))
    run = WhatIfRun.objects.get()
    assert enqueued == [run.pk]
    expect(page.locator("#whatif-live h2")).to_have_text("Waiting for a worker")
    expect(page.locator("#whatif-progress")).to_have_attribute("value", "0")

    moves = page_loads(page)
    run_worker(run.pk)
    expect(page.locator("#whatif-live .percent")).to_have_text("50%", timeout=8000)
    expect(page.locator("#whatif-live h2")).to_have_text("Replaying the proposal")
    expect(page.locator("#whatif-live")).to_contain_text("Current and proposed, per team", timeout=15000)
    assert moves == []  # the progress bar became the result in place

    vision = page.locator(".compare-card", has=page.locator("h3", has_text="vision"))
    median = vision.locator("tr", has=page.locator("th", has_text="Wait p50"))
    expect(median).to_have_class("verdict-better")
    expect(median.locator("td").nth(1)).to_have_text("0s")
    # Each chart is drawn for a desktop and for a phone; the window shows one of the two.
    expect(page.locator(".whatif-charts svg")).to_have_count(6)
    expect(page.locator(".whatif-charts svg >> visible=true")).to_have_count(3)
    expect(page.locator(".chart-waits svg >> visible=true")).to_be_visible()

    page.check("#id_confirm")
    page.click("button:has-text('Apply this proposal')")
    expect(page.locator(".flash")).to_contain_text(f"Applied what-if #{run.pk} to queue training")
    expect(page.locator("#apply")).to_contain_text("Applied by admin")
    assert QuotaShare.objects.get(pk=world.nlp.pk).strategy == "LEND"
    assert QuotaShare.objects.get(pk=world.vision.pk).borrow_limit == -1
    audit = Event.objects.filter(kind=EventKind.CONFIG_CHANGED, data__object="whatif.WhatIfRun")
    assert audit.count() == 1


def test_an_admin_proposes_fair_borrowing_and_a_lending_limit_and_compares(
    world, sign_in, worker, live_server
):
    enqueued, run_worker = worker
    page = sign_in("admin")
    page.click("nav >> text=What-if")
    # nlp lends at most 2 of its 4 idle P4; borrowers share idle capacity by weight.
    page.select_option(f"#id_s{world.nlp.pk}-strategy", "LEND")
    page.fill(f"#id_s{world.nlp.pk}-lending_{InstanceType.objects.get(name=P4).pk}", "2")
    page.select_option("#id_idle_capacity_assignment", "FAIR_SHARE")
    page.fill(f"#id_s{world.vision.pk}-fair_share_weight", "2")
    page.fill("#id_start", world.begin.strftime("%Y-%m-%dT%H:%M"))
    page.fill("#id_hours", "24")
    page.click("text=Run the what-if")
    page.wait_for_url(re.compile(r"/manage/whatif/\d+/$"))
    run = WhatIfRun.objects.get()
    assert enqueued == [run.pk]
    run_worker(run.pk)
    expect(page.locator("#whatif-live")).to_contain_text("Current and proposed, per team", timeout=20000)

    changes = page.locator(".whatif-queue-changes")
    expect(changes.locator("td.changed")).to_have_text("FIFO → FAIR_SHARE")
    nlp = page.locator(".whatif-changes tr", has=page.locator("th", has_text="nlp"))
    expect(nlp.locator("td[data-label='Lends at most']")).to_have_text(f"all → {P4} × 2")
    vision = page.locator(".compare-card", has=page.locator("h3", has_text="vision"))
    expect(vision.locator("tr", has=page.locator("th", has_text="Wait p50"))).to_be_visible()
    expect(page.locator(".whatif-charts svg >> visible=true")).to_have_count(3)
