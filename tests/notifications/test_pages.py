"""The Notifications page: add a subscription (errors on the fields they name), see its log, send a test,
remove it; only one's own subscriptions."""

from __future__ import annotations

from unittest import mock

import pytest
from django.test import Client
from django.urls import reverse

from notifications import tasks
from notifications.models import Delivery, Subscription, Trigger
from tests.factories import UserFactory


@pytest.fixture
def signed_in():
    def make(user) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return make


def form(**fields):
    data = {
        "name": "pager",
        "channel": "WEBHOOK",
        "target": "https://hooks.example.org/quotaportal",
        "triggers": [Trigger.JOB_FAILED, Trigger.JOB_PREEMPTED],
        "team": "",
        "after_minutes": "30",
    }
    data.update(fields)
    return data


def test_a_member_adds_a_webhook_subscription(world, signed_in):
    response = signed_in(world.ana).post(reverse("notifications"), form())
    subscription = Subscription.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse(
        "notification_subscription", args=[subscription.pk]
    )
    assert subscription.owner == world.ana and subscription.triggers == ["JOB_FAILED", "JOB_PREEMPTED"]
    assert len(subscription.secret) == 64
    page = signed_in(world.ana).get(response["Location"]).content.decode()
    assert subscription.secret in page and "Delivery log" in page


def test_an_invalid_url_is_refused_naming_the_field(world, signed_in, settings):
    settings.NOTIFY_ALLOW_PRIVATE_WEBHOOKS = False
    client = signed_in(world.ana)
    response = client.post(reverse("notifications"), form(target="ftp://example.org/x"))
    assert response.status_code == 400
    assert "Enter an http:// or https:// URL with a host name." in response.content.decode()
    response = client.post(reverse("notifications"), form(target="http://127.0.0.1:9000/hook"))
    assert "loopback, private or link-local address" in response.content.decode()
    response = client.post(
        reverse("notifications"), form(channel="EMAIL", target="not-an-address", triggers=[])
    )
    body = response.content.decode()
    # Every error in one round: the address and the empty choice of triggers.
    assert (
        "not-an-address is not an email address." in body
        and "Choose at least one thing to be told about." in body
    )
    assert Subscription.objects.count() == 0


def test_a_member_may_not_make_a_team_subscription_but_its_manager_may(world, signed_in):
    response = signed_in(world.ana).post(reverse("notifications"), form(team=str(world.team_nlp.pk)))
    assert response.status_code == 400 and Subscription.objects.count() == 0
    response = signed_in(world.ben).post(reverse("notifications"), form(team=str(world.team_nlp.pk)))
    assert response.status_code == 302 and Subscription.objects.get().team == world.team_nlp


def test_a_test_is_sent_and_logged(world, signed_in, receiver, django_capture_on_commit_callbacks):
    client = signed_in(world.ana)
    client.post(reverse("notifications"), form(target=receiver.url))
    subscription = Subscription.objects.get()
    with mock.patch.object(tasks.send, "delay", side_effect=lambda pk: tasks.send.apply(args=(pk,))):
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post(reverse("notification_test", args=[subscription.pk]))
    assert response.status_code == 302
    assert receiver.received[0].json()["trigger"] == "TEST"
    page = client.get(reverse("notification_subscription", args=[subscription.pk])).content.decode()
    assert "test notification for pager" in page and "SENT" in page


def test_someone_elses_subscription_is_not_found(world, signed_in):
    signed_in(world.ana).post(reverse("notifications"), form())
    subscription = Subscription.objects.get()
    other = signed_in(world.chen)
    assert other.get(reverse("notification_subscription", args=[subscription.pk])).status_code == 404
    assert other.post(reverse("notification_test", args=[subscription.pk])).status_code == 404
    assert other.post(reverse("notification_delete", args=[subscription.pk])).status_code == 404
    assert Subscription.objects.count() == 1 and Delivery.objects.count() == 0


def test_removing_a_subscription_removes_its_log(world, signed_in):
    client = signed_in(world.ana)
    client.post(reverse("notifications"), form())
    subscription = Subscription.objects.get()
    response = client.post(reverse("notification_delete", args=[subscription.pk]))
    assert response.status_code == 302 and not Subscription.objects.exists()
    assert "No subscriptions yet" in client.get(reverse("notifications")).content.decode()


