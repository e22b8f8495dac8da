"""Jobs: the filtered list, the submit form (rows added and removed in place, validated inline with the
API's rules), and a job's page with its reason, attempts, events, and the actions its owners may take."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from portal.forms.errors import add_submission_errors
from portal.forms.filters import JobFilterForm
from portal.forms.jobs import (
    PREFERENCE_PREFIX,
    CancelForm,
    JobForm,
    PreferenceFormSet,
    PriorityForm,
    job_submission,
    preference_rows,
    with_preference_rows,
)
from portal.params import int_param
from portal.views.common import htmx_target, page, refresh_seconds, viewer
from scheduling import rules
from scheduling.errors import Conflict, DomainError, NotAllowed
from scheduling.models import JobStatus, pending_words_load
from scheduling.selectors import estimates, events, jobs
from scheduling.services import jobs as job_services

# --- the list -----------------------------------------------------------------------------------------------


@require_GET
@page
def job_list(request):
    who = viewer(request)
    query = request.GET.copy()
    query.pop("page", None)
    form = JobFilterForm(query or None, viewer=who)
    mine = jobs.JobFilters(submitted_by_id=request.user.pk)
    filters = mine if form.default_whose == "mine" else jobs.JobFilters()
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        whose = data["whose"] or form.default_whose
        filters = jobs.JobFilters(
            status=data["status"] or None,
            job_queue_id=data["job_queue"].pk if data["job_queue"] else None,
            share_id=data["quota_share"].pk if data["quota_share"] else None,
            team_id=data["team"].pk if data["team"] else None,
            submitted_by_id=request.user.pk if whose == "mine" else None,
            search=data["q"],
        )
    paginator = Paginator(jobs.job_list(viewer=who, filters=filters), settings.PAGE_LIST_SIZE)
    page_obj = paginator.get_page(request.GET.get("page"))
    pending_words_load(page_obj)  # the page's reasons, worded in one query
    context = {
        "form": form,
        "page_obj": page_obj,
        "query": query.urlencode(),
        "mine": bool(filters.submitted_by_id),
    }
    template = "portal/job_list.html"
    if htmx_target(request, ("job-table",)):
        template += "#job-table"
    return render(request, template, context)


# --- submitting ---------------------------------------------------------------------------------------------


def _job_forms(request, data=None, *, initial=None, rows=None):
    """The form and its preference rows, which offer only the instance types and plans of the chosen
    share's queue (of every queue the user may submit to, until a share is chosen)."""
    form = JobForm(data, user=request.user, initial=initial or {})
    share = form.selected_share()
    queues = [share.job_queue] if share is not None else form.queues()
    formset = PreferenceFormSet(data, prefix=PREFERENCE_PREFIX, initial=rows, form_kwargs={"queues": queues})
    return form, formset, share


def _render_job_form(request, forms, *, validated: bool, status: int = 200) -> HttpResponse:
    form, formset, share = forms
    return render(
        request,
        "portal/job_new.html",
        {"form": form, "formset": formset, "quiet": not validated, **_payload_needs(form, share)},
        status=status,
    )


def _payload_needs(form, share) -> dict:
    """What the payload must hold: for the chosen share's environment, or for each queue on offer."""
    if share is not None:
        return {"payload_needs": [rules.payload_requirement(share.job_queue.service_environment)]}
    return {"payload_needs": [rules.payload_requirement(q.service_environment) for q in form.queues()]}


def _check_submission(request, form, formset):
    """Validate as `job_services.job_submit` will, without creating anything, in one round: the field
    checks and the service's rules together. (submission, rows), or None with the errors on the form."""
    built = job_submission(form, formset)
    if built is None:
        return None
    try:
        job_services.job_submission_validate(user=request.user, submission=built.submission)
    except NotAllowed as exc:
        form.add_error("quota_share", exc.message)
        return None
    except ValidationError as exc:
        add_submission_errors(form, formset, exc, built.rows)
        return None
    if not built.complete:
        return None
    return built.submission, built.rows


@page
def job_new(request):
    """GET: an empty form. POST: add or remove a preference row (no JS), or submit."""
    if request.method == "GET":
        copied = _copy_of(request)
        if copied is None:
            return _render_job_form(request, _job_forms(request), validated=False)
        initial, rows = copied
        return _render_job_form(request, _job_forms(request, initial=initial, rows=rows), validated=False)
    action = request.POST.get("action", "submit")
    if action != "submit":
        return _render_job_form(
            request, _job_forms(request, _rows_changed(request.POST, action)), validated=False
        )
    forms = form, formset, _share = _job_forms(request, request.POST)
    checked = _check_submission(request, form, formset)
    if checked is None:
        return _render_job_form(request, forms, validated=True, status=400)
    submission, rows = checked
    try:
        job, created = job_services.job_submit(user=request.user, submission=submission)
    except ValidationError as exc:  # the rules ran again inside the service, and something changed meanwhile
        add_submission_errors(form, formset, exc, rows)
        return _render_job_form(request, forms, validated=True, status=400)
    except DomainError as exc:
        form.add_error(None, exc.message)
        return _render_job_form(request, forms, validated=True, status=exc.status_code)
    messages.success(request, f"Submitted {job.name}." if created else f"{job.name} was already submitted.")
    return redirect("job_detail", job_id=job.pk)


