"""What a person reads, in a real browser at a laptop's width and a phone's: a field the inline check marks
invalid says so to a screen reader, and stops saying so once fixed; a pending job's row starts with its name;
the what-if charts' and the share charts' text is at least 11 px on screen; a table's title spans the table."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from scheduling.services.estimates import queue_estimates_refresh
from tests.e2e import test_narrow
from tests.e2e.test_narrow import PHONE, WIDTHS, on_screen
from tests.pages.conftest import P4, build_world

busy = test_narrow.busy  # jobs on plans and on demand, a reclaim, long reasons, a finished what-if run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def world(transactional_db):
    return build_world()


def description(page, selector: str) -> str:
    """The text a screen reader reads as the control's description: its aria-describedby elements' text."""
    return page.evaluate(
        """(selector) => {
            const ids = (document.querySelector(selector).getAttribute("aria-describedby") || "").split(" ");
            return ids.filter(Boolean).map((id) => document.getElementById(id).textContent.trim()).join(" | ");
        }""",
        selector,
    )


@WIDTHS
def test_the_inline_check_marks_a_field_invalid_and_valid_again_for_screen_readers(world, sign_in, viewport):
    page = sign_in("ana", viewport=viewport)
    page.click("nav >> text=Submit a job")
    count = "#id_pref-0-instance_count"
    expect(page.locator(count)).not_to_have_attribute("aria-invalid", "true")
    page.fill("#id_name", "checked-inline")
    page.select_option("#id_quota_share", label="training / nlp (NLP)")
    page.select_option("#id_pref-0-instance_type", label=P4)
    page.fill(count, "9")
    page.locator(count).blur()

    expect(page.locator("#errors-pref-0-instance_count")).to_contain_text("can never run")
    expect(page.locator(count)).to_have_attribute("aria-invalid", "true")
    assert "can never run: share nlp may hold at most 4" in description(page, count)
    expect(page.locator(count).locator("xpath=ancestor::div[contains(@class, 'field')][1]")).to_have_class(
        "field has-errors"
    )

    page.fill(count, "2")
    page.locator(count).blur()

    expect(page.locator("#errors-pref-0-instance_count")).to_be_empty()
    expect(page.locator(count)).not_to_have_attribute("aria-invalid", "true")
    assert "can never run" not in description(page, count)
    # A bad name: its input is described by its help and its error, then by its help alone once fixed.
    page.fill("#id_name", "has space")
    page.locator("#id_name").blur()
    expect(page.locator("#errors-name")).not_to_be_empty()
    expect(page.locator("#id_name")).to_have_attribute("aria-invalid", "true")
    name_description = description(page, "#id_name")
    assert page.locator("#errors-name").inner_text().strip() in name_description
    assert page.locator("#id_name_helptext").inner_text().strip() in name_description
    page.fill("#id_name", "no-space")
    page.locator("#id_name").blur()
    expect(page.locator("#id_name")).not_to_have_attribute("aria-invalid", "true")
    assert description(page, "#id_name") == page.locator("#id_name_helptext").inner_text().strip()
    on_screen(page.locator(count))


@WIDTHS
def test_a_pending_job_s_row_starts_with_its_name_and_shows_its_estimate_and_reason(
    busy, sign_in, live_server, viewport
):
    queue_estimates_refresh(job_queue_id=busy.queue.pk)
    page = sign_in("ana", viewport=viewport)
    page.goto(f"{live_server.url}/shares/{busy.nlp.pk}/")
    row = page.locator("table.jobs tr", has_text="nlp-waits-for-a-very-long-while")
    name, position = row.locator("td.job-name"), row.locator("td[data-label=Position]")
    on_screen(name)
    on_screen(position)
    name_box, position_box = name.bounding_box(), position.bounding_box()
    if viewport == PHONE:  # stacked: one cell a line, the name on the first
        assert name_box["y"] + name_box["height"] <= position_box["y"] + 0.5, (name_box, position_box)
    else:  # a table: the name in the first column
        assert name_box["x"] < position_box["x"], (name_box, position_box)
    estimate = row.locator("td.estimate-cell")
    on_screen(estimate)
    expect(estimate).to_contain_text("likely to start around")
    reason = row.locator("td.reason")
    on_screen(reason)
    expect(reason).to_contain_text("share nlp")
    assert reason.bounding_box()["height"] < 844  # wrapped across the width, not a column of single words


CHART_TEXT_SIZES = """() => Array.from(document.querySelectorAll(".whatif-charts svg"))
    .filter((svg) => svg.getClientRects().length > 0)
    .map((svg) => {
        const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
        const sizes = Array.from(svg.querySelectorAll("text"))
            .filter((text) => text.textContent.trim())
            .map((text) => parseFloat(getComputedStyle(text).fontSize) * scale);
        return {width: svg.getBoundingClientRect().width, smallest: Math.min(...sizes), texts: sizes.length};
    })"""


@WIDTHS
def test_the_what_if_charts_text_is_at_least_11_px_on_screen(busy, sign_in, live_server, viewport):
    page = sign_in("admin", viewport=viewport)
    page.goto(f"{live_server.url}/manage/whatif/{busy.run.pk}/")
    expect(page.locator(".whatif-charts svg >> visible=true").first).to_be_visible()
    charts = page.evaluate(CHART_TEXT_SIZES)
    assert len(charts) == 3, charts  # the waits, the queue as it is, as proposed: one drawing each shown
    for chart in charts:
        assert chart["texts"] > 5 and chart["smallest"] >= 11, charts
        assert chart["width"] <= viewport[0]


@WIDTHS
def test_the_share_charts_labels_are_at_least_11_px_on_screen(busy, sign_in, live_server, viewport):
    page = sign_in("ana", viewport=viewport)
    page.goto(f"{live_server.url}/shares/{busy.nlp.pk}/")
    expect(page.locator(".usage-chart svg").first).to_be_visible()
    sizes = page.evaluate(
        """() => Array.from(document.querySelectorAll(".usage-chart svg")).map((svg) => {
            const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
            return Array.from(svg.querySelectorAll("text.tick"))
                .map((text) => parseFloat(getComputedStyle(text).fontSize) * scale);
        })"""
    )
    assert sizes and all(len(chart) >= 5 and min(chart) >= 11 for chart in sizes), sizes
    # The labels stay inside the drawing (none cut at an edge).
    outside = page.evaluate(
        """() => Array.from(document.querySelectorAll(".usage-chart svg")).flatMap((svg) => {
            const box = svg.getBoundingClientRect();
            return Array.from(svg.querySelectorAll("text.tick")).filter((text) => {
                const r = text.getBoundingClientRect();
                return r.left < box.left - 0.5 || r.right > box.right + 0.5
                    || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5;
            }).map((text) => [text.textContent, JSON.stringify(text.getBoundingClientRect()), JSON.stringify(box)]);
        })"""
    )
    assert outside == []


@WIDTHS
def test_the_share_forms_sum_of_limits_has_its_title_across_the_width(busy, sign_in, live_server, viewport):
    page = sign_in("admin", viewport=viewport)
    page.goto(f"{live_server.url}/manage/shares/{busy.vision.pk}/")
    table = page.locator("table.limits")
    caption = table.locator("caption")
    on_screen(caption)
    # One or two lines as wide as the table, not a column of single words beside it.
    assert caption.bounding_box()["width"] >= 0.9 * table.bounding_box()["width"]
    assert caption.bounding_box()["height"] < 60
