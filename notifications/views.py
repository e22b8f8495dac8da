"""The Notifications page: a signed-in user's subscriptions, adding and removing them, a test, and each
one's delivery log."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from notifications import selectors, services
from notifications.forms import SubscriptionForm
from notifications.models import Channel, DeliveryStatus
from notifications.senders import SIGNATURE_HEADER, TIMESTAMP_HEADER
from portal.views.common import htmx_target, page, refresh_seconds


@page
def notifications(request: HttpRequest) -> HttpResponse:
    teams = selectors.managed_teams(user=request.user)
    form = SubscriptionForm(request.POST or None, owner=request.user, teams=teams)
    if request.method == "POST" and form.is_valid():
        try:
            subscription = services.subscription_create(owner=request.user, data=form.to_input())
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            messages.success(request, f"Subscription {subscription.name} added: send it a test below.")
            return redirect("notification_subscription", subscription.pk)
    status = 400 if request.method == "POST" else 200
    context = {
        "form": form,
        "subscriptions": selectors.subscriptions_of(user=request.user),
        "user_email": request.user.email,
    }
    return render(request, "notifications/notifications.html", context, status=status)


# A log holding one of these is refreshed in place until its deliveries are SENT or FAILED.
WAITING = (DeliveryStatus.PENDING, DeliveryStatus.SENDING, DeliveryStatus.RETRYING)


@page
def subscription(request: HttpRequest, subscription_id: int) -> HttpResponse:
    found = selectors.subscription_of(user=request.user, subscription_id=subscription_id)
    if found is None:
        raise Http404("no such subscription of yours")
    deliveries = selectors.delivery_log(subscription=found)
    context = {
        "subscription": found,
        "deliveries": deliveries,
        "waiting": any(d.status in WAITING for d in deliveries),
        "refresh_seconds": refresh_seconds(),
        "signed": found.channel != Channel.EMAIL,
        "signature_header": SIGNATURE_HEADER,
        "timestamp_header": TIMESTAMP_HEADER,
    }
    if htmx_target(request, ("delivery-log",)):
        return render(request, "notifications/subscription.html#delivery-log", context)
    return render(request, "notifications/subscription.html", context)


@page
def subscription_edit(request: HttpRequest, subscription_id: int) -> HttpResponse:
    found = selectors.subscription_of(user=request.user, subscription_id=subscription_id)
    if found is None:
        raise Http404("no such subscription of yours")
    teams = selectors.managed_teams(user=found.owner)
    initial = SubscriptionForm.initial_of(found)
    form = SubscriptionForm(request.POST or None, owner=found.owner, teams=teams, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            services.subscription_update(user=request.user, subscription_id=found.pk, data=form.to_input())
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            messages.success(request, f"Subscription {form.cleaned_data['name'].strip()} saved.")
            return redirect("notification_subscription", found.pk)
    status = 400 if request.method == "POST" else 200
    context = {"form": form, "subscription": found, "user_email": found.owner.email}
    return render(request, "notifications/subscription_edit.html", context, status=status)


@require_POST
@page
def subscription_test(request: HttpRequest, subscription_id: int) -> HttpResponse:
    services.subscription_test(user=request.user, subscription_id=subscription_id)
    messages.success(request, "Test sent: its outcome shows in the log below within a few seconds.")
    return redirect("notification_subscription", subscription_id)


@require_POST
@page
def subscription_delete(request: HttpRequest, subscription_id: int) -> HttpResponse:
    services.subscription_delete(user=request.user, subscription_id=subscription_id)
    messages.success(request, "Subscription removed, with its log.")
    return redirect("notifications")
