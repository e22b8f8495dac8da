"""Browser tests: Playwright's sync API driving Debian's Chromium (never a downloaded browser) against
pytest-django's live server. Skipped with the reason when /usr/bin/chromium is missing, unless
QUOTAPORTAL_REQUIRE_BROWSER is set (CI), which makes that a failure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tools.browser import CHROMIUM, CHROMIUM_ARGS

# Playwright's sync API keeps an event loop in this thread; the tests' own ORM calls are synchronous anyway.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")


def pytest_collection_modifyitems(config, items):
    if Path(CHROMIUM).exists():
        return
    if os.environ.get("QUOTAPORTAL_REQUIRE_BROWSER"):
        raise pytest.UsageError(
            f"QUOTAPORTAL_REQUIRE_BROWSER is set but {CHROMIUM} does not exist: apt-get install chromium"
        )
    skip = pytest.mark.skip(reason=f"needs Debian's Chromium at {CHROMIUM} (apt-get install chromium)")
    for item in items:
        if "e2e" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def fast_pages(settings):
    """Live parts refresh every second, so a test sees a change without waiting long."""
    settings.PAGE_REFRESH_SECONDS = 1
    settings.SAMPLE_INTERVAL_SECONDS = 1


@pytest.fixture
def sign_in(browser, live_server, fast_pages):
    """A new browser page signed in as `username` through the login form, in a window of `viewport` (width,
    height): a laptop's by default."""
    pages = []

    def open_as(username: str, password: str = "pw-for-tests-1", viewport: tuple[int, int] = (1280, 900)):
        context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        page = context.new_page()
        page.set_default_timeout(10_000)
        page.goto(f"{live_server.url}/accounts/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", password)
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")
        pages.append(context)
        return page

    yield open_as
    for context in pages:
        context.close()


def page_loads(page) -> list[str]:
    """Record every full load of the page from now on (pushState is not one): a live update must add none."""
    seen: list[str] = []
    page.on("load", lambda loaded: seen.append(loaded.url))
    return seen
