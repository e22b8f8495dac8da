"""Text colours of app.css against their backgrounds: links and status pills at least 4.5:1 (WCAG AA)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CSS = (Path(__file__).resolve().parents[2] / "static" / "portal" / "app.css").read_text()
VARIABLES = dict(re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{6})", CSS))


def _colour(value: str) -> str:
    value = value.strip()
    match = re.fullmatch(r"var\(--([\w-]+)\)", value)
    return VARIABLES[match.group(1)] if match else value


def _luminance(hex_colour: str) -> float:
    channels = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(foreground: str, background: str) -> float:
    light, dark = sorted((_luminance(foreground), _luminance(background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def _rule(selector: str) -> tuple[str, str]:
    body = re.search(rf"(?m)^{re.escape(selector)}[^{{]*\{{([^}}]*)\}}", CSS).group(1)
    background = re.search(r"background:\s*([^;]+);", body).group(1)
    return _colour(re.search(r"(?<![-\w])color:\s*([^;]+);", body).group(1)), _colour(background)


@pytest.mark.parametrize("page_background", ["#ffffff", VARIABLES["bg"]])
def test_links_are_readable_on_panels_and_the_page(page_background):
    assert contrast(VARIABLES["accent"], page_background) >= 4.5


@pytest.mark.parametrize(
    "selector",
    [
        ".status-runnable",
        ".status-scheduled",
        ".status-running",
        ".status-succeeded",
        ".status-failed",
        ".status-cancelled",
        ".badge-ok",
        ".badge-off",
        ".badge-protected",
        ".kind-admitted",
    ],
)
def test_status_pills_are_readable(selector):
    foreground, background = _rule(selector)
    assert contrast(foreground, background) >= 4.5, (selector, foreground, background)
