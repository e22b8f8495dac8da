"""The overview (`/`): capacity per queue and instance type, every share at a glance, refreshed live."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from portal.views.common import htmx_target, page, refresh_seconds, viewer
from scheduling.selectors import heartbeat as heartbeat_selectors
from scheduling.selectors import overview as overview_selectors

LIVE_REGION = "overview-live"


@require_GET
@page
def overview(request):
    now = timezone.now()
    queues = overview_selectors.overview(
        viewer=viewer(request), long_wait_since=now - timedelta(seconds=settings.PAGE_STARVED_AFTER_SECONDS)
    )
    context = {
        "queues": queues,
        "now": now,
        # Not a pass's age (a settled queue rightly runs none for hours): the heartbeats of beat and workers.
        "silence": heartbeat_selectors.scheduler_silence(now=now),
        "refresh_seconds": refresh_seconds(),
    }
    template = "portal/overview.html"
    if htmx_target(request, (LIVE_REGION,)):
        template += f"#{LIVE_REGION}"
    return render(request, template, context)
