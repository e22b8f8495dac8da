"""Validation rules that span rows (behaviour.md: what there is, capacity, submission), in one place.

The admin, the pages' forms, the API serializers and the services all call these. Each raises Django's
`ValidationError` with a dict keyed by the field at fault (`capacity_limits`, `instance_preferences[2].training_plan`),
so every caller can show the message next to the right field.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db.models import Sum

import engine
from engine import ceilings, submission
from engine.invariants import limits_fit_capacity
from engine.submission import NeverRuns, preference_count_allowed, repeated_entries
from scheduling.models import (
    MAX_PAYLOAD_BYTES,
    MAX_PREFERENCES,
    MAX_SHARE_LIMITS,
    MAX_SHARES_PER_QUEUE,
    EnvironmentCapacity,
    InstanceType,
    JobQueue,
    QuotaShare,
    ServiceEnvironment,
    ShareCapacityLimit,
    State,
    TrainingPlan,
)

Errors = dict[str, list[str]]


def _add(errors: Errors, field: str, message: str) -> None:
    errors.setdefault(field, []).append(message)


def _raise_if(errors: Errors) -> None:
    if errors:
        raise ValidationError(errors)


# --- capacity arithmetic ---------------------------------------------------------------------------------


def environment_capacity(job_queue: JobQueue) -> dict[int, int]:
    """instance_type id -> on-demand max_capacity of the queue's environment."""
    return dict(
        EnvironmentCapacity.objects.filter(
            service_environment_id=job_queue.service_environment_id
        ).values_list("instance_type_id", "max_capacity")
    )


def share_limit_sums(job_queue: JobQueue, *, exclude_share_id: int | None = None) -> dict[int, int]:
    """instance_type id -> sum of the limits of the queue's shares (all states: a limit is a guarantee)."""
    rows = ShareCapacityLimit.objects.filter(quota_share__job_queue=job_queue)
    if exclude_share_id is not None:
        rows = rows.exclude(quota_share_id=exclude_share_id)
    return {
        row["instance_type"]: row["total"]
        for row in rows.values("instance_type").annotate(total=Sum("max_capacity"))
    }


# --- quota shares ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LimitInput:
    instance_type: InstanceType
    max_capacity: int
    lending_limit: int | None = None  # None: the share lends all of its idle capacity of the type


def validate_quota_share(
    *,
    share: QuotaShare | None,
    job_queue: JobQueue,
    name: str,
    strategy: str,
    borrow_limit: int,
    limits: Sequence[LimitInput],
    other_limits: dict[int, int] | None = None,
) -> None:
    """A share's limits (1-5, one per type, >= 1) fit in the environment beside the other shares' (behaviour.md (what
    there is, capacity)).

    `other_limits` (instance type id -> the other shares' limits summed) stands for the database's when
    several shares are checked as they would be once changed together (a what-if proposal).
    """
    errors: Errors = {}
    share_id = share.pk if share is not None else None
    if share_id is None or share.job_queue_id != job_queue.pk:
        count = QuotaShare.objects.filter(job_queue=job_queue).count()
        if count >= MAX_SHARES_PER_QUEUE:
            _add(
                errors,
                "job_queue",
                f"queue {job_queue.name} already has {count} quota shares; "
                f"at most {MAX_SHARES_PER_QUEUE} are allowed",
            )
    if QuotaShare.objects.filter(job_queue=job_queue, name=name).exclude(pk=share_id).exists():
        _add(errors, "name", f"queue {job_queue.name} already has a quota share named {name}")
    if borrow_limit < -1:
        _add(errors, "borrow_limit", "borrow_limit is a percentage >= 0, or -1 for unlimited")
    elif borrow_limit != -1 and strategy != QuotaShare.Strategy.LEND_AND_BORROW:
        _add(
            errors,
            "borrow_limit",
            f"borrow_limit applies only to LEND_AND_BORROW shares ({strategy} never borrows): leave it at -1",
        )
    if not 1 <= len(limits) <= MAX_SHARE_LIMITS:
        _add(
            errors,
            "capacity_limits",
            f"a quota share needs 1 to {MAX_SHARE_LIMITS} capacity limits, got {len(limits)}",
        )
    repeated = [t for t, n in Counter(limit.instance_type.name for limit in limits).items() if n > 1]
    if repeated:
        _add(
            errors, "capacity_limits", f"instance type {', '.join(sorted(repeated))} is listed more than once"
        )
    capacity = environment_capacity(job_queue)
    others = (
        other_limits if other_limits is not None else share_limit_sums(job_queue, exclude_share_id=share_id)
    )
    for index, limit in enumerate(limits):
        _check_lending_limit(errors, index, limit, strategy)
        type_ = limit.instance_type
        if limit.max_capacity < 1:
            _add(errors, "capacity_limits", f"{type_.name}: max_capacity must be at least 1")
            continue
        available = capacity.get(type_.pk)
        if available is None:
            _add(
                errors,
                "capacity_limits",
                f"{type_.name}: the environment of queue {job_queue.name} offers no {type_.name} capacity",
            )
            continue
        taken = others.get(type_.pk, 0)
        if not limits_fit_capacity(taken + limit.max_capacity, available):
            _add(
                errors,
                "capacity_limits",
                f"{type_.name}: limits would total {taken + limit.max_capacity} but the environment has "
                f"{available} (other shares hold {taken}, so at most {max(0, available - taken)} is left)",
            )
    _raise_if(errors)


