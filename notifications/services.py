"""Every write of notifications: subscriptions made and removed, the scan that turns events and conditions
into deliveries, and one try at sending a delivery."""

from __future__ import annotations

import logging
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from notifications import messages, senders
from notifications.models import (
    MAX_AFTER_MINUTES,
    MIN_AFTER_MINUTES,
    STAFF_ONLY_TRIGGERS,
    Channel,
    Delivery,
    DeliveryStatus,
    EventCursor,
    Subscription,
    Trigger,
)
from notifications.selectors import (
    LATE_COMMIT_SECONDS,
    Listener,
    event_triggers,
    events_after,
    events_late,
    listeners,
    managed_teams,
    shortest_wait,
    silent_executors,
    starved_shares,
)
from quotaportal.celery import task_named
from scheduling.errors import NotAllowed, NotFound
from scheduling.models import Event, Team

logger = logging.getLogger("quotaportal.notifications")

CURSOR = "events"
# Deliveries the broker lost (a worker killed mid-send, a broker down when one was enqueued) are sent again
# once they are this late.
STUCK_SECONDS = 300
FIRST_RETRY_SECONDS = 30


# --- subscriptions -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubscriptionInput:
    name: str
    channel: str
    target: str
    triggers: list[str]
    team: Team | None = None
    only_my_jobs: bool = False
    after_minutes: int = 30


def subscription_errors(*, owner: AbstractBaseUser, data: SubscriptionInput) -> dict[str, list[str]]:
    """What is wrong with a subscription, by field (empty: nothing); writes nothing."""
    errors: dict[str, list[str]] = {}
    if not data.name.strip():
        errors["name"] = ["Give the subscription a name."]
    elif len(data.name) > 128:
        errors["name"] = ["At most 128 characters."]
    if data.channel not in Channel.values:
        errors["channel"] = [f"Choose one of {', '.join(Channel.values)}."]
    elif data.channel == Channel.EMAIL:
        try:
            validate_email(data.target)
        except ValidationError:
            errors["target"] = [f"{data.target or 'An empty address'} is not an email address."]
    else:
        try:
            senders.webhook_url_check(data.target, resolve=False)
        except ValidationError as exc:
            errors.update(exc.message_dict)
        if len(data.target) > 2000:
            errors["target"] = ["At most 2000 characters."]
    unknown = [t for t in data.triggers if t not in Trigger.values]
    if not data.triggers:
        errors["triggers"] = ["Choose at least one thing to be told about."]
    elif unknown:
        errors["triggers"] = [
            f"Unknown: {', '.join(map(str, unknown))}; choose from {', '.join(Trigger.values)}."
        ]
    elif not owner.is_staff and set(data.triggers) & set(STAFF_ONLY_TRIGGERS):
        errors["triggers"] = ["Silent executors are reported to staff only (executors serve every team)."]
    if not MIN_AFTER_MINUTES <= data.after_minutes <= MAX_AFTER_MINUTES:
        errors["after_minutes"] = [f"Between {MIN_AFTER_MINUTES} and {MAX_AFTER_MINUTES} minutes."]
    if data.team is not None:
        if data.team not in managed_teams(user=owner):
            errors["team"] = [f"Only managers of team {data.team.name} (and staff) make its subscriptions."]
        if data.only_my_jobs:
            errors["only_my_jobs"] = ["A team subscription is about the whole team's jobs."]
    return errors


@transaction.atomic
def subscription_create(*, owner: AbstractBaseUser, data: SubscriptionInput) -> Subscription:
    """A new subscription with a fresh signing secret; one ValidationError naming every field at fault."""
    errors = subscription_errors(owner=owner, data=data)
    if errors:
        raise ValidationError(errors)
    return Subscription.objects.create(owner=owner, secret=secrets.token_hex(32), **_stored(data))


def _stored(data: SubscriptionInput) -> dict:
    """A subscription's columns as the input sets them (the owner and the secret aside)."""
    return {
        "team": data.team,
        "name": data.name.strip(),
        "channel": data.channel,
        "target": data.target.strip(),
        "triggers": sorted(set(data.triggers)),
        "only_my_jobs": data.only_my_jobs,
        "after_minutes": data.after_minutes,
    }


