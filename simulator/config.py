"""Share configurations for a replay: capacity per type, quota shares and training plans, as plain data.

A configuration is what `simulate` schedules against. It comes from the database (`replay --config live`,
built by the command), from a YAML or JSON file (`load_configurations`, schema in README "Replay and what-if
simulation"), or from `simulator.philly` (one share per Philly virtual cluster). Times are POSIX
seconds (UTC) throughout the simulator.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from engine import (
    UNLIMITED,
    BudgetPeriod,
    BudgetScope,
    Entry,
    IdleCapacityAssignment,
    Ordering,
    Plan,
    Strategy,
)
from engine.ceilings import lendable_beside, most_ever_held, reserved_capacity
from engine.invariants import limits_fit_capacity
from engine.submission import (
    NeverRuns,
    on_demand_entry_never_runs,
    plan_entry_never_runs,
)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
MAX_SHARES = 20
MAX_SHARE_LIMITS = 5
DEFAULT_PLAN_DRAIN_SECONDS = 1800

# GPUs per instance of the types the replay knows by name; a configuration may add or override them.
KNOWN_GPUS: dict[str, int] = {
    "ml.g5.xlarge": 1,
    "ml.g5.2xlarge": 1,
    "ml.g5.12xlarge": 4,
    "ml.g5.48xlarge": 8,
    "ml.g6e.48xlarge": 8,
    "ml.p4d.24xlarge": 8,
    "ml.p4de.24xlarge": 8,
    "ml.p5.48xlarge": 8,
    "ml.p5e.48xlarge": 8,
    "ml.trn1.32xlarge": 16,
}


class ConfigurationError(ValueError):
    """A configuration file or object that breaks a rule of behaviour.md (what there is, capacity), named by where it is
    wrong."""


@dataclass(frozen=True)
class BudgetConfig:
    """A share's GPU-hour budget per UTC calendar period (`engine.budgets`); `spent_at_start`: GPU-hours
    already counted in the period the replay starts in (a live queue's, for its estimates and what-ifs)."""

    gpu_hours: Decimal
    period: BudgetPeriod = BudgetPeriod.MONTH
    scope: BudgetScope = BudgetScope.ALL
    spent_at_start: Decimal = Decimal(0)


@dataclass(frozen=True)
class ShareConfig:
    name: str
    strategy: Strategy
    limits: Mapping[str, int]
    borrow_limit: int = UNLIMITED
    in_share_preemption: bool = False
    enabled: bool = True
    lending_limits: Mapping[str, int] = field(default_factory=dict)  # type absent: lends all of it
    fair_share_weight: Decimal = Decimal(1)
    budget: BudgetConfig | None = None


DEFAULT_RELOCATION_MIN_RUNTIME_SECONDS = 600
DEFAULT_MAX_RELOCATIONS_PER_PASS = 4


@dataclass(frozen=True)
class PlanConfig:
    """A training plan: `instance_count` instances of one type for [start, end); `shares` empty = all."""

    name: str
    instance_type: str
    instance_count: int
    start: float
    end: float
    shares: tuple[str, ...] = ()


@dataclass(frozen=True)
class Configuration:
    """One queue's environment and shares. `share_ids` pins engine ids (the live queue's); default 1..n."""

    name: str
    capacity: Mapping[str, int]
    shares: tuple[ShareConfig, ...]
    plans: tuple[PlanConfig, ...] = ()
    ordering: Ordering = Ordering.BEST_EFFORT_FIFO
    plan_drain_seconds: int = DEFAULT_PLAN_DRAIN_SECONDS
    gpus: Mapping[str, int] = field(default_factory=dict)
    share_ids: Mapping[str, int] = field(default_factory=dict)
    description: str = ""
    # Seconds a preempted, drained or cancelled running job stays STOPPING, holding its capacity (the
    # environment's stop_grace_seconds, as the executor uses it); 0: jobs stop at once, as before graceful stops.
    stop_seconds: int = 0
    idle_capacity_assignment: IdleCapacityAssignment = IdleCapacityAssignment.FIFO
    preemption_min_runtime_seconds: int = 0
    # Relocation (docs/relocation.md): every job opts in, and a moved job resumes from its checkpoint.
    relocate: bool = False
    relocation_min_runtime_seconds: int = DEFAULT_RELOCATION_MIN_RUNTIME_SECONDS
    max_relocations_per_pass: int = DEFAULT_MAX_RELOCATIONS_PER_PASS

    def gpus_of(self, instance_type: str) -> int:
        """GPUs per instance: the configuration's table, then the known types; an unknown type counts 1."""
        return self.gpus.get(instance_type, KNOWN_GPUS.get(instance_type, 1))

    def share(self, name: str) -> ShareConfig | None:
        return next((share for share in self.shares if share.name == name), None)

    def share_id(self, name: str) -> int:
        if self.share_ids:
            return self.share_ids[name]
        return 1 + [share.name for share in self.shares].index(name)

    def capacity_gpus(self) -> int:
        return sum(count * self.gpus_of(type_) for type_, count in self.capacity.items())

    @cached_property
    def engine_plans(self) -> dict[str, Plan]:
        """The training plans as the engine sees them, by name: ids 1..n, datetimes, shares by engine id (a
        name no share has stands for share 0, which none is)."""
        ids = {share.name: self.share_id(share.name) for share in self.shares}
        return {
            plan.name: Plan(
                id=index + 1,
                name=plan.name,
                instance_type=plan.instance_type,
                instance_count=plan.instance_count,
                start_time=to_datetime(plan.start),
                end_time=to_datetime(plan.end),
                share_ids=frozenset(ids.get(name, 0) for name in plan.shares),
            )
            for index, plan in enumerate(self.plans)
        }


def validate(config: Configuration) -> Configuration:
    """behaviour.md (what there is, capacity) for a configuration: names, 1-5 limits per share, borrow_limit, limits
    within capacity."""
    problems: list[str] = []
    if not config.shares:
        problems.append("it has no quota share")
    if len(config.shares) > MAX_SHARES:
        problems.append(f"{len(config.shares)} shares; a queue holds at most {MAX_SHARES}")
    seen: set[str] = set()
    for share in config.shares:
        where = f"share {share.name}"
        if not NAME_PATTERN.match(share.name):
            problems.append(f"{where}: a name is 1 to 128 letters, digits, hyphens or underscores")
        if share.name in seen:
            problems.append(f"{where}: the name is used twice")
        seen.add(share.name)
        if not 1 <= len(share.limits) <= MAX_SHARE_LIMITS:
            problems.append(
                f"{where}: needs 1 to {MAX_SHARE_LIMITS} capacity limits, got {len(share.limits)}"
            )
        for type_, limit in share.limits.items():
            if limit < 1:
                problems.append(f"{where}: the limit for {type_} must be at least 1")
            if type_ not in config.capacity:
                problems.append(f"{where}: the environment offers no {type_}")
        if share.borrow_limit < UNLIMITED:
            problems.append(f"{where}: borrow_limit is a percentage >= 0, or -1 for unlimited")
        elif share.borrow_limit != UNLIMITED and share.strategy != Strategy.LEND_AND_BORROW:
            problems.append(f"{where}: borrow_limit applies only to LEND_AND_BORROW shares")
        for type_, lending_limit in share.lending_limits.items():
            if share.strategy == Strategy.RESERVE:
                problems.append(f"{where}: a RESERVE share lends nothing, so it takes no lending_limits")
                break
            if not 0 <= lending_limit <= share.limits.get(type_, 0):
                problems.append(
                    f"{where}: the lending limit for {type_} must be between 0 and its limit "
                    f"{share.limits.get(type_, 0)}"
                )
        if not share.fair_share_weight > 0:
            problems.append(f"{where}: fair_share_weight must be above 0")
        if share.budget is not None:
            if not share.budget.gpu_hours > 0:
                problems.append(f"{where}: budget.gpu_hours must be above 0")
            if share.budget.spent_at_start < 0:
                problems.append(f"{where}: budget.spent_at_start cannot be negative")
    if not 0 <= config.relocation_min_runtime_seconds <= 86_400:
        problems.append("relocation_min_runtime_seconds must be 0 to 86,400")
    if config.max_relocations_per_pass < 0:
        problems.append("max_relocations_per_pass cannot be negative")
    if config.preemption_min_runtime_seconds < 0:
        problems.append("preemption_min_runtime_seconds cannot be negative")
    for type_, capacity in sorted(config.capacity.items()):
        if capacity < 0:
            problems.append(f"capacity of {type_} cannot be negative")
        total = sum(share.limits.get(type_, 0) for share in config.shares)
        if not limits_fit_capacity(total, capacity):
            problems.append(f"{type_}: the share limits total {total} but the capacity is {capacity}")
    for plan in config.plans:
        where = f"plan {plan.name}"
        if plan.instance_count < 1:
            problems.append(f"{where}: reserves at least 1 instance")
        if plan.end <= plan.start:
            problems.append(f"{where}: end must be after start")
        unknown = sorted(set(plan.shares) - seen)
        if unknown:
            problems.append(f"{where}: no share named {', '.join(unknown)}")
    if len({plan.name for plan in config.plans}) != len(config.plans):
        problems.append("two training plans have the same name")
    if config.stop_seconds < 0:
        problems.append("stop_seconds cannot be negative")
    if problems:
        raise ConfigurationError(f"configuration {config.name}: " + "; ".join(problems))
    return config


def most_held(config: Configuration, share: ShareConfig, instance_type: str) -> int:
    """`ceilings.most_ever_held` for a share of the configuration: the most of a type it could ever hold."""
    reserved_by_others = sum(
        reserved_capacity(
            other.strategy, other.limits.get(instance_type, 0), other.lending_limits.get(instance_type)
        )
        for other in config.shares
        if other is not share
    )
    lendable = lendable_beside(config.capacity.get(instance_type, 0), reserved_by_others)
    limit = share.limits.get(instance_type, 0)
    return most_ever_held(share.strategy, limit, share.borrow_limit, lendable=lendable)


def entry_problem(config: Configuration, share: ShareConfig, entry: Entry, at: float) -> str | None:
    """Why a preference entry could never run, as submission validation says (behaviour.md#a-jobs-life), or None."""
    label = f"{entry.instance_type} x{entry.instance_count}"
    if entry.training_plan is not None:
        plan = config.engine_plans.get(entry.training_plan)
        if plan is None:
            return f"{label}: no training plan {entry.training_plan}"
        share_id = config.share_id(share.name)
        problem = plan_entry_never_runs(entry, plan, share_id=share_id, now=to_datetime(at))
    else:
        capacity = config.capacity.get(entry.instance_type)
        ceiling = most_held(config, share, entry.instance_type)
        problem = on_demand_entry_never_runs(entry, capacity=capacity, most_held=ceiling)
    match problem:
        case None:
            return None
        case NeverRuns.PLAN_OF_OTHER_TYPE:
            return f"{label}: plan {plan.name} reserves {plan.instance_type}"
        case NeverRuns.PLAN_ENDED:
            return f"{label}: plan {plan.name} has expired"
        case NeverRuns.PLAN_CLOSED_TO_SHARE:
            return f"{label}: plan {plan.name} is not open to share {share.name}"
        case NeverRuns.ABOVE_PLAN:
            return f"{label}: plan {plan.name} reserves only {plan.instance_count}"
        case NeverRuns.TYPE_NOT_OFFERED:
            return f"{label}: the environment offers no {entry.instance_type}"
        case NeverRuns.ABOVE_CAPACITY:
            return f"{label}: the environment has {capacity}"
        case NeverRuns.ABOVE_SHARE:
            return f"{label}: share {share.name} may hold at most {ceiling}"


# --- files -----------------------------------------------------------------------------------------------

BaseBuilder = Callable[[Mapping[str, Any]], Configuration]


def load_configurations(
    path: str | Path, *, bases: Mapping[str, BaseBuilder] | None = None
) -> list[Configuration]:
    """Read a YAML (.yaml/.yml) or JSON file holding one configuration or `configurations: [...]`.

    `bases` maps a `base:` name (e.g. "philly") to a builder that makes the starting configuration from the
    entry's own keys; the entry's `capacity`, `shares` (merged by name), `plans` and other keys then apply on
    top.
    """
    path = Path(path)
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        import yaml  # PyYAML is a project requirement; imported here so JSON users never need it

        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise ConfigurationError(f"{path}: expected a mapping at the top level")
    entries = data["configurations"] if "configurations" in data else [data]
    if not isinstance(entries, list) or not entries:
        raise ConfigurationError(f"{path}: `configurations` must be a non-empty list")
    configs = []
    for index, entry in enumerate(entries):
        default_name = path.stem if len(entries) == 1 else f"{path.stem}-{index + 1}"
        configs.append(
            configuration_from_mapping(
                entry,
                default_name=default_name,
                bases=bases or {},
                where=f"{path}: configuration {index + 1}",
            )
        )
    return configs


def configuration_from_mapping(
    data: Mapping[str, Any], *, default_name: str, bases: Mapping[str, BaseBuilder], where: str
) -> Configuration:
    if not isinstance(data, Mapping):
        raise ConfigurationError(f"{where}: expected a mapping")
    known = {
        "name",
        "description",
        "base",
        "capacity",
        "shares",
        "plans",
        "ordering",
        "plan_drain_seconds",
        "stop_seconds",
        "instance_types",
        "strategy",
        "borrow_limit",
        "in_share_preemption",
        "capacity_scale",
        "synthetic_plans",
        "idle_capacity_assignment",
        "preemption_min_runtime_seconds",
        "relocate",
        "relocation_min_runtime_seconds",
        "max_relocations_per_pass",
        "lending_fraction",
        "fair_share_weight",
    }
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigurationError(
            f"{where}: unknown key {', '.join(unknown)} (known: {', '.join(sorted(known))})"
        )
    name = str(data.get("name", default_name))
    where = f"{where} ({name})"
    try:
        if "base" in data:
            builder = bases.get(data["base"])
            if builder is None:
                raise ConfigurationError(f"unknown base {data['base']!r} (known: {', '.join(sorted(bases))})")
            config = replace(builder(data), name=name)
        else:
            config = Configuration(name=name, capacity={}, shares=())
        gpus = dict(config.gpus)
        gpus.update({str(k): int(v) for k, v in (data.get("instance_types") or {}).items()})
        shares = {share.name: share for share in config.shares}
        defaults = _share_defaults(data) if "base" not in data else {}
        for index, share_data in enumerate(data.get("shares") or []):
            share_name = str(share_data.get("name", ""))
            shares[share_name] = _share(share_data, shares.get(share_name), defaults, f"shares[{index}]")
        share_list = tuple(shares.values())
        capacity = dict(config.capacity)
        if "capacity" in data:
            capacity.update({str(k): int(v) for k, v in data["capacity"].items()})
        for share in share_list:
            for type_ in share.limits:
                capacity.setdefault(type_, sum(s.limits.get(type_, 0) for s in share_list))
        plans = list(config.plans) + [_plan(p, f"plans[{i}]") for i, p in enumerate(data.get("plans") or [])]
        config = replace(
            config,
            name=name,
            description=str(data.get("description", config.description)),
            capacity=capacity,
            shares=share_list,
            plans=tuple(plans),
            ordering=Ordering(data.get("ordering", config.ordering)),
            plan_drain_seconds=int(data.get("plan_drain_seconds", config.plan_drain_seconds)),
            stop_seconds=int(data.get("stop_seconds", config.stop_seconds)),
            gpus=gpus,
            idle_capacity_assignment=IdleCapacityAssignment(
                data.get("idle_capacity_assignment", config.idle_capacity_assignment)
            ),
            preemption_min_runtime_seconds=int(
                data.get("preemption_min_runtime_seconds", config.preemption_min_runtime_seconds)
            ),
            relocate=bool(data.get("relocate", config.relocate)),
            relocation_min_runtime_seconds=int(
                data.get("relocation_min_runtime_seconds", config.relocation_min_runtime_seconds)
            ),
            max_relocations_per_pass=int(
                data.get("max_relocations_per_pass", config.max_relocations_per_pass)
            ),
        )
        if "lending_fraction" in data:
            config = with_lending_fraction(config, float(data["lending_fraction"]))
    except (KeyError, TypeError, ValueError) as error:
        if isinstance(error, ConfigurationError):
            raise ConfigurationError(f"{where}: {error}") from None
        raise ConfigurationError(f"{where}: {type(error).__name__}: {error}") from None
    try:
        return validate(config)
    except ConfigurationError as error:
        raise ConfigurationError(f"{where}: {error}") from None


def _share_defaults(data: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("strategy", "borrow_limit", "in_share_preemption", "fair_share_weight")
    return {key: data[key] for key in keys if key in data}


def with_lending_fraction(config: Configuration, fraction: float) -> Configuration:
    """Every LEND and LEND_AND_BORROW share lends at most `fraction` of each limit (rounded down)."""
    if not 0 <= fraction <= 1:
        raise ConfigurationError(f"lending_fraction {fraction} must be between 0 and 1")
    shares = tuple(
        share
        if share.strategy == Strategy.RESERVE
        else replace(share, lending_limits={t: int(n * fraction) for t, n in share.limits.items()})
        for share in config.shares
    )
    return replace(config, shares=shares)


def _weight(value: Any) -> Decimal:
    try:
        return Decimal(str(value))
    except InvalidOperation:
        raise ConfigurationError(f"fair_share_weight {value!r} is not a number") from None


def _share(
    data: Mapping[str, Any], base: ShareConfig | None, defaults: Mapping[str, Any], where: str
) -> ShareConfig:
    if not isinstance(data, Mapping) or "name" not in data:
        raise ConfigurationError(f"{where}: a share needs at least a name")
    known = {
        "name",
        "strategy",
        "limits",
        "borrow_limit",
        "in_share_preemption",
        "enabled",
        "lending_limits",
        "fair_share_weight",
        "budget",
    }
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigurationError(f"{where}: unknown key {', '.join(unknown)}")
    merged = {**defaults, **data}
    if base is None:
        if "limits" not in merged:
            raise ConfigurationError(f"{where} ({data['name']}): a new share needs limits")
        base = ShareConfig(name=str(data["name"]), strategy=Strategy.RESERVE, limits={})
    return ShareConfig(
        name=base.name,
        strategy=Strategy(merged.get("strategy", base.strategy)),
        limits={str(k): int(v) for k, v in (merged.get("limits") or base.limits).items()},
        borrow_limit=int(merged.get("borrow_limit", base.borrow_limit)),
        in_share_preemption=bool(merged.get("in_share_preemption", base.in_share_preemption)),
        enabled=bool(merged.get("enabled", base.enabled)),
        lending_limits={
            str(k): int(v) for k, v in (merged.get("lending_limits") or base.lending_limits).items()
        },
        fair_share_weight=_weight(merged.get("fair_share_weight", base.fair_share_weight)),
        budget=_budget(merged["budget"], f"{where}.budget") if "budget" in merged else base.budget,
    )


def _budget(data: Any, where: str) -> BudgetConfig | None:
    """`budget: {gpu_hours: 5000, period: MONTH, scope: ALL}`; null: none."""
    if data is None:
        return None
    if not isinstance(data, Mapping) or "gpu_hours" not in data:
        raise ConfigurationError(f"{where}: a budget is a mapping with gpu_hours (and period, scope)")
    unknown = sorted(set(data) - {"gpu_hours", "period", "scope", "spent_at_start"})
    if unknown:
        raise ConfigurationError(f"{where}: unknown key {', '.join(unknown)}")
    try:
        gpu_hours = Decimal(str(data["gpu_hours"]))
        spent = Decimal(str(data.get("spent_at_start", 0)))
    except InvalidOperation:
        raise ConfigurationError(f"{where}: gpu_hours {data['gpu_hours']!r} is not a number") from None
    try:
        period = BudgetPeriod(str(data.get("period", BudgetPeriod.MONTH)))
        scope = BudgetScope(str(data.get("scope", BudgetScope.ALL)))
    except ValueError as error:
        raise ConfigurationError(
            f"{where}: {error} (period: DAY, WEEK, MONTH; scope: ALL, BORROWED)"
        ) from None
    return BudgetConfig(gpu_hours=gpu_hours, period=period, scope=scope, spent_at_start=spent)


def _plan(data: Mapping[str, Any], where: str) -> PlanConfig:
    missing = sorted({"name", "instance_type", "instance_count", "start", "end"} - set(data))
    if missing:
        raise ConfigurationError(f"{where}: a training plan needs {', '.join(missing)}")
    return PlanConfig(
        name=str(data["name"]),
        instance_type=str(data["instance_type"]),
        instance_count=int(data["instance_count"]),
        start=parse_time(data["start"]),
        end=parse_time(data["end"]),
        shares=tuple(str(s) for s in data.get("shares") or ()),
    )


def parse_time(value: Any) -> float:
    """POSIX seconds from a number, an ISO 8601 string (UTC unless it says otherwise), a date or datetime."""
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    else:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


# A pass asks for its own moment once per admission, and for few others: a few remembered spare the arithmetic.
@lru_cache(maxsize=256)
def to_datetime(seconds: float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def configuration_summary(config: Configuration) -> dict[str, Any]:
    """The configuration as JSON-ready data, for the report."""
    return {
        "name": config.name,
        "description": config.description,
        "capacity": dict(sorted(config.capacity.items())),
        "capacity_gpus": config.capacity_gpus(),
        "ordering": str(config.ordering),
        "plan_drain_seconds": config.plan_drain_seconds,
        "stop_seconds": config.stop_seconds,
        "idle_capacity_assignment": str(config.idle_capacity_assignment),
        "preemption_min_runtime_seconds": config.preemption_min_runtime_seconds,
        "relocate": config.relocate,
        "relocation_min_runtime_seconds": config.relocation_min_runtime_seconds,
        "max_relocations_per_pass": config.max_relocations_per_pass,
        "shares": [
            {
                "name": s.name,
                "strategy": str(s.strategy),
                "limits": dict(sorted(s.limits.items())),
                "borrow_limit": s.borrow_limit,
                "in_share_preemption": s.in_share_preemption,
                "enabled": s.enabled,
                "lending_limits": dict(sorted(s.lending_limits.items())),
                "fair_share_weight": str(s.fair_share_weight),
                **(
                    {
                        "budget": {
                            "gpu_hours": str(s.budget.gpu_hours),
                            "period": str(s.budget.period),
                            "scope": str(s.budget.scope),
                        }
                    }
                    if s.budget is not None
                    else {}
                ),
            }
            for s in config.shares
        ],
        "plans": [
            {
                "name": p.name,
                "instance_type": p.instance_type,
                "instance_count": p.instance_count,
                "start": iso(p.start),
                "end": iso(p.end),
                "shares": list(p.shares),
            }
            for p in config.plans
        ],
    }
