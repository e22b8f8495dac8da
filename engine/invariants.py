"""behaviour.md#capacity-what-a-share-may-hold, checked on plain data: which of its rules a queue's usage breaks, with
the numbers.

For every instance type T and training plan P:
- A: sum over shares of usage(S,T) <= capacity(T);
- B: sum over shares of max(usage(S,T), reserved(S,T)) <= capacity(T) (RESERVE idle capacity, and what a
  share may not lend beyond its lending limit, is never lent);
- C: RESERVE and LEND shares hold at most their limit, LEND_AND_BORROW at most its borrow cap;
- D: instances in use on P <= its instance_count, and none outside the window in which P may hold jobs.
And of a configuration: the limits of a type together fit in its capacity (a limit is a guarantee).

The replay's `--check` and the soak word the breaches their own way; the rules are here only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from .ceilings import reserved_capacity, share_ceiling
from .types import Plan, Share

IN_USE = "A"  # instances in use within capacity
IN_USE_OR_RESERVED = "B"  # what is in use or reserved within capacity
SHARE_CEILING = "C"  # a share within its limit, or its borrow cap
PLAN_COUNT = "D"  # a plan's instances in use within its instance_count
PLAN_WINDOW = "D window"  # a plan holds jobs only while it may


@dataclass(frozen=True, slots=True)
class Breach:
    """One rule broken: `held` instances where the rule allows `allowed` (of a type, a share or a plan)."""

    rule: str
    held: int
    allowed: int
    instance_type: str | None = None
    share: Share | None = None
    plan: Plan | None = None


def limits_fit_capacity(limits_total: int, capacity: int) -> bool:
    """A share's limit is a guarantee: the limits of a type, summed over a queue's shares, fit in capacity."""
    return limits_total <= capacity


def share_breaches(
    capacity: Mapping[str, int], shares: Iterable[Share], usage: Mapping[tuple[int, str], int]
) -> list[Breach]:
    """Rules A, B and C for one queue: `usage` is on-demand instances per (share id, type). Per type (sorted):
    each share over its ceiling in the order given, then A, then B."""
    shares = tuple(shares)
    breaches: list[Breach] = []
    for instance_type in sorted(set(capacity) | {type_ for _, type_ in usage}):
        total = capacity.get(instance_type, 0)
        in_use = in_use_or_reserved = 0
        for share in shares:
            held = usage.get((share.id, instance_type), 0)
            limit = share.limits.get(instance_type, 0)
            in_use += held
            reserved = reserved_capacity(share.strategy, limit, share.lending_limits.get(instance_type))
            in_use_or_reserved += max(held, reserved)
            ceiling = share_ceiling(share.strategy, limit, share.borrow_limit)
            if ceiling is not None and held > ceiling:
                breaches.append(Breach(SHARE_CEILING, held, ceiling, instance_type, share=share))
        if in_use > total:
            breaches.append(Breach(IN_USE, in_use, total, instance_type))
        if in_use_or_reserved > total:
            breaches.append(Breach(IN_USE_OR_RESERVED, in_use_or_reserved, total, instance_type))
    return breaches


def plan_breaches(
    plans: Iterable[tuple[Plan, int]], *, now: datetime, drain_seconds: int = 0
) -> list[Breach]:
    """Rule D for each (plan, instances in use on it): at most its instance_count, and only from its start to
    `drain_seconds` before its end (a pass drains it then; 0 where a drain may still be on its way)."""
    breaches: list[Breach] = []
    for plan, in_use in plans:
        if in_use > plan.instance_count:
            breaches.append(Breach(PLAN_COUNT, in_use, plan.instance_count, plan.instance_type, plan=plan))
        if in_use and not plan.start_time <= now < plan.end_time - timedelta(seconds=drain_seconds):
            breaches.append(Breach(PLAN_WINDOW, in_use, 0, plan.instance_type, plan=plan))
    return breaches
