"""The administration pages (staff): queues, environments, shares and training plans. Every change goes
through the configuration services, which validate with `scheduling.rules` and record CONFIG_CHANGED."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from portal.forms.configuration import JobQueueForm, QuotaShareForm, ServiceEnvironmentForm, TrainingPlanForm
from portal.forms.errors import add_errors, error_dict
from portal.params import MAX_STORED_INT, int_param
from portal.views.common import staff_page
from scheduling import rules
from scheduling.models import JobQueue, QuotaShare, ServiceEnvironment, TrainingPlan
from scheduling.selectors import configuration, shares
from scheduling.selectors.budgets import share_budgets
from scheduling.services import configuration as config_services


def _save(
    request, form, *, obj, what: str, to: str, create: Callable[[], object], update: Callable[[], object]
):
    """Create (no `obj` yet) or update through the service; redirect to `to` with a message, or put the
    service's ValidationError on the form and return None so that the page shows it."""
    try:
        saved = create() if obj is None else update()
    except ValidationError as exc:
        add_errors(form, exc)
        return None
    messages.success(request, f"{'Created' if obj is None else 'Saved'} {what} {saved}.")
    return redirect(to)


# --- queues -------------------------------------------------------------------------------------------------


@require_GET
@staff_page
def queue_list(request):
    return render(request, "portal/manage_queues.html", {"queues": configuration.queues_for_admin()})


@staff_page
def queue_edit(request, queue_id: int | None = None):
    queue = (
        get_object_or_404(JobQueue.objects.select_related("service_environment"), pk=queue_id)
        if queue_id
        else None
    )
    form = JobQueueForm(request.POST or None, job_queue=queue)
    if request.method == "POST" and form.is_valid():
        saved = _save(
            request,
            form,
            obj=queue,
            what="queue",
            to="manage_queues",
            create=lambda: config_services.config_object_create(
                model=JobQueue, fields=form.queue_fields(), actor=request.user
            ),
            update=lambda: config_services.job_queue_update(
                job_queue=queue, changes=form.queue_fields(), actor=request.user
            ),
        )
        if saved:
            return saved
    return render(
        request,
        "portal/manage_form.html",
        {"form": form, "title": f"Queue {queue}" if queue else "New queue", "back": "manage_queues"},
    )


# --- environments -------------------------------------------------------------------------------------------


@require_GET
@staff_page
def environment_list(request):
    return render(
        request, "portal/manage_environments.html", {"environments": configuration.environments_for_admin()}
    )


@staff_page
def environment_edit(request, environment_id: int | None = None):
    environment = get_object_or_404(ServiceEnvironment, pk=environment_id) if environment_id else None
    form = ServiceEnvironmentForm(request.POST or None, environment=environment)
    if request.method == "POST" and form.is_valid():
        saved = _save(
            request,
            form,
            obj=environment,
            what="environment",
            to="manage_environments",
            create=lambda: config_services.service_environment_create(
                fields=form.environment_fields(),
                limits=form.limit_inputs(),
                actor=request.user,
                executor_accounts=form.executor_accounts(),
            ),
            update=lambda: config_services.service_environment_update(
                environment=environment,
                changes=form.environment_fields(),
                limits=form.limit_inputs(),
                actor=request.user,
                executor_accounts=form.executor_accounts(),
            ),
        )
        if saved:
            return saved
    held = {}
    executors = configuration.executors_of(environment) if environment else []
    job_queue = JobQueue.objects.filter(service_environment=environment).first() if environment else None
    if job_queue is not None:
        held = rules.share_limit_sums(job_queue)
    return render(
        request,
        "portal/manage_environment_form.html",
        {
            "form": form,
            "environment": environment,
            "job_queue": job_queue,
            "executors": executors,
            "offers": configuration.environment_offers(
                capacity=form.capacity_by_type(), executors=executors, now=timezone.now()
            ),
            "served_accounts": form.fields["executor_accounts"].initial,
            "rows": [
                (field, held.get(type_.pk, 0))
                for field, type_ in zip(form.limit_bound_fields(), form.instance_types, strict=True)
            ],
        },
    )


# --- quota shares -------------------------------------------------------------------------------------------


@require_GET
@staff_page
def share_list(request):
    return render(request, "portal/manage_shares.html", {"shares": configuration.shares_for_admin()})


def _share(share_id: int | None) -> QuotaShare | None:
    if not share_id:
        return None
    return get_object_or_404(
        QuotaShare.objects.select_related("job_queue", "team").prefetch_related("capacity_limits"),
        pk=share_id,
    )


