"""`replay --check`: behaviour.md#capacity-what-a-share-may-hold verified after every pass, from the replay's own
counts, not the engine's.

The rules are `engine.invariants` (limits never change during a replay, so every usage above them came from a
placement, and a plan holds jobs only while ACTIVE and outside its drain window, which a pass drains). STOPPING
jobs count wherever they hold, but a job drained from a plan may stop inside its drain window. The first breach
raises `InvariantViolation` naming the pass, the time, the rule and the numbers.
"""

from __future__ import annotations

from datetime import datetime

from engine import Plan, Share, Strategy
from engine.invariants import (
    IN_USE,
    IN_USE_OR_RESERVED,
    PLAN_COUNT,
    PLAN_WINDOW,
    SHARE_CEILING,
    Breach,
    plan_breaches,
    share_breaches,
)

from .config import iso


class InvariantViolation(AssertionError):
    """A pass left the replay in a state behaviour.md#capacity-what-a-share-may-hold forbids (or decided something
    impossible)."""


class PassChecker:
    """The replay's usage per (share id, type) and per plan, checked against one configuration."""

    def __init__(
        self,
        name: str,
        *,
        capacity: dict[str, int],
        shares: tuple[Share, ...],
        plans: tuple[Plan, ...],
        drain_seconds: int,
    ):
        self.name = name
        self.capacity = capacity
        self.shares = shares
        self.plans = plans
        self.drain_seconds = drain_seconds
        self.usage: dict[tuple[int, str], int] = {}
        self.plan_usage: dict[str, int] = {}
        self.plan_stopping: dict[str, int] = {}

    def hold(self, share_id: int, instance_type: str, plan: str | None, count: int) -> None:
        if plan is None:
            self.usage[share_id, instance_type] = self.usage.get((share_id, instance_type), 0) + count
        else:
            self.plan_usage[plan] = self.plan_usage.get(plan, 0) + count

    def release(self, share_id: int, instance_type: str, plan: str | None, count: int) -> None:
        self.hold(share_id, instance_type, plan, -count)

    def stopping(self, plan: str | None, count: int) -> None:
        """`count` instances of a plan start (> 0) or end (< 0) STOPPING: still held, but on their way out."""
        if plan is not None:
            self.plan_stopping[plan] = self.plan_stopping.get(plan, 0) + count

    def check(self, *, index: int, now: float, moment: datetime) -> None:
        breaches = share_breaches(self.capacity, self.shares, self.usage)
        breaches += [
            breach
            for breach in plan_breaches(
                ((plan, self.plan_usage.get(plan.name, 0)) for plan in self.plans),
                now=moment,
                drain_seconds=self.drain_seconds,
            )
            if breach.rule != PLAN_WINDOW
        ]
        breaches += [
            breach
            for breach in plan_breaches(
                (
                    (plan, self.plan_usage.get(plan.name, 0) - self.plan_stopping.get(plan.name, 0))
                    for plan in self.plans
                ),
                now=moment,
                drain_seconds=self.drain_seconds,
            )
            if breach.rule == PLAN_WINDOW
        ]
        if breaches:
            raise InvariantViolation(
                f"--check: after pass {index} at {iso(now)} UTC, configuration {self.name}: "
                + "; ".join(_words(breach) for breach in breaches)
            )


def _words(breach: Breach) -> str:
    if breach.rule == SHARE_CEILING:
        share = breach.share
        rule = (
            "borrow limit"
            if share.strategy == Strategy.LEND_AND_BORROW
            else f"{share.strategy} share over its limit"
        )
        return (
            f"C ({rule}): share {share.name} holds {breach.held} {breach.instance_type}, "
            f"at most {breach.allowed}"
        )
    if breach.rule == IN_USE:
        return f"A: {breach.instance_type} in use {breach.held} > capacity {breach.allowed}"
    if breach.rule == IN_USE_OR_RESERVED:
        return (
            f"B: {breach.instance_type} sum of max(usage, reserved) {breach.held} > capacity {breach.allowed}"
        )
    if breach.rule == PLAN_COUNT:
        return f"D: plan {breach.plan.name} holds {breach.held} of {breach.allowed}"
    return f"D: plan {breach.plan.name} holds {breach.held} outside its active, undrained window"
