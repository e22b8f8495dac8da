"""How the Philly trace becomes quota shares and jobs (documented in the README's replay section too).

- **VC -> quota share.** One share per virtual cluster of `philly_vc.csv`, named after it. A Philly node is
  taken to have 8 GPUs, so a VC's quota is `nodes x 8 x capacity_scale` GPUs. That quota is split over the
  instance types in the proportion the VC used them over the whole trace (instance-GPU-seconds), rounded to
  whole instances, at least one of every type the VC used for 1% or more. The environment's capacity per type
  is the sum of the shares' limits: no free pool, every GPU is some team's guarantee.
- **GPUs -> instance type and count.** 1 GPU -> `ml.g5.xlarge` x1 (1 GPU); 2-4 GPUs -> `ml.g5.12xlarge` x1 (4
  GPUs); more -> `ml.g5.48xlarge` x ceil(n/8) (8 GPUs each). A 2-GPU job therefore holds 4 GPUs.
- **Synthetic (Philly has no priorities, instance types or reservations), from `seed` and the job's line in
  the file, so a job gets the same draws whatever the window:** priority 0 (70%), 10 (20%) or 100 (10%); 30%
  of jobs accept a second entry (1 GPU -> `ml.g5.12xlarge` x1, 2-4 GPUs -> `ml.g5.48xlarge` x1, more ->
  `ml.g5.12xlarge` x ceil(n/4)); `synthetic_plans` training plans of `ml.g5.48xlarge` (about a tenth of that
  type's capacity, 2 to 5 days each, open to two shares that hold that type) placed at random in the window,
  and half the jobs of those shares that arrive while a plan is usable name it as their first entry.
- Entries the configuration could never run are left out, as a user would; a job left with none keeps its
  first and is rejected at submission, as the live system rejects it (for example a 16-GPU job of a RESERVE
  share whose limit is one 8-GPU instance).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from engine import UNLIMITED, Entry, IdleCapacityAssignment, Strategy

from .config import Configuration, PlanConfig, ShareConfig, entry_problem, with_lending_fraction
from .simulation import SimJob
from .trace import PHILLY_CREDIT, TraceRow

SMALL = "ml.g5.xlarge"
MEDIUM = "ml.g5.12xlarge"
LARGE = "ml.g5.48xlarge"
PHILLY_GPUS = {SMALL: 1, MEDIUM: 4, LARGE: 8}
GPUS_PER_NODE = 8
MIN_TYPE_FRACTION = 0.01
PRIORITIES = ((0.7, 0), (0.9, 10), (1.0, 100))
FALLBACK_SHARE = 0.3
PLAN_USE_SHARE = 0.5
DEFAULT_CAPACITY_SCALE = 0.25


def instance_request(num_gpus: int) -> tuple[str, int]:
    """The first preference entry of a job asking for `num_gpus` GPUs."""
    if num_gpus <= 1:
        return SMALL, 1
    if num_gpus <= 4:
        return MEDIUM, 1
    return LARGE, math.ceil(num_gpus / 8)


def fallback_request(num_gpus: int) -> tuple[str, int]:
    """The second entry a job accepts, when it accepts one: the same GPUs on a bigger or smaller instance."""
    if num_gpus <= 1:
        return MEDIUM, 1
    if num_gpus <= 4:
        return LARGE, 1
    return MEDIUM, math.ceil(num_gpus / 4)


def type_mix(rows: Iterable[TraceRow]) -> dict[str, dict[str, float]]:
    """VC -> instance type -> fraction of the VC's instance-GPU-seconds on that type."""
    seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in rows:
        instance_type, count = instance_request(row.num_gpus)
        seconds[row.vc][instance_type] += row.duration * count * PHILLY_GPUS[instance_type]
    mix = {}
    for vc, by_type in seconds.items():
        total = sum(by_type.values())
        if total > 0:
            mix[vc] = {t: s / total for t, s in sorted(by_type.items())}
    return mix


def share_limits(gpus: float, fractions: Mapping[str, float]) -> dict[str, int]:
    """A GPU quota split over types by `fractions`, in whole instances (at least 1 of a type used >= 1%)."""
    limits = {}
    for instance_type in PHILLY_GPUS:
        fraction = fractions.get(instance_type, 0.0)
        if fraction >= MIN_TYPE_FRACTION:
            limits[instance_type] = max(1, round(gpus * fraction / PHILLY_GPUS[instance_type]))
    return limits or {SMALL: max(1, round(gpus))}