def _own(*, user: AbstractBaseUser, subscription_id: int) -> Subscription:
    subscription = Subscription.objects.select_for_update().filter(pk=subscription_id).first()
    if subscription is None or (subscription.owner_id != user.pk and not user.is_staff):
        raise NotFound(f"you have no notification subscription {subscription_id}")
    return subscription


@transaction.atomic
def subscription_update(
    *, user: AbstractBaseUser, subscription_id: int, data: SubscriptionInput
) -> Subscription:
    """Change a subscription whole (its owner or staff), by its owner's rights; its secret and delivery log stay,
    and a subject it was told of is not told again. One ValidationError naming every field at fault."""
    subscription = _own(user=user, subscription_id=subscription_id)
    errors = subscription_errors(owner=subscription.owner, data=data)
    if errors:
        raise ValidationError(errors)
    fields = _stored(data)
    for name, value in fields.items():
        setattr(subscription, name, value)
    subscription.save(update_fields=list(fields))
    return subscription


@transaction.atomic
def subscription_delete(*, user: AbstractBaseUser, subscription_id: int) -> None:
    """Remove a subscription and its delivery log (its owner or staff)."""
    _own(user=user, subscription_id=subscription_id).delete()


@transaction.atomic
def subscription_test(*, user: AbstractBaseUser, subscription_id: int) -> Delivery:
    """A test notification through the subscription, sent (and logged) like any other."""
    subscription = _own(user=user, subscription_id=subscription_id)
    if not user.is_active:
        raise NotAllowed("an inactive account sends nothing")
    now = timezone.now()
    document = messages.for_test(subscription=subscription, now=now)
    delivery = Delivery.objects.create(
        subscription=subscription,
        trigger="TEST",
        dedupe_key=f"test:{uuid.uuid4().hex}",
        subject=document["subject"],
        payload=document,
        created_at=now,
        next_attempt_at=now,
    )
    _send_after_commit([delivery.pk])
    return delivery


# --- the scan ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScanResult:
    events_read: int
    deliveries: int
    resent: int
    cursor: int


def _chosen(hits: frozenset[str]) -> str:
    # A failure by timeout fires both: a subscription to either hears "timed out", the more telling.
    return Trigger.JOB_TIMED_OUT if Trigger.JOB_TIMED_OUT in hits else sorted(hits)[0]


def _event_matches(listening: list[Listener], events: list[dict]) -> list[tuple[Listener, str, dict]]:
    matches = []
    for event in events:
        triggers = event_triggers(event["kind"], event["message"])
        team_id = event["team_id"] or event["quota_share__team_id"]
        for listener in listening:
            hits = triggers & listener.triggers
            if not hits or event["created_at"] < listener.subscription.created_at:
                continue
            if event["job_id"] is not None:
                if not listener.wants_job(team_id=team_id, submitted_by_id=event["job__submitted_by_id"]):
                    continue
            elif not listener.may_know_team(team_id):
                continue
            matches.append((listener, _chosen(hits), event))
    return matches


def _cursor_advance(cursor: EventCursor, new: list[dict], *, now) -> None:
    if new:
        cursor.last_event_id = new[-1]["id"]
    cursor.scanned_at = now
    cursor.save(update_fields=["last_event_id", "scanned_at"])