def _check_lending_limit(errors: Errors, index: int, limit: LimitInput, strategy: str) -> None:
    """A lending limit is 0..max_capacity, and only for a share that lends (behaviour.md#what-there-is)."""
    if limit.lending_limit is None:
        return
    field = f"capacity_limits[{index}].lending_limit"
    name = limit.instance_type.name
    if strategy == QuotaShare.Strategy.RESERVE:
        _add(
            errors,
            field,
            f"{name}: a RESERVE share lends nothing, so it takes no lending_limit: leave it empty "
            f"or choose LEND or LEND_AND_BORROW",
        )
    elif not 0 <= limit.lending_limit <= limit.max_capacity:
        _add(
            errors,
            field,
            f"{name}: lending_limit {limit.lending_limit} must be between 0 and max_capacity "
            f"{limit.max_capacity}",
        )


def validate_environment_capacity(*, job_queue: JobQueue | None, capacities: dict[InstanceType, int]) -> None:
    """An environment's capacity per type stays at or above the sum of its queue's share limits
    (behaviour.md#capacity-what-a-share-may-hold)."""
    errors: Errors = {}
    for type_, maximum in capacities.items():
        if maximum < 0:
            _add(errors, "capacity_limits", f"{type_.name}: max_capacity cannot be negative")
    if job_queue is not None:
        sums = share_limit_sums(job_queue)
        by_id = {type_.pk: (type_, maximum) for type_, maximum in capacities.items()}
        for type_id, total in sorted(sums.items()):
            type_, maximum = by_id.get(type_id, (None, 0))
            if not limits_fit_capacity(total, maximum):
                name = type_.name if type_ else InstanceType.objects.get(pk=type_id).name
                _add(
                    errors,
                    "capacity_limits",
                    f"{name}: the shares of queue {job_queue.name} hold limits totalling {total}, so capacity "
                    f"cannot be {maximum}; lower those limits first",
                )
    _raise_if(errors)


# --- training plans --------------------------------------------------------------------------------------


def validate_training_plan(
    *,
    plan: TrainingPlan | None,
    job_queue: JobQueue,
    instance_count: int,
    start_time: datetime | None,
    end_time: datetime | None,
    quota_shares: Iterable[QuotaShare],
) -> None:
    """A plan has a positive count, ends after it starts and is open only to shares of its own queue."""
    errors: Errors = {}
    if instance_count is not None and instance_count < 1:
        _add(errors, "instance_count", "a training plan reserves at least 1 instance")
    if start_time and end_time and end_time <= start_time:
        _add(errors, "end_time", "end_time must be after start_time")
    foreign = sorted(share.name for share in quota_shares if share.job_queue_id != job_queue.pk)
    if foreign:
        _add(errors, "quota_shares", f"share {', '.join(foreign)} is not in queue {job_queue.name}")
    _raise_if(errors)