def _copy_of(request) -> tuple[dict, list[dict]] | None:
    """`?copy=<job id>`: the form's fields and preference rows filled in from a job the user may see (a new
    client token, so the copy is a new job); None without it or for a job they may not see."""
    job_id = int_param(request.GET.get("copy"), minimum=1)
    job = jobs.job_for_viewer(viewer=viewer(request), job_id=job_id) if job_id is not None else None
    if job is None:
        return None
    initial = {
        "name": job.name,
        "quota_share": job.quota_share_id,
        "scheduling_priority": job.scheduling_priority,
        "retry_attempts": job.retry_attempts,
        "preemption_retries_before_termination": job.preemption_retries_before_termination,
        "max_pending_seconds": job.max_pending_seconds,
        "duration_seconds": job.duration_seconds,
        "attempt_duration_seconds": job.attempt_duration_seconds,
        "payload": job.payload,
    }
    rows = [
        {
            "instance_type": entry.instance_type_id,
            "instance_count": entry.instance_count,
            "training_plan": entry.training_plan_id,
        }
        for entry in job.instance_preferences.all()
    ]
    return initial, rows


def _rows_changed(data, action: str):
    """The posted data with a preference row added (`add`) or removed (`remove-N`)."""
    rows = preference_rows(data)
    if action == "add":
        rows.append({"instance_type": "", "instance_count": "1", "training_plan": ""})
    elif action.startswith("remove-"):
        index = int_param(action.removeprefix("remove-"), maximum=len(rows) - 1)
        if index is not None:
            del rows[index]
    return with_preference_rows(data, rows)


@require_POST
@page
def job_new_rows(request):
    """htmx: the preference fieldset with a row added or removed, values kept, nothing validated."""
    form, formset, share = _job_forms(request, _rows_changed(request.POST, request.POST.get("action", "")))
    return render(
        request,
        "portal/job_new.html#preferences",
        {"form": form, "formset": formset, "quiet": True, "oob": True, **_payload_needs(form, share)},
    )


@require_POST
@page
def job_new_validate(request):
    """htmx: every field's error slot, filled by the same rules as a submission; creates nothing."""
    form, formset, share = _job_forms(request, request.POST)
    checked = _check_submission(request, form, formset)
    estimate = None
    if checked is not None:
        submission, _rows = checked
        estimate = estimates.start_if_submitted_now(submission=submission, now=timezone.now())
    return render(
        request,
        "portal/partials/job_form_errors.html",
        {"form": form, "formset": formset, "estimate": estimate, **_payload_needs(form, share)},
    )


# --- one job ------------------------------------------------------------------------------------------------


def _visible_job(request, job_id: int):
    job = jobs.job_for_viewer(viewer=viewer(request), job_id=job_id)
    if job is None:
        raise Http404("No such job, or it belongs to another team.")
    return job


def _job_page(request, job, *, status: int = 200, refusal: str = "", cancel_form=None) -> HttpResponse:
    """The job page, or for the live region's poll its fragment: status, actions, attempts and events
    together, so none of them can go stale while the others move on."""
    can_manage = job_services.job_can_manage(user=request.user, job=job)
    context = {
        "job": job,
        "events": events.job_events(viewer=viewer(request), job_id=job.pk),
        "can_manage": can_manage,
        "priority_form": PriorityForm(initial={"scheduling_priority": job.scheduling_priority}),
        "refresh_seconds": refresh_seconds(),
        "refusal": refusal,
        "untaken": jobs.job_untaken_reason(job, now=timezone.now()),
    }
    if htmx_target(request, ("job-live",)):
        return render(request, "portal/partials/job_live.html", context, status=status)
    return render(request, "portal/job_detail.html", context, status=status)


@require_GET
@page
def job_detail(request, job_id: int):
    return _job_page(request, _visible_job(request, job_id))


def _refused(request, job_id: int, exc: Conflict) -> HttpResponse:
    """An action the job has moved past (it finished meanwhile): the job as it is now, with why, in place."""
    return _job_page(request, _visible_job(request, job_id), status=exc.status_code, refusal=exc.message)


@page
def job_cancel(request, job_id: int):
    """GET: the confirmation step (works without JavaScript). POST: cancel."""
    job = _visible_job(request, job_id)
    form = CancelForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        try:
            job = job_services.job_cancel(
                job_id=job.pk, actor=request.user, reason=form.cleaned_data["reason"]
            )
        except Conflict as exc:
            return _refused(request, job.pk, exc)
        if job.status == JobStatus.STOPPING:
            messages.success(
                request,
                f"Stopping {job.name}: its executor has until {job.stop_deadline:%H:%M:%S} UTC to stop it, "
                "then it is cancelled.",
            )
        else:
            messages.success(request, f"Cancelled {job.name}.")
        return redirect(reverse("job_detail", args=[job.pk]))
    if job.is_finished:
        return _refused(request, job.pk, Conflict(job_services.job_finished_message(job, "be cancelled")))
    status = 400 if form.is_bound else 200
    return render(request, "portal/job_cancel.html", {"job": job, "form": form}, status=status)


@require_POST
@page
def job_priority(request, job_id: int):
    job = _visible_job(request, job_id)
    form = PriorityForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            for message in errors:
                messages.error(request, message)
        return redirect(reverse("job_detail", args=[job.pk]))
    try:
        job_services.job_set_priority(
            job_id=job.pk, priority=form.cleaned_data["scheduling_priority"], actor=request.user
        )
    except Conflict as exc:
        return _refused(request, job.pk, exc)
    except ValidationError as exc:
        for message in exc.messages:
            messages.error(request, message)
    else:
        messages.success(
            request, f"Priority of {job.name} is now {form.cleaned_data['scheduling_priority']}."
        )
    return redirect(reverse("job_detail", args=[job.pk]))
