"""Notifications from the event to the receiver: a signed webhook on 127.0.0.1, Slack's format, Django's mail
outbox, retries on a 500, one delivery per subscription and event, and who is told what."""

from __future__ import annotations

import math
from datetime import timedelta
from unittest import mock

import pytest
from django.core import mail
from django.db import connection
from django.utils import timezone

from notifications import senders, services, tasks
from notifications.models import Channel, Delivery, DeliveryStatus, EventCursor, Trigger
from scheduling.models import Event, EventKind, Job, JobStatus
from scheduling.services.audit import job_event_record
from scheduling.services.executor import job_report
from tests.factories import job_in
from tests.pages.conftest import P4, P5


@pytest.fixture
def sent_at_once():
    """Deliveries enqueued after commit run at once, in this process, retries included (Celery's apply)."""
    with mock.patch.object(tasks.send, "delay", side_effect=lambda pk: tasks.send.apply(args=(pk,))):
        yield


def scan(capture):
    with capture(execute=True):
        return services.notifications_scan()


def failed_job(world, share=None, *, user=None, name="train-llm", instance_type=P5):
    """A job placed by a real pass, taken and then reported FAILED by its executor."""
    job = job_in(share or world.nlp, [(instance_type, 1)], name=name, user=user or world.ana)
    world.run_pass()
    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED
    job_report(job_id=job.pk, status=JobStatus.FAILED, attempt=1, reason="exit code 3", actor=world.admin)
    return job


def test_a_failed_job_reaches_the_webhook_signed_with_the_subscriptions_secret(
    world, receiver, subscribe, sent_at_once, django_capture_on_commit_callbacks
):
    subscription = subscribe(world.ana, triggers=[Trigger.JOB_FAILED], target=receiver.url)
    job = failed_job(world)

    result = scan(django_capture_on_commit_callbacks)

    assert result.deliveries == 1
    [request] = receiver.received
    body = request.json()
    assert body["trigger"] == "JOB_FAILED"
    assert body["job"]["id"] == job.pk and body["job"]["name"] == "train-llm"
    assert body["job"]["status"] == "FAILED" and body["job"]["team"] == "nlp"
    assert "exit code 3" in body["event"]["message"]
    assert body["url"] == f"https://portal.example.org/jobs/{job.pk}/"
    assert body["subject"] == f"[quotaportal] job train-llm (#{job.pk}) failed"
    # The receiver checks the signature with the secret it shares: HMAC-SHA256 of "<timestamp>.<body>".
    timestamp = request.headers[senders.TIMESTAMP_HEADER]
    assert senders.signature_valid(
        secret=subscription.secret,
        timestamp=timestamp,
        body=request.body,
        header=request.headers[senders.SIGNATURE_HEADER],
    )
    assert not senders.signature_valid(
        secret="another secret",
        timestamp=timestamp,
        body=request.body,
        header=request.headers[senders.SIGNATURE_HEADER],
    )
    delivery = Delivery.objects.get()
    assert request.headers[senders.DELIVERY_HEADER] == str(delivery.pk) == str(body["delivery_id"])
    assert (delivery.status, delivery.attempts, delivery.response_code) == (DeliveryStatus.SENT, 1, 200)


def test_a_second_scan_sends_nothing_twice(
    world, receiver, subscribe, sent_at_once, django_capture_on_commit_callbacks
):
    subscribe(world.ana, triggers=[Trigger.JOB_FAILED], target=receiver.url)
    failed_job(world)
    scan(django_capture_on_commit_callbacks)
    # The next scan rereads the last minutes (for events that committed late): still one delivery.
    again = scan(django_capture_on_commit_callbacks)
    assert again.events_read == 1 and again.deliveries == 0
    assert len(receiver.received) == 1 and Delivery.objects.count() == 1


def test_a_500_is_retried_until_the_receiver_takes_it(
    world, receiver, subscribe, sent_at_once, django_capture_on_commit_callbacks
):
    receiver.statuses = [500, 502]
    subscribe(world.ana, triggers=[Trigger.JOB_FAILED], target=receiver.url)
    failed_job(world)
    scan(django_capture_on_commit_callbacks)
    assert len(receiver.received) == 3
    assert len({r.headers[senders.DELIVERY_HEADER] for r in receiver.received}) == 1  # one delivery, 3 tries
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.response_code, delivery.error) == (
        "SENT",
        3,
        200,
        "",
    )


