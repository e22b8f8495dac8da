"""quotaportal's scheduling engine: `schedule(snapshot) -> decisions`, pure Python, no Django.

The modules follow the pass (SPEC section 3): `capacity` (working state, invariants A-C), `housekeeping`
(drain, timeout, LIMIT_REDUCED), `order` (share queues and heads), `fit` (preference evaluation without
preemption), `preemption` (victims with put-back), `relocation` (running jobs moving to an earlier entry),
`reasons` and `messages` (the words), `scheduler` (the pass itself), `synthetic` (a seeded busy queue for
benchmarks).
"""

from .scheduler import schedule
from .types import (
    HOLDING_STATUSES,
    PLACED_STATUSES,
    UNLIMITED,
    Admission,
    Budget,
    BudgetPeriod,
    BudgetScope,
    Decisions,
    Drain,
    Entry,
    IdleCapacityAssignment,
    Job,
    JobStatus,
    Nominate,
    Nomination,
    Ordering,
    PassStats,
    Pending,
    Placement,
    Plan,
    Preemption,
    PreemptionKind,
    Relocation,
    Share,
    Snapshot,
    Strategy,
    Timeout,
)

__all__ = [
    "HOLDING_STATUSES",
    "PLACED_STATUSES",
    "UNLIMITED",
    "Admission",
    "Budget",
    "BudgetPeriod",
    "BudgetScope",
    "Decisions",
    "Drain",
    "Entry",
    "IdleCapacityAssignment",
    "Job",
    "JobStatus",
    "Nominate",
    "Nomination",
    "Ordering",
    "PassStats",
    "Pending",
    "Placement",
    "Plan",
    "Preemption",
    "PreemptionKind",
    "Relocation",
    "Share",
    "Snapshot",
    "Strategy",
    "Timeout",
    "schedule",
]
