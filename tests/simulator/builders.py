"""Small hand-made configurations and jobs for simulator tests: times in seconds from T0."""

from __future__ import annotations

from engine import Entry, Strategy
from simulator import Configuration, PlanConfig, ShareConfig, SimJob

T0 = 1_500_000_000.0  # 2017-07-14 02:40 UTC, a whole multiple of 30 s
SMALL, BIG = "ml.g5.xlarge", "ml.g5.48xlarge"  # 1 and 8 GPUs

RESERVE = Strategy.RESERVE
LEND = Strategy.LEND
LEND_AND_BORROW = Strategy.LEND_AND_BORROW


def share(name: str, strategy: Strategy = RESERVE, **limits_and_fields) -> ShareConfig:
    """`share("a", LEND, small=2, borrow_limit=50)`: keyword `small`/`big` are limits on SMALL/BIG."""
    limits = dict(limits_and_fields.pop("limits", {}))
    for key, type_name in (("small", SMALL), ("big", BIG)):
        if key in limits_and_fields:
            limits[type_name] = limits_and_fields.pop(key)
    return ShareConfig(name=name, strategy=strategy, limits=limits, **limits_and_fields)


def config(
    *shares: ShareConfig, capacity: dict[str, int] | None = None, name: str = "test", **fields
) -> Configuration:
    if capacity is None:
        capacity = {}
        for s in shares:
            for type_name, limit in s.limits.items():
                capacity[type_name] = capacity.get(type_name, 0) + limit
    return Configuration(name=name, capacity=capacity, shares=tuple(shares), **fields)


def plan(name: str, type_name: str, count: int, start: float, end: float, *shares: str) -> PlanConfig:
    return PlanConfig(
        name=name,
        instance_type=type_name,
        instance_count=count,
        start=T0 + start,
        end=T0 + end,
        shares=tuple(shares),
    )


def job(job_id: int, share_name: str, at: float, duration: float | None, *entries: tuple, **fields) -> SimJob:
    """`job(1, "a", at=0, duration=100)` asks for SMALL x1; entries are (type, count[, plan]) tuples."""
    entries = entries or ((SMALL, 1),)
    return SimJob(
        id=job_id,
        share=share_name,
        submitted_at=T0 + at,
        duration=duration,
        entries=tuple(Entry(*e) for e in entries),
        **fields,
    )


def kinds(result) -> list[tuple[int, str, int]]:
    """(pass index, kind, job id) of every record."""
    return [(r.pass_index, r.kind, r.job_id) for r in result.records]