# --- jobs ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreferenceInput:
    instance_type: InstanceType
    instance_count: int
    training_plan: TrainingPlan | None = None


def most_held(
    *,
    share: QuotaShare,
    instance_type_id: int,
    capacity: dict[int, int],
    limits_by_share: dict[int, dict[int, int]],
    strategies: dict[int, str],
    lending_by_share: dict[int, dict[int, int]] | None = None,
) -> tuple[int, str]:
    """The most of a type the share could ever hold on demand (`ceilings.most_ever_held`), and why."""
    own = limits_by_share.get(share.pk, {}).get(instance_type_id, 0)
    total = capacity.get(instance_type_id, 0)
    lending_by_share = lending_by_share or {}
    reserved_by_others = sum(
        ceilings.reserved_capacity(
            strategies.get(share_id, ""),
            limits.get(instance_type_id, 0),
            lending_by_share.get(share_id, {}).get(instance_type_id),
        )
        for share_id, limits in limits_by_share.items()
        if share_id != share.pk
    )
    lendable = ceilings.lendable_beside(total, reserved_by_others)
    most = ceilings.most_ever_held(share.strategy, own, share.borrow_limit, lendable=lendable)
    if share.strategy != QuotaShare.Strategy.LEND_AND_BORROW:
        return most, f"limit {own}, {share.strategy} cannot borrow"
    cap = ceilings.borrow_cap(own, share.borrow_limit)
    if cap is None:
        return most, (
            f"limit {own} plus borrowing, and {total - lendable} of {total} are kept by other shares"
        )
    if cap <= lendable:
        return most, f"limit {own} plus borrow limit {share.borrow_limit}%"
    return most, f"{total - lendable} of {total} are kept by other shares"


def validate_job_target(*, job_queue: JobQueue, quota_share: QuotaShare) -> None:
    """The queue and share accept jobs: both enabled, the share in that queue (behaviour.md#a-jobs-life)."""
    errors: Errors = {}
    if not job_queue.enabled:
        _add(errors, "job_queue", f"queue {job_queue.name} is disabled and accepts no jobs")
    if quota_share.job_queue_id != job_queue.pk:
        _add(errors, "quota_share", f"share {quota_share.name} is not in queue {job_queue.name}")
    elif quota_share.state != State.ENABLED:
        _add(errors, "quota_share", f"share {quota_share.name} is disabled and accepts no jobs")
    _raise_if(errors)


