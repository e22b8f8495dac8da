"""Who lends to whom: per share and type, usage against limit, borrowed, lent, and the loans between shares.

Borrowed capacity is pooled, so a loan has no single lender. The free pool (capacity no share owns) is
counted as lent first; what borrowers hold beyond it comes out of the idle capacity of LEND and
LEND_AND_BORROW shares, shared among them in proportion to their idle capacity (largest remainder, ties by
share id), and each borrower's part is split over the lenders the same way. RESERVE shares never lend.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from engine.ceilings import lendable_capacity, lends, reserved_capacity
from engine.types import Strategy

FREE_POOL = 0  # lender id of the capacity no share owns


@dataclass(frozen=True, slots=True)
class ShareTypeUsage:
    share_id: int
    instance_type: str
    limit: int
    usage: int
    borrowed: int
    lent: int
    idle: int
    kept: int = 0  # of `idle`, what a lending share keeps beyond its lending limit (never lent)
    lendable: int = 0  # of the limit, what the share lends or may lend now (`lent` included): idle above kept


@dataclass(frozen=True, slots=True)
class Loan:
    borrower_id: int
    lender_id: int  # FREE_POOL for capacity no share owns
    instance_type: str
    instances: int


@dataclass(frozen=True, slots=True)
class TypeUsage:
    instance_type: str
    capacity: int
    owned: int  # in use within the users' own limits
    borrowed: int  # in use above limits
    idle: int  # owned by a share but not in use, and not lent
    free: int  # neither owned nor in use


def apportion(total: int, weights: Mapping[int, int]) -> dict[int, int]:
    """Split `total` over keys by `weights` (largest remainder, ties by key), capped by weight."""
    pool = sum(weights.values())
    if total <= 0 or pool <= 0:
        return {key: 0 for key in weights}
    total = min(total, pool)
    shares = {key: total * weight // pool for key, weight in weights.items()}
    left = total - sum(shares.values())
    by_remainder = sorted(weights, key=lambda key: (-(total * weights[key] % pool), key))
    for key in by_remainder[:left]:
        shares[key] += 1
    return shares


def lent_of_type(
    *,
    capacity: int,
    limit: Mapping[int, int],
    used: Mapping[int, int],
    lenders: Iterable[int],
    lending_limit: Mapping[int, int] | None = None,
) -> tuple[int, dict[int, int]]:
    """What one type's borrowers take from the free pool, and what each lender lends: the free pool first,
    then the idle capacity of the `lenders` (LEND and LEND_AND_BORROW shares) up to their lending limits,
    apportioned."""
    total_borrowed = sum(max(0, used[s] - limit[s]) for s in limit)
    from_pool = min(total_borrowed, max(0, capacity - sum(limit.values())))
    lending_limit = lending_limit or {}
    lendable = {s: lendable_capacity(Strategy.LEND, limit[s], used[s], lending_limit.get(s)) for s in lenders}
    return from_pool, apportion(total_borrowed - from_pool, lendable)


def share_usage(
    *,
    capacity: Mapping[str, int],
    limits: Mapping[int, Mapping[str, int]],
    strategies: Mapping[int, Strategy | str],
    usage: Mapping[tuple[int, str], int],
    lending_limits: Mapping[int, Mapping[str, int]] | None = None,
) -> tuple[list[ShareTypeUsage], list[Loan], list[TypeUsage]]:
    """Rows per (share, type) for each type a share has a limit on or uses, the loans, and per-type totals."""
    types = sorted(
        set(capacity) | {t for share_limits in limits.values() for t in share_limits} | {t for _, t in usage}
    )
    share_ids = sorted(set(limits) | set(strategies) | {s for s, _ in usage})
    rows: list[ShareTypeUsage] = []
    loans: list[Loan] = []
    totals: list[TypeUsage] = []
    for type_ in types:
        cap = capacity.get(type_, 0)
        used = {s: usage.get((s, type_), 0) for s in share_ids}
        limit = {s: limits.get(s, {}).get(type_, 0) for s in share_ids}
        borrowed = {s: max(0, used[s] - limit[s]) for s in share_ids}
        idle = {s: max(0, limit[s] - used[s]) for s in share_ids}
        total_borrowed = sum(borrowed.values())
        lending = {s: n for s in share_ids if (n := (lending_limits or {}).get(s, {}).get(type_)) is not None}
        lenders = [s for s in share_ids if lends(strategies.get(s, Strategy.RESERVE), lending.get(s))]
        from_pool, lent = lent_of_type(
            capacity=cap, limit=limit, used=used, lenders=lenders, lending_limit=lending
        )
        sources = {FREE_POOL: from_pool, **{s: n for s, n in lent.items() if n}}
        for borrower in share_ids:
            if borrowed[borrower]:
                for lender, n in apportion(borrowed[borrower], sources).items():
                    if n:
                        loans.append(Loan(borrower, lender, type_, n))
        for s in share_ids:
            if limit[s] or used[s]:
                rows.append(
                    ShareTypeUsage(
                        share_id=s,
                        instance_type=type_,
                        limit=limit[s],
                        usage=used[s],
                        borrowed=borrowed[s],
                        lent=lent.get(s, 0),
                        idle=idle[s] - lent.get(s, 0),
                        kept=kept_idle(
                            strategies.get(s, Strategy.RESERVE), limit[s], used[s], lending.get(s)
                        ),
                        lendable=lendable_capacity(
                            strategies.get(s, Strategy.RESERVE), limit[s], used[s], lending.get(s)
                        ),
                    )
                )
        owned = sum(used[s] - borrowed[s] for s in share_ids)
        idle_total = sum(idle.values()) - sum(lent.values())
        totals.append(
            TypeUsage(
                instance_type=type_,
                capacity=cap,
                owned=owned,
                borrowed=total_borrowed,
                idle=max(0, idle_total),
                free=max(0, cap - owned - total_borrowed - max(0, idle_total)),
            )
        )
    return rows, loans, totals


def kept_idle(strategy: Strategy | str, limit: int, used: int, lending_limit: int | None) -> int:
    """Idle capacity a LEND or LEND_AND_BORROW share keeps beyond its lending limit (0 without one)."""
    if strategy == Strategy.RESERVE or lending_limit is None:
        return 0
    return max(0, reserved_capacity(strategy, limit, lending_limit) - used)
