"""What a notification says: a subject line, a few lines of text and the JSON document a webhook receives.

Built when the delivery is made, from what the subscription's owner may see (the scan checked that), so a
retry an hour later sends the same words.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.urls import reverse

from notifications.models import Subscription, Trigger
from notifications.selectors import Silence, Starvation

PREFIX = "[quotaportal]"

_JOB_VERBS = {
    Trigger.JOB_FAILED: "failed",
    Trigger.JOB_PREEMPTED: "was preempted",
    Trigger.JOB_TIMED_OUT: "timed out",
    Trigger.JOB_EXECUTOR_LOST: "lost its executor",
}


def _link(path: str) -> str:
    return f"{settings.PORTAL_URL}{path}"


def _when(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _minutes(seconds: float) -> str:
    minutes = int(seconds // 60)
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"


def addressed(document: dict, subscription: Subscription) -> dict:
    """The document as one subscription receives it: the same for every subscriber but this part."""
    return {**document, "subscription": {"id": subscription.pk, "name": subscription.name}}


def _document(*, trigger: str, subject: str, text: str, url: str, **parts) -> dict:
    return {
        "trigger": trigger,
        "subject": subject,
        "text": text,
        "url": url,
        "event": None,
        "job": None,
        "quota_share": None,
        "executor": None,
        **parts,
    }


def for_event(*, trigger: str, event: dict) -> dict:
    """A job's failure, preemption, timeout or lost executor; or a share's budget warning."""
    about = {"id": event["id"], "kind": event["kind"], "message": event["message"]}
    about["created_at"] = _when(event["created_at"])
    if event["job_id"] is not None:
        name = event["job__name"]
        subject = f"{PREFIX} job {name} (#{event['job_id']}) {_JOB_VERBS.get(trigger, event['kind'].lower())}"
        url = _link(reverse("job_detail", args=[event["job_id"]]))
        job = {
            "id": event["job_id"],
            "name": name,
            "status": event["job__status"],
            "attempt": event["job__attempt"],
            "job_queue": event["job__job_queue_name"],
            "quota_share": event["job__quota_share_name"],
            "team": event["team__slug"],
        }
        where = f"queue {job['job_queue']}, share {job['quota_share']}, team {job['team']}"
        text = f"{event['message']}\n{where}; now {job['status']}"
        return _document(
            trigger=trigger,
            subject=subject,
            text=text,
            url=url,
            event=about,
            job=job,
        )
    share_name = event["quota_share__name"] or "a deleted share"
    verb = "used 80% of its budget" if trigger == Trigger.BUDGET_WARNING else "spent its budget"
    subject = f"{PREFIX} share {share_name} {verb}"
    url = _link(reverse("share_detail", args=[event["quota_share_id"]])) if event["quota_share_id"] else ""
    share = {
        "id": event["quota_share_id"],
        "name": event["quota_share__name"],
        "job_queue": event["quota_share__job_queue__name"],
        "team": event["team__slug"],
    }
    return _document(
        trigger=trigger,
        subject=subject,
        text=event["message"],
        url=url,
        event=about,
        quota_share=share,
    )


def for_starvation(*, starvation: Starvation, now: datetime) -> dict:
    waited = _minutes((now - starvation.since).total_seconds())
    subject = f"{PREFIX} share {starvation.share_name} starved for {waited}"
    placed = (
        f"its last job was placed at {starvation.last_placed_at:%Y-%m-%d %H:%M} UTC"
        if starvation.last_placed_at
        else "none of the jobs waiting now has been placed"
    )
    text = (
        f"{starvation.waiting} job(s) of share {starvation.share_name} (queue {starvation.queue_name}) wait, "
        f"the oldest since {starvation.oldest_waiting_since:%Y-%m-%d %H:%M} UTC; {placed}."
    )
    share = {
        "id": starvation.share_id,
        "name": starvation.share_name,
        "job_queue": starvation.queue_name,
        "team": starvation.team_slug,
        "waiting": starvation.waiting,
        "waiting_since": _when(starvation.oldest_waiting_since),
        "last_placed_at": _when(starvation.last_placed_at),
        "starved_since": _when(starvation.since),
    }
    return _document(
        trigger=Trigger.SHARE_STARVED,
        subject=subject,
        text=text,
        url=_link(reverse("share_detail", args=[starvation.share_id])),
        quota_share=share,
    )


def for_silence(*, silence: Silence, now: datetime) -> dict:
    quiet = _minutes((now - silence.last_seen_at).total_seconds())
    subject = f"{PREFIX} executor {silence.name} silent for {quiet}"
    text = (
        f"Executor {silence.name} on {silence.host or 'an unknown host'} (environment "
        f"{silence.environment_name}) was last seen at {silence.last_seen_at:%Y-%m-%d %H:%M:%S} UTC. Jobs it "
        "took are lost once their lease runs out."
    )
    executor = {
        "id": silence.executor_id,
        "name": silence.name,
        "host": silence.host,
        "service_environment": silence.environment_name,
        "last_seen_at": _when(silence.last_seen_at),
    }
    return _document(
        trigger=Trigger.EXECUTOR_SILENT,
        subject=subject,
        text=text,
        url=_link(reverse("manage_environments")),
        executor=executor,
    )


def for_test(*, subscription: Subscription, now: datetime) -> dict:
    document = _document(
        trigger="TEST",
        subject=f"{PREFIX} test notification for {subscription.name}",
        text=f"A test sent at {now:%Y-%m-%d %H:%M:%S} UTC: this subscription reaches you.",
        url=_link(reverse("notifications")),
    )
    return addressed(document, subscription)


def slack_body(document: dict) -> dict:
    """Slack's incoming-webhook format (also read by Mattermost, Rocket.Chat, Discord's /slack endpoint)."""
    text = f"*{document['subject'].removeprefix(PREFIX).strip()}*\n{document['text']}"
    if document["url"]:
        text += f"\n<{document['url']}|Open in quotaportal>"
    return {"text": text}


def email_text(document: dict) -> str:
    lines = [document["text"], ""]
    if document["url"]:
        lines.append(document["url"])
    lines.append(
        f"(subscription {document['subscription']['name']} on quotaportal: {_link(reverse('notifications'))})"
    )
    return "\n".join(lines)