def validate_preferences(
    *, job_queue: JobQueue, quota_share: QuotaShare, entries: Sequence[PreferenceInput], now: datetime
) -> None:
    """1-5 entries, no repeated (type, plan) pair, and every entry able to run in principle
    (behaviour.md#a-jobs-life)."""
    errors: Errors = {}
    field = "instance_preferences"
    if not preference_count_allowed(len(entries)):
        _add(errors, field, f"give 1 to {MAX_PREFERENCES} instance preferences, got {len(entries)}")
        _raise_if(errors)
    capacity = environment_capacity(job_queue)
    limits_by_share: dict[int, dict[int, int]] = {}
    lending_by_share: dict[int, dict[int, int]] = {}
    for share_id, type_id, maximum, lending_limit in ShareCapacityLimit.objects.filter(
        quota_share__job_queue=job_queue
    ).values_list("quota_share_id", "instance_type_id", "max_capacity", "lending_limit"):
        limits_by_share.setdefault(share_id, {})[type_id] = maximum
        if lending_limit is not None:
            lending_by_share.setdefault(share_id, {})[type_id] = lending_limit
    strategies = dict(QuotaShare.objects.filter(job_queue=job_queue).values_list("id", "strategy"))
    shares_of_plan: dict[int, set[int]] = {}
    for plan_id, share_id in TrainingPlan.quota_shares.through.objects.filter(
        trainingplan__job_queue=job_queue
    ).values_list("trainingplan_id", "quotashare_id"):
        shares_of_plan.setdefault(plan_id, set()).add(share_id)
    repeats = repeated_entries(
        [
            (entry.instance_type.pk, entry.training_plan.pk if entry.training_plan else None)
            for entry in entries
        ]
    )
    for index, entry in enumerate(entries):
        at = f"{field}[{index}]"
        type_ = entry.instance_type
        plan = entry.training_plan
        if index in repeats:
            where = f"on plan {plan.name}" if plan else "on-demand"
            _add(
                errors,
                at,
                f"repeats entry {repeats[index]} ({type_.name} {where}); each (instance type, training "
                f"plan) pair may appear once",
            )
            continue
        if entry.instance_count < 1:
            _add(errors, f"{at}.instance_count", "instance_count must be at least 1")
            continue
        if plan is not None:
            if plan.job_queue_id != job_queue.pk:
                _add(errors, f"{at}.training_plan", f"plan {plan.name} belongs to another queue")
                continue
            problem = submission.plan_entry_never_runs(
                engine.Entry(type_.name, entry.instance_count, plan.name),
                _engine_plan(plan, type_, shares_of_plan.get(plan.pk, ())),
                share_id=quota_share.pk,
                now=now,
            )
            if problem == NeverRuns.PLAN_OF_OTHER_TYPE:
                _add(
                    errors,
                    f"{at}.training_plan",
                    f"plan {plan.name} reserves {plan.instance_type.name}, not {type_.name}",
                )
            elif problem == NeverRuns.PLAN_ENDED:
                _add(
                    errors,
                    f"{at}.training_plan",
                    f"plan {plan.name} expired at {plan.end_time:%Y-%m-%d %H:%M} UTC",
                )
            elif problem == NeverRuns.PLAN_CLOSED_TO_SHARE:
                _add(
                    errors, f"{at}.training_plan", f"plan {plan.name} is not open to share {quota_share.name}"
                )
            elif problem == NeverRuns.ABOVE_PLAN:
                _add(
                    errors,
                    f"{at}.instance_count",
                    f"{type_.name} x{entry.instance_count} can never run on plan {plan.name}, which reserves "
                    f"{plan.instance_count}",
                )
            continue
        total = capacity.get(type_.pk)
        ceiling, why = most_held(
            share=quota_share,
            instance_type_id=type_.pk,
            capacity=capacity,
            limits_by_share=limits_by_share,
            strategies=strategies,
            lending_by_share=lending_by_share,
        )
        problem = submission.on_demand_entry_never_runs(
            engine.Entry(type_.name, entry.instance_count), capacity=total, most_held=ceiling
        )
        if problem == NeverRuns.TYPE_NOT_OFFERED:
            _add(
                errors,
                f"{at}.instance_type",
                f"the environment of queue {job_queue.name} offers no {type_.name} capacity",
            )
        elif problem == NeverRuns.ABOVE_CAPACITY:
            _add(
                errors,
                f"{at}.instance_count",
                f"{type_.name} x{entry.instance_count} can never run: the environment has {total}",
            )
        elif problem == NeverRuns.ABOVE_SHARE:
            _add(
                errors,
                f"{at}.instance_count",
                f"{type_.name} x{entry.instance_count} can never run: share {quota_share.name} may hold at "
                f"most {ceiling} ({why})",
            )
    _raise_if(errors)


def _engine_plan(plan: TrainingPlan, entry_type: InstanceType, share_ids: Iterable[int]) -> engine.Plan:
    """A plan as `engine.submission` reads it; its type's name is read only when it is not the entry's."""
    same_type = plan.instance_type_id == entry_type.pk
    return engine.Plan(
        id=plan.pk,
        name=plan.name,
        instance_type=entry_type.name if same_type else plan.instance_type.name,
        instance_count=plan.instance_count,
        start_time=plan.start_time,
        end_time=plan.end_time,
        share_ids=frozenset(share_ids),
    )


# JSON from a client (an API body, the submit form's payload) nests at most this deep. Python's decoder turns very
# deep nesting into a RecursionError, and JSON decoded near the recursion limit cannot be encoded again for the
# database or a response; nothing quotaportal takes nests deeply.
MAX_JSON_DEPTH = 32
JSON_TOO_DEEP = f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels"


