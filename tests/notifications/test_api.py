"""/api/v1/notification-subscriptions/: the same rules and errors as the page, only one's own subscriptions,
a test and the delivery log."""

from __future__ import annotations

from unittest import mock

import pytest
from rest_framework.test import APIClient

from notifications import tasks
from notifications.models import Subscription

URL = "/api/v1/notification-subscriptions/"


@pytest.fixture
def api():
    def make(user) -> APIClient:
        client = APIClient()
        client.force_authenticate(user)
        return client

    return make


BODY = {
    "name": "pager",
    "channel": "SLACK",
    "target": "https://hooks.example.org/T1",
    "triggers": ["JOB_FAILED"],
}


def test_a_member_subscribes_and_reads_back_the_secret(world, api):
    response = api(world.ana).post(URL, BODY, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    subscription = Subscription.objects.get()
    assert body["id"] == subscription.pk and body["secret"] == subscription.secret
    assert (body["team"], body["only_my_jobs"], body["after_minutes"]) == (None, False, 30)
    assert api(world.ana).get(URL).json()["results"][0]["name"] == "pager"


def test_errors_name_the_fields(world, api):
    response = api(world.ana).post(
        URL,
        {**BODY, "target": "gopher://x", "triggers": ["EXECUTOR_SILENT"], "team": "nlp", "colour": "red"},
        format="json",
    )
    assert response.status_code == 400
    assert response.json() == {"colour": [mock.ANY]}  # an unknown field first, as every body of the API
    response = api(world.ana).post(
        URL, {**BODY, "target": "gopher://x", "triggers": ["EXECUTOR_SILENT"], "team": "nlp"}, format="json"
    )
    errors = response.json()
    assert response.status_code == 400 and set(errors) == {"target", "triggers", "team"}
    assert errors["team"] == ["Only managers of team NLP (and staff) make its subscriptions."]
    response = api(world.ana).post(URL, {**BODY, "triggers": ["JOB_EXPLODED"], "team": "nope"}, format="json")
    assert set(response.json()) == {"triggers[0]", "team"} and response.json()["team"] == [
        "unknown team nope"
    ]
    assert Subscription.objects.count() == 0


def test_a_manager_makes_a_team_subscription(world, api):
    response = api(world.ben).post(URL, {**BODY, "team": "nlp"}, format="json")
    assert response.status_code == 201 and response.json()["team"] == "nlp"


def test_another_users_subscription_is_a_404(world, api):
    pk = api(world.ana).post(URL, BODY, format="json").json()["id"]
    other = api(world.chen)
    assert other.get(f"{URL}{pk}/").status_code == 404
    assert other.delete(f"{URL}{pk}/").status_code == 404
    assert other.post(f"{URL}{pk}/test/").status_code == 404
    assert other.get(f"{URL}{pk}/deliveries/").status_code == 404
    assert Subscription.objects.count() == 1


def test_a_test_is_logged_and_the_log_is_listed(world, api, receiver, django_capture_on_commit_callbacks):
    client = api(world.ana)
    pk = client.post(URL, {**BODY, "channel": "WEBHOOK", "target": receiver.url}, format="json").json()["id"]
    with mock.patch.object(tasks.send, "delay", side_effect=lambda d: tasks.send.apply(args=(d,))):
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post(f"{URL}{pk}/test/")
    assert response.status_code == 202 and response.json()["trigger"] == "TEST"
    log = client.get(f"{URL}{pk}/deliveries/").json()["results"]
    assert [(d["trigger"], d["status"], d["response_code"]) for d in log] == [("TEST", "SENT", 200)]
    assert receiver.received[0].json()["subscription"] == {"id": pk, "name": "pager"}


def test_delete_removes_it(world, api):
    client = api(world.ana)
    pk = client.post(URL, BODY, format="json").json()["id"]
    assert client.delete(f"{URL}{pk}/").status_code == 204 and not Subscription.objects.exists()


def test_the_list_reads_in_a_few_queries(world, api, django_assert_max_num_queries):
    client = api(world.ana)
    for n in range(6):
        client.post(URL, {**BODY, "name": f"p{n}"}, format="json")
    with django_assert_max_num_queries(4):
        assert len(client.get(URL).json()["results"]) == 6
    first = Subscription.objects.order_by("name").first().pk
    with django_assert_max_num_queries(8):
        assert client.patch(f"{URL}{first}/", {"name": "renamed"}, format="json").status_code == 200


def test_a_subscription_is_changed_whole_or_in_part_by_its_owner_only(world, api):
    client = api(world.ana)
    created = client.post(URL, BODY, format="json").json()
    pk = created["id"]
    response = client.patch(f"{URL}{pk}/", {"name": "pager 2", "after_minutes": 45}, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["name"], body["after_minutes"], body["triggers"]) == ("pager 2", 45, ["JOB_FAILED"])
    assert body["secret"] == created["secret"] and body["channel"] == "SLACK"
    response = client.put(
        f"{URL}{pk}/", {**BODY, "name": "whole", "triggers": ["JOB_PREEMPTED"]}, format="json"
    )
    assert response.status_code == 200 and response.json()["after_minutes"] == 30  # PUT: the default again
    response = client.patch(f"{URL}{pk}/", {"target": "gopher://x", "team": "nlp"}, format="json")
    assert response.status_code == 400 and set(response.json()) == {"target", "team"}
    assert api(world.chen).patch(f"{URL}{pk}/", {"name": "mine"}, format="json").status_code == 404
    assert Subscription.objects.get().name == "whole"
    response = api(world.ben).post(URL, {**BODY, "team": "nlp"}, format="json")
    team_pk = response.json()["id"]
    response = api(world.ben).patch(f"{URL}{team_pk}/", {"name": "team pager"}, format="json")
    assert response.status_code == 200 and response.json()["team"] == "nlp"