def notifications_scan(*, now=None) -> ScanResult:
    """Read the events written since the last scan (in batches of NOTIFY_SCAN_BATCH, after a cursor), the
    starved shares and the silent executors; make one delivery per subscription and subject, and enqueue
    them once committed. Never touches what a pass reads or writes.

    The cursor row's lock serializes scans (two beats, or a slow scan overtaken by the next one).
    """
    now = now or timezone.now()
    EventCursor.objects.get_or_create(name=CURSOR)
    with transaction.atomic():
        cursor = EventCursor.objects.select_for_update().get(name=CURSOR)
        listening = listeners()
        batch = settings.NOTIFY_SCAN_BATCH
        if not listening:
            # Nobody listens: nothing read now is owed to a subscription made later.
            top = Event.objects.aggregate(top=Max("id"))["top"] or cursor.last_event_id
            cursor.last_event_id = max(cursor.last_event_id, top)
            _cursor_advance(cursor, [], now=now)
            return ScanResult(events_read=0, deliveries=0, resent=0, cursor=cursor.last_event_id)
        late = events_late(
            up_to_id=cursor.last_event_id, since=now - timedelta(seconds=LATE_COMMIT_SECONDS), limit=batch
        )
        new = events_after(after_id=cursor.last_event_id, limit=batch)
        wanted: list[Wanted] = []
        bodies: dict[tuple[int, str], dict] = {}  # one document per event and trigger, whoever receives it
        matches = _event_matches(listening, new)
        cap = settings.NOTIFY_SCAN_MAX_DELIVERIES
        if len(matches) > cap:
            # A storm: this scan takes the events up to the one that reaches the cap (that one whole), and the
            # next scan goes on from there, so no scan outgrows its time limit and is never done.
            last = matches[cap - 1][2]["id"]
            matches = [m for m in matches if m[2]["id"] <= last]
            new = [e for e in new if e["id"] <= last]
        for listener, trigger, event in _event_matches(listening, late) + matches:

            def document(trigger=trigger, event=event) -> dict:
                key = (event["id"], trigger)
                if key not in bodies:
                    bodies[key] = messages.for_event(trigger=trigger, event=event)
                return bodies[key]

            wanted.append(Wanted(listener, trigger, f"event:{event['id']}", document, event["id"]))
        wanted += _condition_matches(listening, now=now)
        created = _deliveries_make(wanted, now=now)
        _cursor_advance(cursor, new, now=now)
        resent = _stuck_resend(now=now)
    return ScanResult(
        events_read=len(late) + len(new), deliveries=len(created), resent=resent, cursor=cursor.last_event_id
    )


@dataclass(frozen=True)
class Wanted:
    """A delivery the scan would make, unless the subscription has one about `key` already; its document is
    built only then."""

    listener: Listener
    trigger: str
    key: str
    document: Callable[[], dict]
    event_id: int | None = None


def _condition_matches(listening: list[Listener], *, now) -> list[Wanted]:
    wanted = []
    wait = shortest_wait(listening, Trigger.SHARE_STARVED)
    if wait is not None:
        for starvation in starved_shares(now=now, longer_than=wait):
            # One notice per starvation: until a job of the share is placed again (or, if none ever was,
            # while its oldest waiting job waits).
            key = f"starved:{starvation.share_id}:{starvation.since.isoformat()}"
            for listener in listening:
                if (
                    listener.hears(Trigger.SHARE_STARVED)
                    and now - starvation.since > timedelta(minutes=listener.subscription.after_minutes)
                    and listener.may_know_team(starvation.team_id)
                ):
                    document = partial(messages.for_starvation, starvation=starvation, now=now)
                    wanted.append(Wanted(listener, Trigger.SHARE_STARVED, key, document))
    wait = shortest_wait([lst for lst in listening if lst.viewer.is_staff], Trigger.EXECUTOR_SILENT)
    if wait is not None:
        for silence in silent_executors(now=now, longer_than=wait):
            key = f"silent:{silence.executor_id}:{silence.last_seen_at.isoformat()}"
            for listener in listening:
                if (
                    listener.hears(Trigger.EXECUTOR_SILENT)
                    and listener.viewer.is_staff
                    and now - silence.last_seen_at > timedelta(minutes=listener.subscription.after_minutes)
                ):
                    document = partial(messages.for_silence, silence=silence, now=now)
                    wanted.append(Wanted(listener, Trigger.EXECUTOR_SILENT, key, document))
    return wanted


def _deliveries_make(wanted: list[Wanted], *, now) -> list[int]:
    """The deliveries not made yet (one per subscription and key), inserted at once; their ids."""
    if not wanted:
        return []
    keys = {w.key for w in wanted}
    subscription_ids = {w.listener.subscription.pk for w in wanted}
    existing = set(
        Delivery.objects.filter(subscription_id__in=subscription_ids, dedupe_key__in=keys).values_list(
            "subscription_id", "dedupe_key"
        )
    )
    rows, seen = [], set()
    for w in wanted:
        subscription = w.listener.subscription
        pair = (subscription.pk, w.key)
        if pair in existing or pair in seen:
            continue
        seen.add(pair)
        document = messages.addressed(w.document(), subscription)
        rows.append(
            Delivery(
                subscription=subscription,
                event_id=w.event_id,
                trigger=w.trigger,
                dedupe_key=w.key,
                subject=document["subject"][:500],
                payload=document,
                created_at=now,
                next_attempt_at=now,
            )
        )
    # PostgreSQL and SQLite (3.35+) return the new rows' ids from the one INSERT.
    ids = [delivery.pk for delivery in Delivery.objects.bulk_create(rows)]
    _send_after_commit(ids)
    return ids


