"""The what-if pages (staff): edit a queue's shares as a proposal, replay a window of jobs against the queue
as it is and as proposed (a Celery task, with a live progress bar), compare them side by side and apply the
proposal through the share services."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from portal.params import int_param
from portal.views.common import htmx_target, staff_page
from scheduling.errors import Conflict
from scheduling.models import JobQueue
from whatif import forms as f
from whatif import selectors, services
from whatif import sources as replay_sources
from whatif.models import WhatIfRun

# The progress bar asks this often while a run is queued or running (only while the tab is visible).
PROGRESS_POLL_SECONDS = 1
PHILLY_START = datetime(2017, 10, 9, tzinfo=UTC)
PHILLY_DAYS_BY_DEFAULT = 14
UNCLAIMED_AFTER = timedelta(seconds=30)


def _queue(raw) -> JobQueue | None:
    pk = raw if isinstance(raw, int) else int_param(raw, minimum=1)
    return selectors.whatif_queue(job_queue_id=pk) if pk is not None else None


def _philly() -> dict:
    """Whether the Philly trace is there, where it is looked for, and a default window inside its span."""
    trace = replay_sources.philly_trace()
    vc_file = replay_sources.philly_vc_file(trace)
    if not trace.exists() or not vc_file.exists():
        return {"available": False, "path": trace, "vc_file": vc_file}
    first, last = replay_sources.philly_trace_span(trace)
    start = PHILLY_START if first <= PHILLY_START < last else first.replace(hour=0, minute=0, second=0)
    days = min(
        float(PHILLY_DAYS_BY_DEFAULT), max(services.WHATIF_MIN_DAYS, (last - start).total_seconds() / 86400)
    )
    return {"available": True, "path": trace, "first": first, "last": last, "start": start, "days": days}


def _default_window(queue: JobQueue, source: str, philly: dict) -> dict:
    if source == WhatIfRun.Source.PHILLY and philly["available"]:
        return {"source": source, "start": philly["start"], "days": philly["days"]}
    start, days = selectors.history_window(
        first_job_at=queue.first_job_at, last_job_at=queue.last_job_at, now=timezone.now()
    )
    return {"source": source, "start": start, "days": days}


def _editor(
    queue: JobQueue, data=None, base: WhatIfRun | None = None, *, source: str = WhatIfRun.Source.HISTORY
) -> f.WhatIfForm:
    """The editor of a queue's proposal: its shares as they are, or as `base` (a past run) proposed them."""
    shares, types, capacity = selectors.whatif_editor(job_queue=queue)
    if base is not None:
        window = {"source": base.source, "start": base.window_start, "days": base.window_days}
    else:
        window = _default_window(queue, source, _philly())
    return f.WhatIfForm(
        data,
        job_queue=queue,
        shares=shares,
        instance_types=types,
        capacity=capacity,
        base=base,
        initial=window,
    )


@staff_page
def whatif_new(request):
    """GET: the editor for a queue (`?job_queue=`, default the first), prefilled with its shares as they are
    or as a past run proposed them (`?from_run=`). POST: start the run and go to its page; every error is
    shown next to its field."""
    base = None
    from_run = int_param(request.GET.get("from_run"), minimum=1) if request.method == "GET" else None
    if from_run is not None:
        base = selectors.whatif_run(run_id=from_run)
    raw = request.POST.get("job_queue") if request.method == "POST" else request.GET.get("job_queue")
    if base is not None and not raw:
        raw = base.job_queue_id
    queue = _queue(raw) if raw else selectors.whatif_queue(job_queue_id=None)
    if raw and queue is None:
        raise Http404("No such queue.")
    if base is not None and base.job_queue_id != queue.pk:
        base = None
    source = request.GET.get("source")
    if source not in WhatIfRun.Source.values:
        source = WhatIfRun.Source.HISTORY
    data = request.POST if request.method == "POST" else None
    form = _editor(queue, data, base, source=source) if queue else None
    if form is not None:
        # Choosing a source fetches the window fields again with that source's default window.
        form.fields["source"].widget.attrs.update(
            {
                "hx-get": f"{reverse('manage_whatif')}?job_queue={queue.pk}",
                "hx-target": "#whatif-window",
                "hx-swap": "outerHTML",
            }
        )
    if form is not None and htmx_target(request, ("whatif-window",)):
        # The source changed: the window fields come back with that source's default window.
        return render(
            request, "whatif/whatif.html#whatif-window", {"queue": queue, "form": form, "philly": _philly()}
        )
    status = 200
    if form is not None and request.method == "POST":
        if form.is_valid():
            try:
                run = services.whatif_run_start(
                    job_queue=queue,
                    proposal=form.proposal(),
                    queue_proposal=form.queue_proposal(),
                    source=form.cleaned_data["source"],
                    start=form.cleaned_data["start"],
                    days=form.cleaned_data["days"],
                    actor=request.user,
                )
            except ValidationError as exc:
                form.add_service_errors(exc)
            else:
                return redirect("manage_whatif_run", run_id=run.pk)
        status = 400
    context = {
        "queue": queue,
        "form": form,
        "picker": f.WhatIfQueueForm(initial={"job_queue": queue.pk if queue else None}),
        "runs": selectors.whatif_runs(),
        "philly": _philly(),
    }
    template = "whatif/whatif.html"
    if htmx_target(request, ("whatif-editor",)):
        template += "#whatif-editor"
    return render(request, template, context, status=status)