def json_depth(value: object) -> int:
    """Nesting depth of decoded JSON (a scalar is 0), walked without recursion; the walk stops once past
    MAX_JSON_DEPTH."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if deepest > MAX_JSON_DEPTH:
            break
        stack.extend((child, depth) for child in children)
    return deepest


MAX_PAYLOAD_DEPTH = 16
_JSONB_UNSAFE_TEXT = re.compile("[\x00\ud800-\udfff]")


def validate_payload(payload: object) -> None:
    """A payload is a JSON object of at most 64 KiB once encoded, that PostgreSQL's jsonb can store."""
    if not isinstance(payload, dict):
        raise ValidationError({"payload": ["payload must be a JSON object"]})
    problem = _payload_problem(payload)
    if problem:
        raise ValidationError({"payload": [problem]})
    size = len(json.dumps(payload, separators=(",", ":")).encode())
    if size > MAX_PAYLOAD_BYTES:
        raise ValidationError(
            {"payload": [f"payload is {size} bytes encoded; the limit is {MAX_PAYLOAD_BYTES}"]}
        )


PAYLOAD_COMMAND_EXAMPLE = '{"command": ["python3", "train.py", "--epochs", "3"], "env": {"SEED": "1"}}'


def payload_requirement(environment: ServiceEnvironment) -> str:
    """What a job's payload must hold on this environment, in a sentence for the submit form."""
    if environment.executor == ServiceEnvironment.Executor.EXTERNAL:
        return (
            f"Environment {environment.name} runs jobs as real processes: the payload needs "
            "payload.command, the program and its arguments as a list of strings, and may give "
            f"payload.env, variables as strings; for example {PAYLOAD_COMMAND_EXAMPLE}."
        )
    return (
        f"Environment {environment.name} is simulated: it runs nothing, so any JSON object will do "
        "(duration_seconds sets how long the job runs)."
    )


def validate_payload_runnable(*, payload: dict, environment: ServiceEnvironment) -> None:
    """A job its environment's executor cannot run is refused here, never placed: an external executor (the
    reference agent) runs `payload.command`, an argv list of strings, with `payload.env`'s variables."""
    if environment.executor != ServiceEnvironment.Executor.EXTERNAL or not isinstance(payload, dict):
        return
    errors: Errors = {}
    command = payload.get("command")
    where = f"environment {environment.name} runs jobs with an external executor"
    if command is None:
        _add(
            errors,
            "payload.command",
            f"payload.command is required: {where}, which runs payload.command as a process "
            f"(a list of strings, e.g. {PAYLOAD_COMMAND_EXAMPLE})",
        )
    elif not (isinstance(command, list) and command and all(isinstance(arg, str) and arg for arg in command)):
        _add(
            errors,
            "payload.command",
            "payload.command must be a non-empty list of non-empty strings, the program and its arguments "
            '(e.g. ["python3", "train.py"]): a single string is not split into arguments',
        )
    env = payload.get("env")
    if env is not None and not (
        isinstance(env, dict) and all(isinstance(value, str) for value in env.values())
    ):
        _add(
            errors, "payload.env", 'payload.env must be an object of strings to strings (e.g. {"SEED": "1"})'
        )
    _raise_if(errors)


def _payload_problem(payload: dict) -> str | None:
    """What jsonb would refuse (NUL, unpaired surrogates, NaN and infinities) or too deep a nesting; walked
    without recursion, so no depth can overflow the stack."""
    stack = [(payload, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_PAYLOAD_DEPTH:
                return f"payload is nested deeper than {MAX_PAYLOAD_DEPTH} levels"
            items = value.items() if isinstance(value, dict) else ((None, item) for item in value)
            for key, item in items:
                if key is not None:
                    stack.append((key, depth))
                stack.append((item, depth + 1))
        elif isinstance(value, str) and (found := _JSONB_UNSAFE_TEXT.search(value)):
            if found.group() == "\x00":
                return "payload text may not contain the NUL character (\\u0000)"
            return "payload text must be valid Unicode (no unpaired surrogate)"
        elif isinstance(value, float) and not math.isfinite(value):
            return "payload numbers must be finite (no NaN or Infinity)"
    return None