def philly_configuration(
    *,
    name: str,
    vcs: Mapping[str, int],
    mix: Mapping[str, Mapping[str, float]],
    capacity_scale: float = DEFAULT_CAPACITY_SCALE,
    strategy: Strategy = Strategy.RESERVE,
    borrow_limit: int = UNLIMITED,
    in_share_preemption: bool = False,
    plans: Sequence[PlanConfig] = (),
    description: str = "",
) -> Configuration:
    """One share per VC sized from `philly_vc.csv` (see the module docstring), all with the same policy."""
    if capacity_scale <= 0:
        raise ValueError("the capacity scale must be positive")
    shares = tuple(
        ShareConfig(
            name=vc,
            strategy=Strategy(strategy),
            limits=share_limits(nodes * GPUS_PER_NODE * capacity_scale, mix.get(vc, {})),
            borrow_limit=borrow_limit if Strategy(strategy) == Strategy.LEND_AND_BORROW else UNLIMITED,
            in_share_preemption=in_share_preemption,
        )
        for vc, nodes in vcs.items()
    )
    capacity = {t: sum(s.limits.get(t, 0) for s in shares) for t in PHILLY_GPUS}
    capacity = {t: n for t, n in capacity.items() if n}
    return Configuration(
        name=name,
        capacity=capacity,
        shares=shares,
        plans=tuple(plans),
        gpus=dict(PHILLY_GPUS),
        description=description
        or f"one {strategy} share per Philly VC, {capacity_scale:g} x its quota. {PHILLY_CREDIT}",
    )


def synthetic_plans(
    *,
    count: int,
    shares: Sequence[ShareConfig],
    capacity: Mapping[str, int],
    start: float,
    end: float,
    seed: int,
) -> list[PlanConfig]:
    """`count` seeded training plans of the 8-GPU type inside [start, end), each open to two shares."""
    if count <= 0 or LARGE not in capacity or end <= start:
        return []
    rng = random.Random(f"quotaportal-philly-plans:{seed}")
    holders = [share.name for share in shares if share.limits.get(LARGE)]
    plans = []
    for number in range(1, count + 1):
        length = rng.uniform(2, 5) * 86400
        begin = start + rng.uniform(0, max(0.0, end - start - length))
        opened = tuple(sorted(rng.sample(holders, k=min(2, len(holders)))))
        plans.append(
            PlanConfig(
                name=f"philly-plan-{number}",
                instance_type=LARGE,
                instance_count=max(2, round(capacity[LARGE] / 10)),
                start=float(round(begin)),
                end=float(round(min(end, begin + length))),
                shares=opened,
            )
        )
    return plans


def synthetic_draws(seed: int, line: int) -> tuple[float, float, float]:
    """Three uniforms for a trace line (priority, second entry, plan), the same whatever the window."""
    rng = random.Random(f"quotaportal-philly:{seed}:{line}")
    return rng.random(), rng.random(), rng.random()


def priority_of(draw: float) -> int:
    return next(priority for bound, priority in PRIORITIES if draw < bound)


def philly_jobs(rows: Iterable[TraceRow], config: Configuration, *, seed: int) -> list[SimJob]:
    """The trace rows as jobs for `config` (job id = the row's line in the file)."""
    jobs = []
    drain = config.plan_drain_seconds
    for row in rows:
        u_priority, u_fallback, u_plan = synthetic_draws(seed, row.line)
        first = Entry(*instance_request(row.num_gpus))
        entries = [first]
        if u_fallback < FALLBACK_SHARE:
            entries.append(Entry(*fallback_request(row.num_gpus)))
        share = config.share(row.vc)
        if share is not None:
            if u_plan < PLAN_USE_SHARE:
                plan = usable_plan(config.plans, share, first, row.submitted_at, drain)
                if plan is not None:
                    entries.insert(0, Entry(first.instance_type, first.instance_count, plan.name))
            runnable = [e for e in entries if entry_problem(config, share, e, row.submitted_at) is None]
            entries = runnable or [first]
        jobs.append(
            SimJob(
                id=row.line,
                share=row.vc,
                submitted_at=row.submitted_at,
                entries=tuple(entries),
                duration=row.duration,
                priority=priority_of(u_priority),
                gpus=row.num_gpus,
            )
        )
    return jobs


