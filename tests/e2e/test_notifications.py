"""The Notifications page in a browser, at a laptop's width and a phone's: a member adds a webhook (an invalid
URL, then no trigger, first: each refused on its field), sends a test that reaches a receiver on 127.0.0.1
(the log shows it sent without a reload), and removes the subscription; nothing wider than the window."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from notifications import tasks
from notifications.models import Subscription
from tests.e2e.conftest import page_loads
from tests.e2e.test_narrow import DESKTOP, PHONE, fits
from tests.notifications.receiver import http_receiver
from tests.pages.conftest import build_world

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def receiver():
    with http_receiver() as state:
        yield state


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_a_member_subscribes_tests_and_removes_a_webhook(
    transactional_db,
    sign_in,
    receiver,
    monkeypatch,
    settings,
    viewport,  # noqa: F811
):
    settings.NOTIFY_ALLOW_PRIVATE_WEBHOOKS = True
    build_world()
    enqueued: list[int] = []
    monkeypatch.setattr(tasks.send, "delay", enqueued.append)
    page = sign_in("ana", viewport=viewport)
    page.get_by_role("navigation").get_by_role("link", name="Notifications").click()
    expect(page.get_by_role("heading", name="Notifications", level=1)).to_be_visible()
    expect(page.get_by_text("No subscriptions yet")).to_be_visible()
    fits(page)

    page.fill("#id_name", "pager")
    page.fill("#id_target", "ftp://example.org/hook")
    page.click("button:text('Add subscription')")
    expect(page.locator("#errors-target")).to_contain_text(
        "Enter an http:// or https:// URL with a host name."
    )
    fits(page)

    page.fill("#id_target", receiver.url)
    for code in ("JOB_FAILED", "JOB_EXECUTOR_LOST"):
        page.uncheck(f"input[value={code}]")
    page.click("button:text('Add subscription')")
    expect(page.locator("#errors-triggers")).to_contain_text("Choose at least one thing to be told about.")
    fits(page)

    page.check("input[value=JOB_PREEMPTED]")
    page.click("button:text('Add subscription')")
    expect(page.get_by_role("heading", name="pager")).to_be_visible()
    secret = Subscription.objects.get().secret
    expect(page.get_by_text(secret)).to_be_visible()
    fits(page)

    page.get_by_role("button", name="Send a test").click()
    log = page.get_by_role("table", name="Delivery log")
    expect(log).to_contain_text("test notification for pager")
    expect(log).to_contain_text("PENDING")
    loads = page_loads(page)
    [delivery] = enqueued
    tasks.send.apply(args=(delivery,))  # a worker takes it: the log shows it without a reload
    expect(log).to_contain_text("SENT")
    assert loads == []
    assert receiver.received[0].json()["trigger"] == "TEST"
    fits(page)

    page.get_by_role("button", name="Remove").click()
    expect(page.get_by_text("Subscription removed, with its log.")).to_be_visible()
    assert not Subscription.objects.exists()
