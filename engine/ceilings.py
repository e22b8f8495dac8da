"""What a quota share may hold, keep back and lend of one instance type (behaviour.md#capacity-what-a-share-may-hold),
in one place.

The engine's fit checks, the replay's shortcuts and checks, the validation of submissions and the soak all
ask these. Strategies are compared as strings, so the Django model's choices and plain strings work too.
"""

from __future__ import annotations

from .types import UNLIMITED, Strategy


def borrow_cap(limit: int, borrow_limit: int) -> int | None:
    """A borrower holds at most its limit plus `borrow_limit` percent of it; None when unlimited (-1)."""
    if borrow_limit == UNLIMITED:
        return None
    return limit + limit * max(0, borrow_limit) // 100


def share_ceiling(strategy: str, limit: int, borrow_limit: int) -> int | None:
    """Invariant C: RESERVE and LEND stop at their limit, LEND_AND_BORROW at its borrow cap (None: no cap)."""
    if strategy != Strategy.LEND_AND_BORROW:
        return limit
    return borrow_cap(limit, borrow_limit)


def reserved_capacity(strategy: str, limit: int, lending_limit: int | None = None) -> int:
    """reserved(S,T): a RESERVE share keeps its whole limit idle, another keeps what it may not lend,
    `limit - lending_limit` (0 when it lends all of it, `lending_limit` None)."""
    if strategy == Strategy.RESERVE:
        return limit
    return 0 if lending_limit is None else max(0, limit - lending_limit)


def lends(strategy: str, lending_limit: int | None = None) -> bool:
    """LEND and LEND_AND_BORROW shares lend their idle capacity, unless their lending limit is 0."""
    return strategy != Strategy.RESERVE and lending_limit != 0


def lendable_capacity(strategy: str, limit: int, usage: int, lending_limit: int | None = None) -> int:
    """What a share lends of a type now: its idle capacity above what it keeps (`reserved_capacity`)."""
    if not lends(strategy, lending_limit):
        return 0
    return max(0, limit - max(usage, reserved_capacity(strategy, limit, lending_limit)))


def most_ever_held(strategy: str, limit: int, borrow_limit: int, *, lendable: int) -> int:
    """The most a share could ever hold of a type on demand: its ceiling, and for a borrower no more than the
    `lendable` capacity (capacity less what the other shares reserve, see `lendable_beside`)."""
    if strategy != Strategy.LEND_AND_BORROW:
        return limit
    cap = borrow_cap(limit, borrow_limit)
    return lendable if cap is None else min(lendable, cap)


def lendable_beside(capacity: int, reserved_by_others: int) -> int:
    """What a borrower could ever reach of a type: the capacity the other shares do not reserve."""
    return max(0, capacity - reserved_by_others)
