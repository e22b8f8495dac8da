"""A share's page: utilization over time, loans, evictions, and (for its team and staff) its jobs."""

from __future__ import annotations

from django.conf import settings
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views.decorators.http import require_GET

from portal import charts
from portal.views.common import htmx_target, page, refresh_seconds, viewer
from scheduling.models import QuotaShare
from scheduling.selectors import shares
from scheduling.selectors.budgets import share_budgets

LIVE_REGION, CHART_REGION = "share-live", "share-chart"


@require_GET
@page
def share_detail(request, share_id: int):
    share = get_object_or_404(QuotaShare.objects.select_related("job_queue", "team"), pk=share_id)
    window = request.GET.get("window", "hour")
    if window not in shares.CHART_WINDOWS:
        window = "hour"
    target = htmx_target(request, (LIVE_REGION, CHART_REGION))
    now = timezone.now()
    context = {
        "share": share,
        "window": window,
        "windows": shares.CHART_WINDOWS,
        "window_label": shares.CHART_WINDOWS[window][0],
        "now": now,
        "refresh_seconds": refresh_seconds(),
        # Samples come at most every SAMPLE_INTERVAL_SECONDS: asking more often redraws the same chart.
        "chart_refresh_seconds": max(refresh_seconds(), settings.SAMPLE_INTERVAL_SECONDS),
        "sample_interval": settings.SAMPLE_INTERVAL_SECONDS,
    }
    if target in (None, LIVE_REGION):
        context["detail"] = shares.share_detail(viewer=viewer(request), share=share)
        context["budget"] = share_budgets(shares=[share], now=now).get(share.pk)
    if target in (None, CHART_REGION):
        context["charts"] = share_charts(share_id=share.pk, window=window, now=now)
    template = "portal/share_detail.html"
    if target:
        template += f"#{target}"
    return render(request, template, context)


def share_charts(*, share_id: int, window: str, now) -> list[tuple[str, charts.UsageChart]]:
    """One chart per instance type the share has samples for, over the window ending now."""
    start = now - shares.CHART_WINDOWS[window][1]
    history = shares.share_usage_history(share_id=share_id, since=start)
    return [
        (type_name, charts.usage_chart(points, start=start, end=now))
        for type_name, points in sorted(history.items())
    ]
