"""What submission refuses (behaviour.md#a-jobs-life): a preference entry that could never run, whatever else happens.

The live validation (`scheduling.rules.validate_preferences`) and the replay's
(`simulator.config.entry_problem`) both ask these, then word the answer for their callers.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Sequence
from datetime import datetime

from .fit import plan_open_to_share
from .types import Entry, Plan

# behaviour.md#what-there-is: a job lists 1 to 5 preference entries, each (instance type, training plan) pair at most
# once.
MAX_PREFERENCES = 5


def preference_count_allowed(count: int) -> bool:
    """A preference list holds 1 to MAX_PREFERENCES entries."""
    return 1 <= count <= MAX_PREFERENCES


def repeated_entries(keys: Sequence[Hashable]) -> dict[int, int]:
    """Each entry whose (type, plan) key an earlier entry already has: its index -> the first one's index."""
    first: dict[Hashable, int] = {}
    repeats: dict[int, int] = {}
    for index, key in enumerate(keys):
        if key in first:
            repeats[index] = first[key]
        else:
            first[key] = index
    return repeats


class NeverRuns(enum.Enum):
    """Why an entry could never run."""

    PLAN_OF_OTHER_TYPE = "its plan reserves another instance type"
    PLAN_ENDED = "its plan has ended"
    PLAN_CLOSED_TO_SHARE = "its plan is not open to the share"
    ABOVE_PLAN = "more instances than its plan reserves"
    TYPE_NOT_OFFERED = "the environment offers none of its type"
    ABOVE_CAPACITY = "more instances than the environment has"
    ABOVE_SHARE = "more instances than the share could ever hold, borrowing included"


def plan_entry_never_runs(entry: Entry, plan: Plan, *, share_id: int, now: datetime) -> NeverRuns | None:
    """An entry on a training plan (`plan`, the one it names) runs only on a plan of its type that has not
    ended, is open to the share and reserves enough instances."""
    if plan.instance_type != entry.instance_type:
        return NeverRuns.PLAN_OF_OTHER_TYPE
    if plan.end_time <= now:
        return NeverRuns.PLAN_ENDED
    if not plan_open_to_share(plan, share_id):
        return NeverRuns.PLAN_CLOSED_TO_SHARE
    if entry.instance_count > plan.instance_count:
        return NeverRuns.ABOVE_PLAN
    return None


def on_demand_entry_never_runs(entry: Entry, *, capacity: int | None, most_held: int) -> NeverRuns | None:
    """An on-demand entry runs only where the environment offers its type (`capacity`, None when it does not),
    within that capacity and within the most its share could ever hold (`ceilings.most_ever_held`)."""
    if capacity is None:
        return NeverRuns.TYPE_NOT_OFFERED
    if entry.instance_count > capacity:
        return NeverRuns.ABOVE_CAPACITY
    if entry.instance_count > most_held:
        return NeverRuns.ABOVE_SHARE
    return None
