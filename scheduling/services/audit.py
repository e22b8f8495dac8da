"""The audit log's writers: CONFIG_CHANGED events with before and after, and a job's lifecycle events.

These only record. A service that changes something asks for its pass itself (`scheduling.passes.requests`).
Each runs inside its caller's transaction, so a change rolled back takes its event with it.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import models

from scheduling.models import Event, EventKind, Job, JobQueue, QuotaShare, ServiceEnvironment


def config_state(obj: models.Model) -> dict[str, Any]:
    """A JSON-able picture of a configuration object, limits included, for before/after audit events."""
    state: dict[str, Any] = {}
    for model_field in obj._meta.concrete_fields:
        value = getattr(obj, model_field.attname)
        plain = isinstance(value, (int, float, str, bool, type(None)))
        state[model_field.name] = value if plain else str(value)
    if obj.pk is not None:
        if hasattr(obj, "capacity_limits"):
            limits = list(obj.capacity_limits.select_related("instance_type"))
            state["capacity_limits"] = {limit.instance_type.name: limit.max_capacity for limit in limits}
            lending = {
                limit.instance_type.name: limit.lending_limit
                for limit in limits
                if getattr(limit, "lending_limit", None) is not None
            }
            if lending:
                state["lending_limits"] = lending
        if obj._meta.model_name == "serviceenvironment":
            state["executor_accounts"] = sorted(obj.executor_accounts.values_list("username", flat=True))
        if hasattr(obj, "quota_shares") and obj._meta.model_name == "trainingplan":
            state["quota_shares"] = sorted(obj.quota_shares.values_list("name", flat=True))
    return state


def config_change_record(
    *,
    actor: AbstractBaseUser | None,
    obj: models.Model,
    action: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> Event | None:
    """Write the CONFIG_CHANGED audit event for a created, changed or deleted configuration object.

    None when a change changed nothing. The event names the queue the object belongs to (`job_queue_id`),
    which is the queue whose pass the caller asks for.
    """
    if action == "changed" and before == after:
        return None
    label = obj._meta.verbose_name
    changed = sorted(
        k for k in set(before or {}) | set(after or {}) if (before or {}).get(k) != (after or {}).get(k)
    )
    who = getattr(actor, "username", None) or "system"
    # In words (`capacity limits`), as the events page and the admin show the message; the data keeps the names.
    detail = f": {', '.join(name.replace('_', ' ') for name in changed)}" if action == "changed" else ""
    queue_id = _queue_id_of(obj)
    event = Event.objects.create(
        kind=EventKind.CONFIG_CHANGED,
        actor=actor if getattr(actor, "pk", None) else None,
        job_queue_id=queue_id,
        quota_share=obj if isinstance(obj, QuotaShare) and action != "deleted" else None,
        message=f"{who} {action} {label} {obj}{detail}",
        data={"object": obj._meta.label, "id": obj.pk, "action": action, "before": before, "after": after},
    )
    return event


def _queue_id_of(obj: models.Model) -> int | None:
    if isinstance(obj, JobQueue):
        return obj.pk
    if isinstance(obj, ServiceEnvironment):
        return JobQueue.objects.filter(service_environment=obj).values_list("pk", flat=True).first()
    return getattr(obj, "job_queue_id", None)


def job_event_record(
    *, kind: str, job: Job, message: str, now, actor: AbstractBaseUser | None = None, data: dict | None = None
) -> Event:
    """Write one event of a job's life (submitted, started, cancelled...), with where it runs."""
    return Event.objects.create(
        kind=kind,
        job=job,
        team_id=job.team_id,
        job_queue_id=job.job_queue_id,
        quota_share_id=job.quota_share_id,
        instance_type_id=job.selected_instance_type_id,
        instances=job.selected_instance_count,
        actor=actor if getattr(actor, "pk", None) else None,
        message=message,
        data=data or {},
        created_at=now,
    )