def _stuck_resend(*, now) -> int:
    late = now - timedelta(seconds=STUCK_SECONDS)
    waiting = Delivery.objects.filter(
        status__in=[DeliveryStatus.PENDING, DeliveryStatus.RETRYING], next_attempt_at__lt=late
    )
    sending = Delivery.objects.filter(status=DeliveryStatus.SENDING, last_attempt_at__lt=late)
    ids = list(waiting.values_list("pk", flat=True)[:100]) + list(sending.values_list("pk", flat=True)[:100])
    if ids:
        # A send the worker never finished counts as a failed try; it goes back in line.
        sending.filter(pk__in=ids).update(status=DeliveryStatus.RETRYING, error="the try never finished")
        Delivery.objects.filter(pk__in=ids).update(next_attempt_at=now)
        _send_after_commit(ids)
    return len(ids)


def _send_after_commit(ids: list[int]) -> None:
    def send() -> None:
        task = task_named("notifications.tasks.send")
        for delivery_id in ids:
            try:
                task.delay(delivery_id)
            except Exception:  # a broker outage: the next scan sends what waits
                logger.warning("could not enqueue notification delivery %s", delivery_id, exc_info=True)
                return

    if ids:
        transaction.on_commit(send)


# --- sending -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    status: str
    retry_in: int | None = None


def retry_wait(attempts: int) -> int:
    """Seconds before the next try after `attempts` tries: 30 s, 2 min, 8 min, 32 min, ~2 h, capped at 6 h."""
    return min(FIRST_RETRY_SECONDS * 4 ** (attempts - 1), 6 * 3600)


def delivery_attempt(*, delivery_id: int) -> Attempt | None:
    """One try at sending a delivery that waits for one (None: it is sent, failed, taken by another worker
    or gone). Claimed by a conditional UPDATE, so two workers never send it at once; sent outside any
    transaction (a slow receiver holds no lock); the outcome is recorded in its log."""
    now = timezone.now()
    claimed = Delivery.objects.filter(
        pk=delivery_id, status__in=[DeliveryStatus.PENDING, DeliveryStatus.RETRYING]
    ).update(status=DeliveryStatus.SENDING, attempts=F("attempts") + 1, last_attempt_at=now)
    if not claimed:
        return None
    delivery = Delivery.objects.select_related("subscription").filter(pk=delivery_id).first()
    if delivery is None:  # its subscription was removed a moment ago, with its log
        return None
    subscription = delivery.subscription
    document = delivery.payload
    if subscription.channel == Channel.EMAIL:
        outcome = senders.email(
            address=subscription.target, subject=delivery.subject, text=messages.email_text(document)
        )
    else:
        body = (
            messages.slack_body(document)
            if subscription.channel == Channel.SLACK
            else {**document, "delivery_id": delivery.pk, "created_at": delivery.created_at.isoformat()}
        )
        outcome = senders.post(
            url=subscription.target, body=body, secret=subscription.secret, delivery_id=delivery.pk
        )
    changes: dict = {"response_code": outcome.response_code, "error": outcome.error}
    retry_in = None
    if outcome.ok:
        changes.update(status=DeliveryStatus.SENT, sent_at=timezone.now())
    elif outcome.retry and delivery.attempts < settings.NOTIFY_MAX_ATTEMPTS:
        retry_in = retry_wait(delivery.attempts)
        changes.update(status=DeliveryStatus.RETRYING, next_attempt_at=now + timedelta(seconds=retry_in))
    else:
        changes.update(status=DeliveryStatus.FAILED)
    Delivery.objects.filter(pk=delivery.pk, status=DeliveryStatus.SENDING).update(**changes)
    return Attempt(status=changes["status"], retry_in=retry_in)


def deliveries_prune(*, now=None) -> int:
    """Drop delivery logs older than NOTIFY_LOG_DAYS."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.NOTIFY_LOG_DAYS)
    deleted, _ = Delivery.objects.filter(created_at__lt=cutoff).delete()
    return deleted
