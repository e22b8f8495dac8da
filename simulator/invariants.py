"""`replay --check`: SPEC section 2 verified after every pass, from the replay's own counts, not the engine's.

After each pass, for every instance type T and plan P:
- A: sum over shares of usage(S,T) <= capacity(T);
- B: sum over shares of max(usage(S,T), reserved(S,T)) <= capacity(T) (RESERVE idle capacity is never lent);
- C: RESERVE and LEND shares at most their limit, LEND_AND_BORROW at most limit + limit * borrow_limit / 100
  (limits never change during a replay, so every usage above them came from a placement);
- D: instances in use on P <= its instance_count, and only while P is ACTIVE and outside its drain window.
The first breach raises `InvariantViolation` naming the pass, the time, the rule and the numbers.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine import UNLIMITED, Strategy

from .config import Configuration, PlanConfig, iso


class InvariantViolation(AssertionError):
    """A pass left the replay in a state SPEC section 2 forbids (or decided something impossible)."""


class PassChecker:
    def __init__(self, config: Configuration):
        self.config = config
        self.shares = {share.name: share for share in config.shares}
        self.usage: dict[tuple[str, str], int] = {}
        self.plan_usage: dict[str, int] = {}

    def hold(self, share: str, instance_type: str, plan: str | None, count: int) -> None:
        if plan is None:
            self.usage[share, instance_type] = self.usage.get((share, instance_type), 0) + count
        else:
            self.plan_usage[plan] = self.plan_usage.get(plan, 0) + count

    def release(self, share: str, instance_type: str, plan: str | None, count: int) -> None:
        self.hold(share, instance_type, plan, -count)

    def check(self, *, index: int, now: float, plans: Iterable[PlanConfig], drain_seconds: int) -> None:
        problems = self.problems(now=now, plans=plans, drain_seconds=drain_seconds)
        if problems:
            raise InvariantViolation(
                f"--check: after pass {index} at {iso(now)} UTC, configuration {self.config.name}: "
                + "; ".join(problems)
            )

    def problems(self, *, now: float, plans: Iterable[PlanConfig], drain_seconds: int) -> list[str]:
        problems: list[str] = []
        types = sorted(set(self.config.capacity) | {t for _, t in self.usage})
        for instance_type in types:
            capacity = self.config.capacity.get(instance_type, 0)
            used = committed = 0
            for name, share in self.shares.items():
                usage = self.usage.get((name, instance_type), 0)
                limit = share.limits.get(instance_type, 0)
                reserved = limit if share.strategy == Strategy.RESERVE else 0
                used += usage
                committed += max(usage, reserved)
                ceiling = most_allowed(share.strategy, limit, share.borrow_limit)
                if ceiling is not None and usage > ceiling:
                    rule = (
                        "borrow limit"
                        if share.strategy == Strategy.LEND_AND_BORROW
                        else f"{share.strategy} share over its limit"
                    )
                    problems.append(
                        f"C ({rule}): share {name} holds {usage} {instance_type}, at most {ceiling}"
                    )
            if used > capacity:
                problems.append(f"A: {instance_type} in use {used} > capacity {capacity}")
            if committed > capacity:
                problems.append(
                    f"B: {instance_type} sum of max(usage, reserved) {committed} > capacity {capacity}"
                )
        for plan in plans:
            in_use = self.plan_usage.get(plan.name, 0)
            if in_use > plan.instance_count:
                problems.append(f"D: plan {plan.name} holds {in_use} of {plan.instance_count}")
            if in_use and not plan.start <= now < plan.end - drain_seconds:
                problems.append(f"D: plan {plan.name} holds {in_use} outside its active, undrained window")
        return problems


def most_allowed(strategy: Strategy, limit: int, borrow_limit: int) -> int | None:
    """Invariant C: the most a share may hold of a type through placement (None: no bound of its own)."""
    if strategy != Strategy.LEND_AND_BORROW:
        return limit
    if borrow_limit == UNLIMITED:
        return None
    return limit + limit * borrow_limit // 100
