"""The event log (`/events/`): filters, and a live tail that appends events newer than the last one shown."""

from __future__ import annotations

from django.conf import settings
from django.shortcuts import render
from django.views.decorators.http import require_GET

from portal.forms.filters import EventFilterForm
from portal.params import int_param
from portal.views.common import page, refresh_seconds, viewer
from scheduling.selectors import events


@require_GET
@page
def event_log(request):
    """Newest first; `?after=ID` (the live tail, for htmx) answers only the rows newer than ID, and the
    poller; `?before=ID` is the page of older events (no tail there: new events belong on the first page)."""
    form = EventFilterForm(request.GET or None)
    filters = events.EventFilters()
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        filters = events.EventFilters(
            kind=data["kind"] or None,
            job_queue_id=data["job_queue"].pk if data["job_queue"] else None,
            share_id=data["quota_share"].pk if data["quota_share"] else None,
            job_id=data["job"],
        )
    query = request.GET.copy()
    query.pop("after", None)
    query.pop("before", None)
    after = int_param(request.GET.get("after")) if request.htmx else None
    before = int_param(request.GET.get("before")) if after is None else None
    tail, older = after is not None, before is not None
    rows = events.event_log(
        viewer=viewer(request),
        filters=filters,
        after_id=after,
        before_id=before,
        limit=settings.PAGE_LIST_SIZE,
    )
    last_id = rows[0].id if rows else (after or 0)
    context = {
        "form": form,
        "rows": rows,
        "tail": tail,
        "older": older,
        "next_before": rows[-1].id if len(rows) == settings.PAGE_LIST_SIZE else None,
        "last_id": last_id,
        "query": query.urlencode(),
        "refresh_seconds": refresh_seconds(),
    }
    template = "portal/event_log.html" + ("#event-tail" if tail else "")
    return render(request, template, context)
