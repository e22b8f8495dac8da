"""Conditions the scan finds in the state rather than in events: a share starved for N minutes, an executor
gone silent. Each is told once per occurrence, to those who may know it."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

from django.utils import timezone

from notifications import services, tasks
from notifications.models import Delivery, Trigger
from scheduling.models import Event, EventKind, Executor, Job
from tests.factories import job_in
from tests.pages.conftest import P5


def scan(now=None):
    with mock.patch.object(tasks.send, "delay"):
        return services.notifications_scan(now=now)


def waiting_since(job, minutes):
    Job.objects.filter(pk=job.pk).update(runnable_since=timezone.now() - timedelta(minutes=minutes))


def test_a_share_whose_jobs_waited_n_minutes_with_none_placed_is_starved(world, receiver, subscribe):
    subscribe(world.ana, triggers=[Trigger.SHARE_STARVED], target=receiver.url, after_minutes=20)
    job = job_in(world.nlp, [(P5, 99)], user=world.ana)  # it can never fit: the share starves
    waiting_since(job, 10)
    assert scan().deliveries == 0  # 10 minutes: not yet
    waiting_since(job, 25)
    assert scan().deliveries == 1
    delivery = Delivery.objects.get()
    assert delivery.trigger == "SHARE_STARVED" and delivery.subject.startswith(
        "[quotaportal] share nlp starved for 25 min"
    )
    share = delivery.payload["quota_share"]
    assert (share["name"], share["team"], share["waiting"], share["last_placed_at"]) == (
        "nlp",
        "nlp",
        1,
        None,
    )
    assert scan().deliveries == 0  # once per starvation


def test_a_placement_in_the_share_ends_the_starvation(world, receiver, subscribe):
    subscribe(world.ana, triggers=[Trigger.SHARE_STARVED], target=receiver.url, after_minutes=20)
    job = job_in(world.nlp, [(P5, 99)], user=world.ana)
    waiting_since(job, 60)
    Event.objects.create(
        kind=EventKind.ADMITTED, team=world.team_nlp, quota_share=world.nlp, message="placed"
    )
    assert scan().deliveries == 0
    # Twenty minutes later, still nothing else placed: starved again, a new notice.
    assert scan(now=timezone.now() + timedelta(minutes=21)).deliveries == 1


def test_another_teams_starvation_is_not_told_to_a_member(world, receiver, subscribe):
    subscribe(world.chen, triggers=[Trigger.SHARE_STARVED], target=receiver.url, after_minutes=5)
    waiting_since(job_in(world.nlp, [(P5, 99)], user=world.ana), 60)
    assert scan().deliveries == 0


def test_each_subscription_waits_its_own_n_minutes(world, receiver, subscribe):
    subscribe(world.ana, triggers=[Trigger.SHARE_STARVED], target=receiver.url, after_minutes=5, name="soon")
    subscribe(world.ben, triggers=[Trigger.SHARE_STARVED], target=receiver.url, after_minutes=60, name="late")
    waiting_since(job_in(world.nlp, [(P5, 99)], user=world.ana), 30)
    scan()
    assert list(Delivery.objects.values_list("subscription__name", flat=True)) == ["soon"]


def test_a_disabled_share_waits_by_choice_and_is_not_starved(world, receiver, subscribe):
    subscribe(world.ana, triggers=[Trigger.SHARE_STARVED], target=receiver.url, after_minutes=5)
    waiting_since(job_in(world.nlp, [(P5, 99)], user=world.ana), 60)
    world.nlp.__class__.objects.filter(pk=world.nlp.pk).update(state="DISABLED")
    assert scan().deliveries == 0


def executor_seen_ago(world, minutes, name="gpu-host-1"):
    return Executor.objects.create(
        service_environment=world.queue.service_environment,
        name=name,
        host="10.0.0.7",
        last_seen_at=timezone.now() - timedelta(minutes=minutes),
    )


def test_an_executor_silent_for_n_minutes_is_told_to_staff_once(world, receiver, subscribe):
    subscribe(world.admin, triggers=[Trigger.EXECUTOR_SILENT], target=receiver.url, after_minutes=10)
    executor = executor_seen_ago(world, 3)
    assert scan().deliveries == 0
    Executor.objects.filter(pk=executor.pk).update(last_seen_at=timezone.now() - timedelta(minutes=12))
    assert scan().deliveries == 1
    delivery = Delivery.objects.get()
    assert delivery.payload["executor"]["name"] == "gpu-host-1"
    assert delivery.payload["executor"]["service_environment"] == "gpu-fleet"
    assert scan().deliveries == 0
    # It came back, then went silent again: a new silence, a new notice.
    Executor.objects.filter(pk=executor.pk).update(last_seen_at=timezone.now() - timedelta(minutes=11))
    assert scan().deliveries == 1


def test_an_executor_gone_for_days_counts_as_retired(world, receiver, subscribe):
    subscribe(world.admin, triggers=[Trigger.EXECUTOR_SILENT], target=receiver.url, after_minutes=10)
    executor_seen_ago(world, 3 * 24 * 60)
    assert scan().deliveries == 0


def test_members_cannot_subscribe_to_silent_executors(world, subscribe):
    import pytest
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as raised:
        subscribe(world.ana, triggers=[Trigger.EXECUTOR_SILENT], target="https://hooks.example.org/x")
    assert "triggers" in raised.value.message_dict
