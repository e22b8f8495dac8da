"""Notifications end to end over a live server: a member adds a webhook on the Notifications page, submits a
job through the API, the executor reports it FAILED through the API, the beat's scan runs, and the receiver on
127.0.0.1 gets the signed document; another team's member, subscribed to everything, gets nothing."""

from __future__ import annotations

import re

import pytest
import requests
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token

from notifications import senders, tasks
from notifications.models import Delivery, Subscription
from tests.pages.conftest import P5

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "pw-for-tests-1"  # tests.factories.UserFactory's


def signed_in(base: str, username: str) -> requests.Session:
    session = requests.Session()
    page = session.get(f"{base}/accounts/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    response = session.post(
        f"{base}/accounts/login/",
        data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token},
        headers={"Referer": f"{base}/accounts/login/"},
    )
    assert response.ok and "Sign out" in response.text
    return session


def add_subscription(session: requests.Session, base: str, **fields) -> requests.Response:
    page = session.get(f"{base}/notifications/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    data = {"csrfmiddlewaretoken": token, "channel": "WEBHOOK", "after_minutes": "30", **fields}
    return session.post(f"{base}/notifications/", data=data, headers={"Referer": f"{base}/notifications/"})


def test_a_failure_reported_through_the_api_reaches_the_members_webhook(
    world, live_server, receiver, monkeypatch
):
    base = live_server.url
    ana = signed_in(base, "ana")
    response = add_subscription(ana, base, name="pager", target=receiver.url, triggers=["JOB_FAILED"])
    assert response.ok and "Delivery log" in response.text
    chen = signed_in(base, "chen")  # Vision: never told about NLP's jobs
    add_subscription(
        chen, base, name="all", target=receiver.url + "/chen", triggers=["JOB_FAILED", "JOB_PREEMPTED"]
    )
    assert Subscription.objects.count() == 2

    api = {"Authorization": f"Token {Token.objects.create(user=world.ana).key}"}
    job = requests.post(
        f"{base}/api/v1/jobs/",
        json={
            "name": "llm",
            "job_queue": "training",
            "quota_share": "nlp",
            "instance_preferences": [{"instance_type": P5, "instance_count": 1}],
            "payload": {"command": ["python", "train.py"]},
        },
        headers=api,
    ).json()
    world.run_pass()
    executor = world.users["eli"]
    executor.user_permissions.add(Permission.objects.get(codename="report_job_status"))
    world.queue.service_environment.executor_accounts.add(executor)
    agent = {"Authorization": f"Token {Token.objects.create(user=executor).key}"}
    for status in ("RUNNING", "FAILED"):
        report = requests.post(
            f"{base}/api/v1/jobs/{job['id']}/report/",
            json={"attempt": 1, "status": status, "reason": "exit code 1", "exit_code": 1},
            headers=agent,
        )
        assert report.ok, report.text

    # What the beat and a worker do: the scan enqueues, the worker sends.
    monkeypatch.setattr(tasks.send, "delay", lambda pk: tasks.send.apply(args=(pk,)))
    tasks.scan.apply()

    [request] = receiver.received
    assert request.path == "/hook"
    body = request.json()
    assert (
        body["trigger"] == "JOB_FAILED"
        and body["job"]["id"] == job["id"]
        and body["job"]["status"] == "FAILED"
    )
    secret = Subscription.objects.get(name="pager").secret
    assert senders.signature_valid(
        secret=secret,
        timestamp=request.headers[senders.TIMESTAMP_HEADER],
        body=request.body,
        header=request.headers[senders.SIGNATURE_HEADER],
    )
    log = ana.get(f"{base}/notifications/{Subscription.objects.get(name='pager').pk}/").text
    assert f"job llm (#{job['id']}) failed" in log and "SENT" in log
    assert Delivery.objects.count() == 1