def test_a_delivery_gives_up_after_its_last_try_and_logs_why(world, receiver, subscribe, settings):
    settings.NOTIFY_MAX_ATTEMPTS = 2
    receiver.statuses = [500, 503, 200]
    subscription = subscribe(world.ana, triggers=[Trigger.JOB_FAILED], target=receiver.url)
    failed_job(world)
    with mock.patch.object(tasks.send, "delay"):
        services.notifications_scan()
    delivery = Delivery.objects.get(subscription=subscription)

    first = services.delivery_attempt(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert first.retry_in == 30 and delivery.status == "RETRYING" and delivery.response_code == 500
    assert delivery.next_attempt_at > timezone.now() + timedelta(seconds=25)
    assert "receiver broke" in delivery.error

    second = services.delivery_attempt(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert second.retry_in is None and delivery.status == "FAILED"
    assert (delivery.attempts, delivery.response_code) == (2, 503)
    assert services.delivery_attempt(delivery_id=delivery.pk) is None  # nothing left to try
    assert len(receiver.received) == 2


def test_a_refusing_receiver_is_not_asked_again(world, receiver, subscribe):
    receiver.statuses = [404]
    subscribe(world.ana, triggers=[Trigger.JOB_FAILED], target=receiver.url)
    failed_job(world)
    with mock.patch.object(tasks.send, "delay"):
        services.notifications_scan()
    attempt = services.delivery_attempt(delivery_id=Delivery.objects.get().pk)
    assert attempt.status == "FAILED" and attempt.retry_in is None


def test_slack_receives_its_text_format(
    world, receiver, subscribe, sent_at_once, django_capture_on_commit_callbacks
):
    subscribe(world.ana, triggers=[Trigger.JOB_FAILED], channel=Channel.SLACK, target=receiver.url)
    job = failed_job(world)
    scan(django_capture_on_commit_callbacks)
    body = receiver.received[0].json()
    assert list(body) == ["text"]
    assert body["text"].startswith(f"*job train-llm (#{job.pk}) failed*\n")
    assert f"<https://portal.example.org/jobs/{job.pk}/|Open in quotaportal>" in body["text"]


def test_email_goes_through_djangos_mail_settings(
    world, subscribe, sent_at_once, django_capture_on_commit_callbacks, settings
):
    settings.DEFAULT_FROM_EMAIL = "gpu-fleet@example.org"
    subscribe(world.ana, triggers=[Trigger.JOB_FAILED], channel=Channel.EMAIL, target="ana@example.org")
    job = failed_job(world)
    scan(django_capture_on_commit_callbacks)
    [message] = mail.outbox
    assert message.to == ["ana@example.org"] and message.from_email == "gpu-fleet@example.org"
    assert message.subject == f"[quotaportal] job train-llm (#{job.pk}) failed"
    assert "exit code 3" in message.body and f"https://portal.example.org/jobs/{job.pk}/" in message.body
    assert Delivery.objects.get().status == "SENT"


# --- who is told what --------------------------------------------------------------------------------------


def test_another_teams_failure_never_notifies_a_member(
    world, receiver, subscribe, sent_at_once, django_capture_on_commit_callbacks
):
    subscribe(world.chen, triggers=list(Trigger.values[:4]), target=receiver.url)  # chen is in Vision
    failed_job(world, world.nlp, name="nlp-secret-run")
    result = scan(django_capture_on_commit_callbacks)
    assert result.deliveries == 0 and receiver.received == []


def test_staff_hear_every_teams_failures(
    world, receiver, subscribe, sent_at_once, django_capture_on_commit_callbacks
):
    subscribe(world.admin, triggers=[Trigger.JOB_FAILED], target=receiver.url)
    failed_job(world, world.vision, user=world.chen, instance_type=P4)
    scan(django_capture_on_commit_callbacks)
    assert receiver.received[0].json()["job"]["team"] == "vision"


def test_a_team_subscription_stops_when_its_owner_leaves_the_team(
    world, receiver, subscribe, sent_at_once, django_capture_on_commit_callbacks
):
    subscribe(
        world.ben, triggers=[Trigger.JOB_FAILED], target=receiver.url, team=world.team_nlp
    )  # ben manages NLP
    world.team_nlp.memberships.filter(user=world.ben).delete()
    failed_job(world)
    assert scan(django_capture_on_commit_callbacks).deliveries == 0


def test_only_my_jobs_leaves_out_teammates_jobs(
    world, receiver, subscribe, sent_at_once, django_capture_on_commit_callbacks
):
    subscribe(world.ana, triggers=[Trigger.JOB_FAILED], target=receiver.url, only_my_jobs=True)
    failed_job(world, user=world.ben, name="bens-run")
    failed_job(world, user=world.ana, name="anas-run")
    scan(django_capture_on_commit_callbacks)
    assert [r.json()["job"]["name"] for r in receiver.received] == ["anas-run"]


def test_a_subscription_hears_nothing_from_before_it_was_made(
    world, receiver, subscribe, sent_at_once, django_capture_on_commit_callbacks
):
    failed_job(world)
    Event.objects.update(created_at=timezone.now() - timedelta(seconds=30))
    subscribe(world.ana, triggers=[Trigger.JOB_FAILED], target=receiver.url)
    assert scan(django_capture_on_commit_callbacks).deliveries == 0


# --- what fires which trigger ------------------------------------------------------------------------------


def record(job, kind, message):
    return job_event_record(kind=kind, job=job, message=message, now=timezone.now())


def test_each_trigger_hears_its_own_events(
    world, receiver, subscribe, sent_at_once, django_capture_on_commit_callbacks
):
    subscribe(world.ana, triggers=[Trigger.JOB_PREEMPTED], target=receiver.url, name="preempted")
    subscribe(world.ana, triggers=[Trigger.JOB_TIMED_OUT], target=receiver.url, name="timeouts")
    subscribe(world.ana, triggers=[Trigger.JOB_EXECUTOR_LOST], target=receiver.url, name="lost")
    subscribe(
        world.ana,
        triggers=[Trigger.BUDGET_WARNING, Trigger.BUDGET_EXHAUSTED],
        target=receiver.url,
        name="budget",
    )
    job = job_in(world.nlp, [(P5, 1)], name="victim", user=world.ana)
    record(job, EventKind.PREEMPTED_RECLAIM, "victim (#1) preempted by job #9 of share vision")
    record(job, EventKind.FAILED, "PENDING_TIMEOUT: waited more than 60 s")
    record(job, EventKind.EXECUTOR_LOST, "victim: EXECUTOR_LOST: no report from the executor for 300 s")
    record(job, EventKind.SUBMITTED, "victim submitted")  # nobody listens to that
    # Recorded by the budgets (by name: the kind is not in this branch's EventKind).
    Event.objects.create(
        kind="BUDGET_WARNING",
        team=world.team_nlp,
        quota_share=world.nlp,
        message="nlp used 80% of 100 GPU-hours",
    )
    scan(django_capture_on_commit_callbacks)
    got = sorted((r.json()["subscription"]["name"], r.json()["trigger"]) for r in receiver.received)
    assert got == [
        ("budget", "BUDGET_WARNING"),
        ("lost", "JOB_EXECUTOR_LOST"),
        ("preempted", "JOB_PREEMPTED"),
        ("timeouts", "JOB_TIMED_OUT"),
    ]
    budget = next(r.json() for r in receiver.received if r.json()["trigger"] == "BUDGET_WARNING")
    assert (
        budget["quota_share"]["name"] == "nlp"
        and budget["subject"] == "[quotaportal] share nlp used 80% of its budget"
    )


def test_a_pending_timeout_from_a_real_pass_notifies(
    world, receiver, subscribe, sent_at_once, django_capture_on_commit_callbacks
):
    subscribe(world.ana, triggers=[Trigger.JOB_TIMED_OUT], target=receiver.url)
    job = job_in(world.nlp, [(P5, 99)], name="too-big", user=world.ana, max_pending_seconds=1)
    Job.objects.filter(pk=job.pk).update(runnable_since=timezone.now() - timedelta(minutes=5))
    world.run_pass()
    assert Job.objects.get(pk=job.pk).status == JobStatus.FAILED
    scan(django_capture_on_commit_callbacks)
    [request] = receiver.received
    assert (
        request.json()["trigger"] == "JOB_TIMED_OUT"
        and "PENDING_TIMEOUT" in request.json()["event"]["message"]
    )


# --- the cursor --------------------------------------------------------------------------------------------


def test_the_scan_reads_in_batches_after_its_cursor(world, receiver, subscribe, settings):
    settings.NOTIFY_SCAN_BATCH = 2
    subscribe(world.ana, triggers=[Trigger.JOB_FAILED], target=receiver.url)
    job = job_in(world.nlp, [(P5, 1)], user=world.ana)
    events = [record(job, EventKind.FAILED, f"failure {n}") for n in range(5)]
    with mock.patch.object(tasks.send, "delay"):
        first = services.notifications_scan()
        assert first.cursor == events[1].pk and Delivery.objects.count() == 2
        services.notifications_scan()
        services.notifications_scan()
    assert EventCursor.objects.get().last_event_id == events[-1].pk
    assert sorted(Delivery.objects.values_list("event_id", flat=True)) == [e.pk for e in events]


def test_without_subscriptions_the_cursor_moves_to_the_newest_event(world):
    job = job_in(world.nlp, [(P5, 1)], user=world.ana)
    newest = record(job, EventKind.FAILED, "nobody listens")
    assert services.notifications_scan().cursor == newest.pk


def test_an_event_that_commits_after_the_cursor_passed_it_is_still_read(world, receiver, subscribe):
    subscribe(world.ana, triggers=[Trigger.JOB_FAILED], target=receiver.url)
    job = job_in(world.nlp, [(P5, 1)], user=world.ana)
    late = record(job, EventKind.FAILED, "written first, committed last")
    EventCursor.objects.update(last_event_id=late.pk + 10)  # a later event's id was read already
    with mock.patch.object(tasks.send, "delay"):
        assert services.notifications_scan().deliveries == 1
    assert Delivery.objects.get().event_id == late.pk


def test_a_redirect_is_not_followed_and_fails_at_once(world, receiver, subscribe):
    receiver.statuses = [302]
    subscribe(world.ana, triggers=[Trigger.JOB_FAILED], target=receiver.url)
    failed_job(world)
    with mock.patch.object(tasks.send, "delay"):
        services.notifications_scan()
    attempt = services.delivery_attempt(delivery_id=Delivery.objects.get().pk)
    delivery = Delivery.objects.get()
    assert attempt.status == "FAILED" and delivery.response_code == 302
    assert "not followed: use the final URL" in delivery.error and len(receiver.received) == 1


def test_the_receivers_check_in_the_docs_accepts_a_delivery_and_refuses_a_changed_body(
    world, receiver, subscribe, sent_at_once, django_capture_on_commit_callbacks
):
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "notifications.md").read_text()
    snippet = docs.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(snippet, namespace)  # the documented code, run as a receiver would run it
    subscription = subscribe(world.ana, triggers=[Trigger.JOB_FAILED], target=receiver.url)
    failed_job(world)
    scan(django_capture_on_commit_callbacks)
    [request] = receiver.received
    assert namespace["authentic"](subscription.secret, request.headers, request.body)
    assert not namespace["authentic"](
        subscription.secret, request.headers, request.body.replace(b"FAILED", b"OK")
    )
    assert not namespace["authentic"]("wrong-secret", request.headers, request.body)


@pytest.mark.parametrize("events", [10, 200])
def test_a_scan_reads_in_the_same_few_queries_whatever_the_number_of_events(
    world, receiver, subscribe, django_assert_max_num_queries, events
):
    for name in ("a", "b", "c"):
        subscribe(
            world.ana, triggers=[Trigger.JOB_FAILED, Trigger.SHARE_STARVED], target=receiver.url, name=name
        )
    subscribe(world.admin, triggers=[Trigger.EXECUTOR_SILENT], target=receiver.url, name="staff")
    job = job_in(world.nlp, [(P5, 1)], user=world.ana)
    Event.objects.bulk_create(
        Event(kind=EventKind.FAILED, job=job, team=world.team_nlp, message=f"failure {n}")
        for n in range(events)
    )
    rows = 3 * events
    # The deliveries are one INSERT, or on SQLite one per batch of as many rows as its variables allow.
    fields = [f for f in Delivery._meta.concrete_fields if not f.primary_key]
    inserts = math.ceil(rows / connection.ops.bulk_batch_size(fields, [None] * rows))
    with mock.patch.object(tasks.send, "delay"), django_assert_max_num_queries(15 + inserts):
        result = services.notifications_scan()
    assert result.deliveries == rows


def test_a_storm_is_read_over_several_scans_each_event_whole(world, receiver, subscribe, settings):
    settings.NOTIFY_SCAN_MAX_DELIVERIES = 5
    for name in ("a", "b", "c"):
        subscribe(world.ana, triggers=[Trigger.JOB_FAILED], target=receiver.url, name=name)
    job = job_in(world.nlp, [(P5, 1)], user=world.ana)
    events = [record(job, EventKind.FAILED, f"failure {n}") for n in range(4)]
    with mock.patch.object(tasks.send, "delay"):
        first = services.notifications_scan()
        assert (first.deliveries, first.cursor) == (6, events[1].pk)  # the cap falls in event 1: all of it
        second = services.notifications_scan()
        assert (second.deliveries, second.cursor) == (6, events[3].pk)
    assert Delivery.objects.count() == 12