def usable_plan(
    plans: Iterable[PlanConfig], share: ShareConfig, entry: Entry, at: float, drain: int
) -> PlanConfig | None:
    """The plan a user of `share` submitting `entry` at `at` would name: open, active, not draining."""
    for plan in plans:
        if (
            plan.instance_type == entry.instance_type
            and (not plan.shares or share.name in plan.shares)
            and plan.start <= at < plan.end - drain
            and entry.instance_count <= plan.instance_count
        ):
            return plan
    return None


def philly_base(
    *,
    vcs: Mapping[str, int],
    mix: Mapping[str, Mapping[str, float]],
    capacity_scale: float,
    start: float,
    end: float,
    seed: int,
):
    """The `base: philly` builder for configuration files: keys strategy, borrow_limit, in_share_preemption,
    capacity_scale and synthetic_plans (default 0) shape the generated shares."""

    def build(data: Mapping[str, Any]) -> Configuration:
        config = philly_configuration(
            name=str(data.get("name", "philly")),
            vcs=vcs,
            mix=mix,
            capacity_scale=float(data.get("capacity_scale", capacity_scale)),
            strategy=Strategy(data.get("strategy", Strategy.RESERVE)),
            borrow_limit=int(data.get("borrow_limit", UNLIMITED)),
            in_share_preemption=bool(data.get("in_share_preemption", False)),
        )
        plans = synthetic_plans(
            count=int(data.get("synthetic_plans", 0)),
            shares=config.shares,
            capacity=config.capacity,
            start=start,
            end=end,
            seed=seed,
        )
        return replace(config, plans=tuple(plans))

    return build


COMPARISON_STRATEGIES = (
    ("all-RESERVE", Strategy.RESERVE),
    ("all-LEND", Strategy.LEND),
    ("all-LEND_AND_BORROW", Strategy.LEND_AND_BORROW),
)


def comparison_configurations(
    *,
    vcs: Mapping[str, int],
    mix: Mapping[str, Mapping[str, float]],
    capacity_scale: float,
    start: float,
    end: float,
    seed: int,
    plans: int = 2,
) -> list[Configuration]:
    """The built-in comparison: the same shares, capacity and plans, with every share RESERVE, LEND or
    LEND_AND_BORROW (unlimited borrowing)."""
    configs = []
    for name, strategy in COMPARISON_STRATEGIES:
        config = philly_configuration(
            name=name, vcs=vcs, mix=mix, capacity_scale=capacity_scale, strategy=strategy
        )
        configs.append(
            replace(
                config,
                plans=tuple(
                    synthetic_plans(
                        count=plans,
                        shares=config.shares,
                        capacity=config.capacity,
                        start=start,
                        end=end,
                        seed=seed,
                    )
                ),
            )
        )
    return configs


# Issue 17's study: each new setting against the all-LEND_AND_BORROW configuration it changes.
SETTING_VARIANTS = (
    ("LEND_AND_BORROW-FAIR_SHARE", {"idle_capacity_assignment": IdleCapacityAssignment.FAIR_SHARE}),
    ("LEND_AND_BORROW-protect-10min", {"preemption_min_runtime_seconds": 600}),
    ("LEND_AND_BORROW-protect-30min", {"preemption_min_runtime_seconds": 1800}),
    ("LEND_AND_BORROW-lend-half", {"lending_fraction": 0.5}),
)


def setting_variants(configs: list[Configuration]) -> list[Configuration]:
    """FAIR_SHARE, a protection of 10 and 30 minutes, and half of every limit lendable, each applied to the
    all-LEND_AND_BORROW configuration of `comparison_configurations` (same shares, capacity and plans)."""
    base = next(config for config in configs if config.name == "all-LEND_AND_BORROW")
    variants = []
    for name, changes in SETTING_VARIANTS:
        changes = dict(changes)
        fraction = changes.pop("lending_fraction", None)
        variant = replace(base, name=name, **changes)
        if fraction is not None:
            variant = with_lending_fraction(variant, fraction)
        variants.append(variant)
    return variants