def test_the_page_needs_sign_in(db):
    response = Client().get(reverse("notifications"))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_the_page_reads_in_a_few_queries(world, signed_in, django_assert_max_num_queries):
    client = signed_in(world.ana)
    for n in range(5):
        client.post(reverse("notifications"), form(name=f"pager-{n}"))
    with django_assert_max_num_queries(8):
        assert client.get(reverse("notifications")).status_code == 200
    first = Subscription.objects.first().pk
    with django_assert_max_num_queries(8):
        client.get(reverse("notification_subscription", args=[first]))
    with django_assert_max_num_queries(8):
        assert client.get(reverse("notification_edit", args=[first])).status_code == 200
    with django_assert_max_num_queries(12):
        response = client.post(reverse("notification_edit", args=[first]), form(name="renamed"))
    assert response.status_code == 302


def test_staff_read_subscriptions_and_deliveries_in_the_admin_without_the_secret(world, signed_in):
    signed_in(world.ana).post(reverse("notifications"), form())
    subscription = Subscription.objects.get()
    admin = signed_in(UserFactory(username="root", is_staff=True, is_superuser=True))
    for name in ("subscription", "delivery"):
        assert admin.get(reverse(f"admin:notifications_{name}_changelist")).status_code == 200
    page = admin.get(reverse("admin:notifications_subscription_change", args=[subscription.pk]))
    assert page.status_code == 200 and subscription.secret not in page.content.decode()
    assert (
        admin.post(reverse("admin:notifications_subscription_delete", args=[subscription.pk])).status_code
        == 403
    )


def test_the_log_refreshes_itself_while_a_delivery_waits_and_stops_once_it_is_sent(world, signed_in):
    client = signed_in(world.ana)
    client.post(reverse("notifications"), form())
    subscription = Subscription.objects.get()
    url = reverse("notification_subscription", args=[subscription.pk])
    with mock.patch.object(tasks.send, "delay"):
        client.post(reverse("notification_test", args=[subscription.pk]))
    page = client.get(url).content.decode()
    assert 'id="delivery-log"' in page and f'hx-get="{url}"' in page
    fragment = client.get(url, headers={"HX-Request": "true", "HX-Target": "delivery-log"}).content.decode()
    assert fragment.lstrip().startswith('<div id="delivery-log"') and "PENDING" in fragment
    assert "<html" not in fragment
    Delivery.objects.update(status="SENT")
    fragment = client.get(url, headers={"HX-Request": "true", "HX-Target": "delivery-log"}).content.decode()
    assert "SENT" in fragment and "hx-get" not in fragment


def test_a_subscription_is_changed_in_place_keeping_its_secret_and_log(world, signed_in):
    client = signed_in(world.ana)
    client.post(reverse("notifications"), form())
    subscription = Subscription.objects.get()
    page = client.get(reverse("notification_subscription", args=[subscription.pk])).content.decode()
    assert reverse("notification_edit", args=[subscription.pk]) in page
    edit = client.get(reverse("notification_edit", args=[subscription.pk])).content.decode()
    assert 'value="pager"' in edit and 'value="https://hooks.example.org/quotaportal"' in edit
    response = client.post(
        reverse("notification_edit", args=[subscription.pk]),
        form(name="pager 2", triggers=[Trigger.JOB_TIMED_OUT], only_my_jobs="on"),
    )
    assert response.status_code == 302
    changed = Subscription.objects.get()
    assert (changed.pk, changed.secret) == (subscription.pk, subscription.secret)
    assert (changed.name, changed.triggers, changed.only_my_jobs) == ("pager 2", ["JOB_TIMED_OUT"], True)
    response = client.post(
        reverse("notification_edit", args=[subscription.pk]), form(channel="EMAIL", triggers=[])
    )
    body = response.content.decode()
    assert response.status_code == 400
    assert "is not an email address." in body and "Choose at least one thing to be told about." in body
    assert Subscription.objects.get().name == "pager 2"  # nothing half-written
    other = signed_in(world.chen)
    assert other.get(reverse("notification_edit", args=[subscription.pk])).status_code == 404
    assert (
        other.post(reverse("notification_edit", args=[subscription.pk]), form(name="mine")).status_code == 404
    )
    assert Subscription.objects.get().name == "pager 2"
