"""Debian's Chromium for Playwright, in the browser tests and the screenshot tool: where it is and the flags it
runs with. Playwright never downloads a browser of its own here."""

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
