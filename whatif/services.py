"""What-if runs: start, execute (in a Celery task) and apply a replay of one window of jobs against a queue's
configuration as it is and as proposed. See docs/replay.md, "What-if page".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.utils import timezone

from quotaportal.celery import task_named
from scheduling import rules
from scheduling.errors import Conflict
from scheduling.models import (
    BudgetPeriod,
    BudgetScope,
    Event,
    EventKind,
    IdleCapacityAssignment,
    InstanceType,
    Job,
    JobQueue,
    QuotaShare,
)
from scheduling.services.configuration import job_queue_update, quota_share_update
from scheduling.services.locks import queue_lock
from simulator import ConfigurationError, InvariantViolation
from simulator.config import configuration_from_mapping
from simulator.runner import replay_configurations
from simulator.trace import PHILLY_CREDIT, TraceError
from whatif import charts as whatif_charts
from whatif import sources as replay_sources
from whatif.models import WhatIfRun

logger = logging.getLogger("quotaportal.whatif")

# A what-if replays one window of jobs (recorded history or the Philly trace) against the queue's
# configuration as it is and as proposed, in a Celery task, and can then apply the proposal through
# `quota_share_update`. See docs/replay.md, "What-if page".

WHATIF_MIN_DAYS = 1 / 24
WHATIF_MAX_DAYS = 31.0
WHATIF_PASS_INTERVAL_SECONDS = 30.0
# The page polls every second; writing progress more often would only load the database.
WHATIF_PROGRESS_EVERY_SECONDS = 0.5
# A RUNNING run whose worker has not reported for this long lost it; a redelivered task may take it over.
WHATIF_HEARTBEAT_TIMEOUT = timedelta(minutes=5)
WHATIF_SHARE_FIELDS = (
    "strategy",
    "borrow_limit",
    "in_share_preemption",
    "fair_share_weight",
    "budget_gpu_hours",
    "budget_period",
    "budget_scope",
)
# The queue's own settings a proposal may change (behaviour.md#the-scheduling-pass: protection and fair borrowing).
WHATIF_QUEUE_FIELDS = ("idle_capacity_assignment", "preemption_min_runtime_seconds")


def _weight(value: Any) -> Decimal:
    """A fair-share weight as stored in a mapping (text) or given by a form (Decimal)."""
    try:
        return Decimal(str(value))
    except InvalidOperation:
        return Decimal("NaN")


@dataclass(frozen=True)
class ShareProposal:
    """What a what-if proposes for one share of its queue: every value, changed or not."""

    name: str
    limits: dict[str, int]  # instance type name -> max_capacity
    strategy: str
    borrow_limit: int = -1
    in_share_preemption: bool = False
    lending_limits: dict[str, int] = field(default_factory=dict)  # type absent: lends all of it
    fair_share_weight: Decimal = Decimal(1)
    budget_gpu_hours: Decimal | None = None  # None: no budget
    budget_period: str = BudgetPeriod.MONTH
    budget_scope: str = BudgetScope.ALL

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> ShareProposal:
        """From a proposal or a baseline's share (a run stored before issue 17 has neither of its keys, one
        stored before budgets has no `budget`)."""
        budget = data.get("budget") or {}
        return cls(
            name=data["name"],
            limits=dict(data["limits"]),
            strategy=data["strategy"],
            borrow_limit=data["borrow_limit"],
            in_share_preemption=data["in_share_preemption"],
            lending_limits=dict(data.get("lending_limits") or {}),
            fair_share_weight=_weight(data.get("fair_share_weight", 1)),
            budget_gpu_hours=_weight(budget["gpu_hours"]) if "gpu_hours" in budget else None,
            budget_period=budget.get("period", BudgetPeriod.MONTH),
            budget_scope=budget.get("scope", BudgetScope.ALL),
        )

    def as_mapping(self) -> dict[str, Any]:
        # Both issue 17 keys always: the proposal replaces the baseline's share mapping key by key.
        return {
            "name": self.name,
            "limits": dict(sorted(self.limits.items())),
            "strategy": self.strategy,
            "borrow_limit": self.borrow_limit,
            "in_share_preemption": self.in_share_preemption,
            "lending_limits": dict(sorted(self.lending_limits.items())),
            "fair_share_weight": format(self.fair_share_weight.normalize(), "f"),
            "budget": None
            if self.budget_gpu_hours is None
            else {
                "gpu_hours": format(self.budget_gpu_hours.normalize(), "f"),
                "period": str(self.budget_period),
                "scope": str(self.budget_scope),
            },
        }


@dataclass(frozen=True)
class QueueProposal:
    """What a what-if proposes for the queue itself: how idle capacity goes to borrowers, and how long a job
    is protected from preemption (behaviour.md#the-scheduling-pass)."""

    idle_capacity_assignment: str = IdleCapacityAssignment.FIFO
    preemption_min_runtime_seconds: int = 0

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> QueueProposal:
        """From a run's queue proposal or baseline (a configuration mapping leaves the defaults out)."""
        return cls(
            idle_capacity_assignment=data.get("idle_capacity_assignment", cls.idle_capacity_assignment),
            preemption_min_runtime_seconds=data.get(
                "preemption_min_runtime_seconds", cls.preemption_min_runtime_seconds
            ),
        )

    def as_mapping(self) -> dict[str, Any]:
        return {
            "idle_capacity_assignment": str(self.idle_capacity_assignment),
            "preemption_min_runtime_seconds": self.preemption_min_runtime_seconds,
        }


class WhatIfStopped(Exception):
    """The replay ran past WHATIF_TIME_LIMIT_SECONDS and was stopped."""


def whatif_share_key(share_name: str, field_name: str) -> str:
    """The error key of one share's field in a proposal, e.g. `shares[vision].borrow_limit`."""
    return f"shares[{share_name}].{field_name}"


def _model_field_errors(model, obj, name: str, value: Any) -> list[str]:
    """The model's own rules for one field's value (its choices, range and validators), as a form or
    `full_clean` applies them when the change is saved."""
    try:
        model._meta.get_field(name).clean(value, obj)
    except ValidationError as exc:
        return [f"{name}: {message}" for message in exc.messages]
    return []


def _whatif_proposal_errors(
    *,
    job_queue: JobQueue,
    baseline: dict[str, Any],
    proposal: Sequence[ShareProposal],
    queue_proposal: QueueProposal | None,
) -> tuple[list[ShareProposal], QueueProposal, rules.Errors]:
    """The whole proposal, one entry per share in the baseline's order (a share left out keeps its values),
    the queue's settings (None keeps them), and what is wrong with it. Each share is checked by the rules of
    a share change, against the others' proposed limits, and every value by its model field's rules: what
    passes here, `whatif_apply` can apply."""
    errors: rules.Errors = {}
    current = {item["name"]: ShareProposal.from_mapping(item) for item in baseline["shares"]}
    current_queue = QueueProposal.from_mapping(baseline)
    queue_settings = queue_proposal if queue_proposal is not None else current_queue
    for name in WHATIF_QUEUE_FIELDS:
        for message in _model_field_errors(JobQueue, job_queue, name, getattr(queue_settings, name)):
            errors.setdefault(name, []).append(message)
    given: dict[str, ShareProposal] = {}
    for item in proposal:
        if item.name not in current:
            errors.setdefault("__all__", []).append(
                f"queue {job_queue.name} has no quota share named {item.name}"
            )
        elif item.name in given:
            errors.setdefault("__all__", []).append(f"share {item.name} is proposed twice")
        else:
            given[item.name] = item
    shares = [given.get(name, share) for name, share in current.items()]
    types = {t.name: t for t in InstanceType.objects.all()}
    rows = {share.name: share for share in QuotaShare.objects.filter(job_queue=job_queue)}
    limits: dict[str, list[rules.LimitInput]] = {}
    for share in shares:
        unknown = sorted((set(share.limits) | set(share.lending_limits)) - set(types))
        if unknown:
            errors.setdefault(whatif_share_key(share.name, "capacity_limits"), []).append(
                f"share {share.name}: no instance type named {', '.join(unknown)}"
            )
        without_limit = sorted(set(share.lending_limits) - set(share.limits))
        if without_limit:
            errors.setdefault(whatif_share_key(share.name, "lending_limits"), []).append(
                f"share {share.name}: a lending limit of {', '.join(without_limit)} needs a capacity limit "
                f"of that type"
            )
        if share.strategy not in QuotaShare.Strategy.values:
            errors.setdefault(whatif_share_key(share.name, "strategy"), []).append(
                f"share {share.name}: strategy must be one of {', '.join(QuotaShare.Strategy.values)}"
            )
        for name, value in (
            ("fair_share_weight", share.fair_share_weight),
            ("budget_gpu_hours", share.budget_gpu_hours),
            ("budget_period", share.budget_period),
            ("budget_scope", share.budget_scope),
        ):
            for message in _model_field_errors(QuotaShare, rows[share.name], name, value):
                errors.setdefault(whatif_share_key(share.name, name), []).append(
                    f"share {share.name}: {message}"
                )
        limits[share.name] = [
            rules.LimitInput(types[t], n, share.lending_limits.get(t))
            for t, n in share.limits.items()
            if t in types
        ]
    totals: dict[int, int] = {}
    for inputs in limits.values():
        for limit in inputs:
            totals[limit.instance_type.pk] = totals.get(limit.instance_type.pk, 0) + limit.max_capacity
    for share in shares:
        if errors.get(whatif_share_key(share.name, "strategy")):
            continue
        own = {limit.instance_type.pk: limit.max_capacity for limit in limits[share.name]}
        try:
            rules.validate_quota_share(
                share=rows[share.name],
                job_queue=job_queue,
                name=share.name,
                strategy=share.strategy,
                borrow_limit=share.borrow_limit,
                limits=limits[share.name],
                other_limits={type_id: total - own.get(type_id, 0) for type_id, total in totals.items()},
            )
        except ValidationError as exc:
            for key, messages in exc.message_dict.items():
                # `capacity_limits[0].lending_limit` names a position in a list the proposal keys by type.
                field_name = "lending_limits" if key.endswith(".lending_limit") else key
                errors.setdefault(whatif_share_key(share.name, field_name), []).extend(
                    f"share {share.name}: {message}" for message in messages
                )
    if not errors and shares == list(current.values()) and queue_settings == current_queue:
        errors["__all__"] = [
            "the proposal is the queue's configuration as it is: change at least one setting of a share "
            "or of the queue"
        ]
    return shares, queue_settings, errors


def _whatif_window_errors(
    *, job_queue: JobQueue, source: str, start, days: float | None, now
) -> tuple[Any, rules.Errors]:
    """The window's end (cut at `now` for history) and what is wrong with the source and window."""
    errors: rules.Errors = {}
    if source not in WhatIfRun.Source.values:
        errors["source"] = [f"source must be one of {', '.join(WhatIfRun.Source.values)}"]
    if days is None or not WHATIF_MIN_DAYS <= days <= WHATIF_MAX_DAYS:
        errors["days"] = [
            f"a window lasts from one hour ({WHATIF_MIN_DAYS:.2f} days) to {WHATIF_MAX_DAYS:g} days"
        ]
    if start is None or timezone.is_naive(start):
        errors["start"] = ["give the window's start as a date and time in UTC"]
    if errors:
        return None, errors
    end = start + timedelta(days=days)
    if source == WhatIfRun.Source.HISTORY:
        if start >= now:
            errors["start"] = ["the window starts in the future; recorded history ends now"]
            return None, errors
        end = min(end, now)
        if not Job.objects.filter(job_queue=job_queue, created_at__gte=start, created_at__lt=end).exists():
            errors["start"] = [
                f"queue {job_queue.name} has no jobs submitted between "
                f"{start:%Y-%m-%d %H:%M} and {end:%Y-%m-%d %H:%M} UTC: choose a window "
                f"with recorded jobs"
            ]
        return end, errors
    trace = replay_sources.philly_trace()
    if not trace.exists() or not replay_sources.philly_vc_file(trace).exists():
        errors["source"] = [
            "the Philly trace is not installed: set REPLAY_TRACE to its philly.csv, with philly_vc.csv beside it"
        ]
        return None, errors
    first, last = replay_sources.philly_trace_span(trace)
    if end <= first or start > last:
        errors["start"] = [
            f"the Philly trace covers {first:%Y-%m-%d} .. {last:%Y-%m-%d}: choose a window inside it"
        ]
    return end, errors


@transaction.atomic
def whatif_run_start(
    *,
    job_queue: JobQueue,
    proposal: Sequence[ShareProposal],
    source: str,
    start,
    days: float | None,
    actor: AbstractBaseUser | None,
    queue_proposal: QueueProposal | None = None,
) -> WhatIfRun:
    """Check a what-if whole and queue it; its task is enqueued once the transaction commits.

    Raises one ValidationError naming every field at fault: `shares[<name>].<field>` for a share's proposed
    values (the rules a share change must pass, so a proposal that could not be applied is refused here),
    `idle_capacity_assignment` and `preemption_min_runtime_seconds` for the queue's (`queue_proposal`, None:
    as they are), `source`, `start`, `days`, `job_queue`, or `__all__`.
    """
    now = timezone.now()
    try:
        live = replay_sources.live_configuration(job_queue)
    except ConfigurationError:
        message = f"queue {job_queue.name} has no quota shares: there is nothing to compare"
        raise ValidationError({"job_queue": [message]}) from None
    baseline = replay_sources.configuration_mapping(live)
    baseline["name"] = "current"
    shares, queue_settings, errors = _whatif_proposal_errors(
        job_queue=job_queue, baseline=baseline, proposal=proposal, queue_proposal=queue_proposal
    )
    end, window_errors = _whatif_window_errors(
        job_queue=job_queue, source=source, start=start, days=days, now=now
    )
    for key, messages in window_errors.items():
        errors.setdefault(key, []).extend(messages)
    if errors:
        raise ValidationError(errors)
    run = WhatIfRun.objects.create(
        job_queue=job_queue,
        created_by=actor if getattr(actor, "pk", None) else None,
        created_at=now,
        source=source,
        window_start=start,
        window_days=days,
        window_end=end,
        baseline=baseline,
        proposal=[share.as_mapping() for share in shares],
        queue_proposal=queue_settings.as_mapping(),
    )
    _whatif_enqueue(run.pk)
    return run


def _whatif_enqueue(run_id: int) -> None:
    # Found by name: importing `whatif.tasks` would import this module back.
    def enqueue() -> None:
        run_whatif = task_named("whatif.tasks.run_whatif")
        try:
            run_whatif.delay(run_id)
        except Exception as exc:  # kombu.exceptions.OperationalError, or whatever the transport raises
            logger.warning("what-if %s not enqueued: the broker is unavailable (%s)", run_id, exc)
            WhatIfRun.objects.filter(pk=run_id, status=WhatIfRun.Status.QUEUED).update(
                status=WhatIfRun.Status.FAILED,
                finished_at=timezone.now(),
                error=f"the task queue is unavailable ({exc}); start the what-if again",
            )

    transaction.on_commit(enqueue)


def whatif_proposed_configuration(run: WhatIfRun) -> dict[str, Any]:
    """The run's baseline with its shares' and queue's values replaced by the proposal (as a configuration
    mapping)."""
    proposed = {item["name"]: item for item in run.proposal}
    shares = [{**share, **proposed.get(share["name"], {})} for share in run.baseline["shares"]]
    return {**run.baseline, **run.queue_proposal, "name": "proposed", "shares": shares}


class _WhatIfProgress:
    """The simulator's progress callbacks for a run: both replays mapped onto 0..1, written at most every
    WHATIF_PROGRESS_EVERY_SECONDS, and a stop once the run has used its time."""

    def __init__(self, run_id: int):
        self.run_id = run_id
        self.written = 0.0
        self.deadline = time.monotonic() + settings.WHATIF_TIME_LIMIT_SECONDS

    def part(self, low: float, high: float):
        return lambda fraction: self.report(low + (high - low) * fraction)

    def report(self, fraction: float) -> None:
        now = time.monotonic()
        if now > self.deadline:
            raise WhatIfStopped(
                f"the replay took longer than {settings.WHATIF_TIME_LIMIT_SECONDS} s "
                f"(WHATIF_TIME_LIMIT_SECONDS) and was stopped: choose a shorter window"
            )
        if now - self.written < WHATIF_PROGRESS_EVERY_SECONDS:
            return
        self.written = now
        # 1.0 is written with the result: a run at 100% is a run with something to show.
        WhatIfRun.objects.filter(pk=self.run_id, status=WhatIfRun.Status.RUNNING).update(
            progress=min(max(fraction, 0.0), 0.99), heartbeat_at=timezone.now()
        )


def _whatif_replays(run: WhatIfRun, progress: _WhatIfProgress):
    current = configuration_from_mapping(
        run.baseline, default_name="current", bases={}, where=f"queue {run.job_queue.name} as it was"
    )
    proposed = configuration_from_mapping(
        whatif_proposed_configuration(run), default_name="proposed", bases={}, where="the proposal"
    )
    if run.source == WhatIfRun.Source.HISTORY:
        jobs = replay_sources.history_jobs(queue=run.job_queue, start=run.window_start, end=run.window_end)
        jobs_for = lambda config: jobs  # noqa: E731 - the same recorded jobs for both configurations
        credit = ""
    else:
        window = replay_sources.read_philly_window(
            replay_sources.philly_trace(), start=run.window_start, end=run.window_end
        )
        if not window.rows:
            raise ValueError(
                f"the Philly trace has no jobs submitted between "
                f"{run.window_start:%Y-%m-%d %H:%M} and {run.window_end:%Y-%m-%d %H:%M} UTC"
            )
        jobs_for = lambda config: replay_sources.philly_jobs_for_queue(window, config)  # noqa: E731
        credit = PHILLY_CREDIT
    halves = {"current": (0.0, 0.5), "proposed": (0.5, 1.0)}
    replays = replay_configurations(
        [current, proposed],
        jobs_for,
        start=run.window_start.timestamp(),
        end=run.window_end.timestamp(),
        progress=lambda name: progress.part(*halves[name]),
        pass_interval=WHATIF_PASS_INTERVAL_SECONDS,
    )
    return replays, credit


def _whatif_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """What the page shows of a replay's metrics: the series go to the charts, not the row."""
    return {key: value for key, value in metrics.items() if key != "series"}


def whatif_run_execute(*, run_id: int) -> WhatIfRun | None:
    """Replay the run's window against its baseline and its proposal, writing progress as it goes; store both
    metrics and the charts at once (DONE), or FAILED with the reason, never half a result.

    The run is claimed by a conditional UPDATE, so two workers given the same run never both replay it;
    a RUNNING run whose worker went silent for WHATIF_HEARTBEAT_TIMEOUT may be taken over. Returns the run,
    or None when it was not this worker's to run.
    """
    now = timezone.now()
    claimable = models.Q(status=WhatIfRun.Status.QUEUED) | models.Q(
        status=WhatIfRun.Status.RUNNING, heartbeat_at__lt=now - WHATIF_HEARTBEAT_TIMEOUT
    )
    claimed = WhatIfRun.objects.filter(claimable, pk=run_id).update(
        status=WhatIfRun.Status.RUNNING, progress=0, heartbeat_at=now, error=""
    )
    if not claimed:
        return None
    run = WhatIfRun.objects.select_related("job_queue").get(pk=run_id)
    outcome: dict[str, Any]
    try:
        replays, credit = _whatif_replays(run, _WhatIfProgress(run_id))
        charts = whatif_charts.chart_svgs(replays, credit=credit)
        current, proposed = (_whatif_metrics(replay.metrics) for replay in replays)
        outcome = {
            "status": WhatIfRun.Status.DONE,
            "progress": 1.0,
            "error": "",
            "charts": charts,
            "result": {"current": current, "proposed": proposed, "credit": credit},
        }
    except (ConfigurationError, TraceError, InvariantViolation, WhatIfStopped, ValueError, OSError) as exc:
        outcome = {"status": WhatIfRun.Status.FAILED, "error": str(exc), "result": {}, "charts": {}}
    except Exception as exc:
        logger.exception("what-if %s failed", run_id)
        outcome = {
            "status": WhatIfRun.Status.FAILED,
            "result": {},
            "charts": {},
            "error": f"the replay failed unexpectedly ({type(exc).__name__}: {exc}); see the worker's log",
        }
    WhatIfRun.objects.filter(pk=run_id, status=WhatIfRun.Status.RUNNING).update(
        finished_at=timezone.now(), heartbeat_at=timezone.now(), **outcome
    )
    return WhatIfRun.objects.get(pk=run_id)


def whatif_apply_steps(
    *,
    current: dict[str, dict[str, int]],
    proposed: dict[str, dict[str, int]],
    capacity: dict[str, int],
    changed: Sequence[str],
) -> list[tuple[str, dict[str, int], bool]]:
    """The order in which to change shares so that every step keeps the sum of limits within capacity
    (behaviour.md#capacity-what-a-share-may-hold): [(share, limits, final)]. A share whose new limits fit beside the
    others' goes as soon as they fit (those that give capacity up go first). Shares that only fit after each other (one
    lowers type A and raises B, another the reverse) are first lowered to what both their old and new limits allow
    (`final` False), then raised; each step stays within capacity because no lowered limit is above its new one."""
    limits = {name: dict(value) for name, value in current.items()}

    def fits(name: str, new: dict[str, int]) -> bool:
        for type_, count in new.items():
            others = sum(value.get(type_, 0) for other, value in limits.items() if other != name)
            if others + count > capacity.get(type_, 0):
                return False
        return True

    steps: list[tuple[str, dict[str, int], bool]] = []
    pending = list(changed)
    while pending:
        ready = [name for name in pending if fits(name, proposed[name])]
        if not ready:
            break
        for name in ready:
            if fits(name, proposed[name]):
                limits[name] = dict(proposed[name])
                steps.append((name, limits[name], True))
                pending.remove(name)
    for name in pending:
        lowered = {type_: min(count, proposed[name].get(type_, 0)) for type_, count in limits[name].items()}
        lowered = {type_: count for type_, count in lowered.items() if count > 0}
        if lowered and lowered != limits[name]:
            limits[name] = lowered
            steps.append((name, lowered, False))
    for name in pending:
        limits[name] = dict(proposed[name])
        steps.append((name, limits[name], True))
    return steps


@transaction.atomic
def whatif_apply(*, run: WhatIfRun, actor: AbstractBaseUser | None) -> list[str]:
    """Apply a finished what-if's proposal to its queue through `quota_share_update` (the rules of a share
    change, a CONFIG_CHANGED event per share) and the queue's settings through `job_queue_update`, all or
    nothing, and record that it was applied. Returns the names of the shares changed, after
    `queue <name>` when the queue's settings changed.

    Refused (Conflict) unless the run is DONE and not applied yet, and the queue is still configured as it
    was when the run started: a result computed for another configuration says nothing about this one.
    Holds the queue's row lock from the comparison to the last write.
    """
    job_queue = queue_lock(run.job_queue_id)
    run = WhatIfRun.objects.select_for_update().get(pk=run.pk)
    if run.status != WhatIfRun.Status.DONE:
        raise Conflict(f"what-if #{run.pk} is {run.status.lower()}: only a finished run can be applied")
    if run.applied_at is not None:
        who = run.applied_by.get_username() if run.applied_by else "someone"
        raise Conflict(
            f"what-if #{run.pk} was already applied by {who} at {run.applied_at:%Y-%m-%d %H:%M} UTC"
        )
    changes = replay_sources.changes_since(job_queue, run.baseline)
    if changes:
        raise Conflict(
            f"queue {job_queue.name} has changed since what-if #{run.pk} ran "
            f"({'; '.join(changes)}), so its result no longer describes the queue: "
            f"run the what-if again"
        )
    baseline = {share["name"]: ShareProposal.from_mapping(share) for share in run.baseline["shares"]}
    proposal = {item["name"]: ShareProposal.from_mapping(item) for item in run.proposal}
    changed = [name for name in baseline if name in proposal and proposal[name] != baseline[name]]
    queue_before = QueueProposal.from_mapping(run.baseline)
    queue_after = QueueProposal.from_mapping(run.queue_proposal) if run.queue_proposal else queue_before
    steps = whatif_apply_steps(
        current={name: share.limits for name, share in baseline.items()},
        proposed={name: item.limits for name, item in proposal.items()},
        capacity=run.baseline["capacity"],
        changed=changed,
    )
    shares = {share.name: share for share in QuotaShare.objects.filter(job_queue=job_queue)}
    types = {t.name: t for t in InstanceType.objects.filter(name__in=run.baseline["capacity"])}
    try:
        if queue_after != queue_before:
            job_queue_update(job_queue=job_queue, changes=queue_after.as_mapping(), actor=actor)
        for name, limits, final in steps:
            # A step on the way keeps the share's strategy, so it keeps its lending limits too, cut to the
            # lowered limit; the last step sets the proposed ones.
            lending = proposal[name].lending_limits if final else baseline[name].lending_limits
            quota_share_update(
                share=shares[name],
                changes={key: getattr(proposal[name], key) for key in WHATIF_SHARE_FIELDS} if final else {},
                limits=[
                    rules.LimitInput(
                        types[type_],
                        count,
                        min(lending[type_], count) if lending.get(type_) is not None else None,
                    )
                    for type_, count in sorted(limits.items())
                ],
                actor=actor,
            )
    except ValidationError as exc:
        # Checked when the run started and the queue has not changed since: only a rule changed meanwhile.
        raise Conflict(
            f"the proposal could not be applied ({'; '.join(exc.messages)}); nothing was changed"
        ) from None
    shares_changed = list(changed)
    if queue_after != queue_before:
        # Share names have no space (`[A-Za-z0-9_-]`), so the queue's entry cannot be taken for one.
        changed = [f"queue {job_queue.name}", *changed]
    now = timezone.now()
    who = getattr(actor, "username", None) or "system"
    Event.objects.create(
        kind=EventKind.CONFIG_CHANGED,
        job_queue=job_queue,
        actor=actor if getattr(actor, "pk", None) else None,
        message=f"{who} applied what-if #{run.pk} to queue {job_queue.name}: changed {', '.join(changed)}",
        data={
            "object": WhatIfRun._meta.label,
            "id": run.pk,
            "action": "applied",
            "shares": shares_changed,
            "queue": queue_after != queue_before,
        },
        created_at=now,
    )
    run.applied_at = now
    run.applied_by = actor if getattr(actor, "pk", None) else None
    run.save(update_fields=["applied_at", "applied_by"])
    return changed