def _run_context(run: WhatIfRun, *, apply_form=None, apply_error: str = "") -> dict:
    now = timezone.now()
    context = {
        "run": run,
        # No worker has taken it: none may be running. A worker silent this long has probably stopped.
        "unclaimed": run.status == WhatIfRun.Status.QUEUED and now - run.created_at > UNCLAIMED_AFTER,
        "stalled": run.status == WhatIfRun.Status.RUNNING
        and run.heartbeat_at is not None
        and now - run.heartbeat_at > services.WHATIF_HEARTBEAT_TIMEOUT,
        "poll_seconds": PROGRESS_POLL_SECONDS,
        "apply_form": apply_form or f.WhatIfApplyForm(),
        "apply_error": apply_error,
    }
    if run.status == WhatIfRun.Status.DONE:
        teams = selectors.whatif_teams(run=run)
        context.update(
            proposal_rows=selectors.whatif_proposal_rows(run=run, teams=teams),
            queue_proposal=selectors.whatif_queue_proposal(run=run),
            comparison=selectors.whatif_comparison(run=run, teams=teams),
            stale=[] if run.applied_at else selectors.whatif_changes_since(run=run),
        )
    return context


def _run(run_id: int) -> WhatIfRun:
    run = selectors.whatif_run(run_id=run_id)
    if run is None:
        raise Http404("No such what-if run.")
    return run


@require_GET
@staff_page
def whatif_run(request, run_id: int):
    """A run: its progress while it runs (the live region polls), then the comparison, charts and Apply."""
    run = _run(run_id)
    template = "whatif/whatif_run.html"
    if htmx_target(request, ("whatif-live",)):
        template += "#whatif-live"
    return render(request, template, _run_context(run))


@require_POST
@staff_page
def whatif_apply(request, run_id: int):
    """Apply a finished run's proposal to its queue (confirmed by a tick box) unless the queue changed."""
    run = _run(run_id)
    form = f.WhatIfApplyForm(request.POST)
    if not form.is_valid():
        return render(request, "whatif/whatif_run.html", _run_context(run, apply_form=form), status=400)
    try:
        changed = services.whatif_apply(run=run, actor=request.user)
    except Conflict as exc:
        run = _run(run_id)
        return render(
            request,
            "whatif/whatif_run.html",
            _run_context(run, apply_error=exc.message),
            status=exc.status_code,
        )
    queue_changed = [name for name in changed if name.startswith("queue ")]
    shares = [name for name in changed if name not in queue_changed]
    words = queue_changed + ([f"share{'s' if len(shares) > 1 else ''} {', '.join(shares)}"] if shares else [])
    messages.success(
        request,
        f"Applied what-if #{run.pk} to queue {run.job_queue.name}: changed {' and '.join(words)}. "
        f"The next scheduling pass works with the new settings.",
    )
    return redirect("manage_whatif_run", run_id=run.pk)