@staff_page
def share_edit(request, share_id: int | None = None):
    share = _share(share_id)
    form = QuotaShareForm(request.POST or None, share=share)
    if request.method == "POST" and form.is_valid():
        saved = _save(
            request,
            form,
            obj=share,
            what="quota share",
            to="manage_shares",
            create=lambda: config_services.quota_share_create(
                fields=form.share_fields(), limits=form.limit_inputs(), actor=request.user
            ),
            update=lambda: config_services.quota_share_update(
                share=share, changes=form.share_fields(), limits=form.limit_inputs(), actor=request.user
            ),
        )
        if saved:
            return saved
    return render(request, "portal/manage_share_form.html", _share_form_context(form, share))


LIVE_CHECKED_FIELDS = ("name", "job_queue", "borrow_limit")


def _share_form_context(form: QuotaShareForm, share: QuotaShare | None, *, live_errors=None) -> dict:
    job_queue = form.job_queue()
    sums = []
    if job_queue is not None:
        sums = shares.share_limit_sums(
            job_queue=job_queue,
            share_id=share.pk if share else None,
            proposed=form.proposed_limits()
            if form.is_bound
            else {
                t.pk: form[f"limit_{t.pk}"].initial
                for t in form.instance_types
                if form[f"limit_{t.pk}"].initial
            },
        )
    live_slots = (
        [(name, live_errors.get(name, [])) for name in LIVE_CHECKED_FIELDS] if live_errors is not None else []
    )
    return {
        "form": form,
        "share": share,
        # The full page only (the live check re-renders the sums alone).
        "budget": share_budgets(shares=[share], now=timezone.now()).get(share.pk)
        if share and live_errors is None
        else None,
        "job_queue": job_queue,
        "sums": sums,
        "live_errors": live_errors or {},
        "live_slots": live_slots,
    }


@require_POST
@staff_page
def share_limits_check(request, share_id: int | None = None):
    """htmx, as the limits change: their sum against the environment's capacity, and what the rules refuse."""
    share = _share(share_id)
    form = QuotaShareForm(request.POST, share=share)
    job_queue = form.job_queue()
    live_errors: dict[str, list[str]] = {}
    if job_queue is not None:
        # Any whole number reaches the rules, so that "-5" is named as they name it; blank or garbage is -1.
        borrow_limit = int_param(
            request.POST.get("borrow_limit"), minimum=-MAX_STORED_INT, maximum=MAX_STORED_INT
        )
        if borrow_limit is None:
            borrow_limit = -1
        types = {type_.pk: type_ for type_ in form.instance_types}
        lending = form.proposed_lending_limits()
        try:
            rules.validate_quota_share(
                share=share,
                job_queue=job_queue,
                name=request.POST.get("name", ""),
                strategy=request.POST.get("strategy", ""),
                borrow_limit=borrow_limit,
                limits=[
                    rules.LimitInput(types[t], n, lending.get(t)) for t, n in form.proposed_limits().items()
                ],
            )
        except ValidationError as exc:
            live_errors = error_dict(exc)
    return render(
        request,
        "portal/manage_share_form.html#limit-sums",
        _share_form_context(form, share, live_errors=live_errors),
    )


# --- training plans -----------------------------------------------------------------------------------------


@require_GET
@staff_page
def plan_timeline(request):
    return render(
        request, "portal/manage_plans.html", {"timeline": configuration.plan_timeline(now=timezone.now())}
    )


@staff_page
def plan_edit(request, plan_id: int | None = None):
    plan = get_object_or_404(TrainingPlan, pk=plan_id) if plan_id else None
    form = TrainingPlanForm(request.POST or None, plan=plan)
    if request.method == "POST" and form.is_valid():
        quota_shares = list(form.cleaned_data["quota_shares"])
        saved = _save(
            request,
            form,
            obj=plan,
            what="training plan",
            to="manage_plans",
            create=lambda: config_services.training_plan_create(
                fields=form.plan_fields(), quota_shares=quota_shares, actor=request.user
            ),
            update=lambda: config_services.training_plan_update(
                plan=plan, changes=form.plan_fields(), quota_shares=quota_shares, actor=request.user
            ),
        )
        if saved:
            return saved
    return render(
        request,
        "portal/manage_form.html",
        {
            "form": form,
            "title": f"Training plan {plan}" if plan else "New training plan",
            "back": "manage_plans",
        },
    )
