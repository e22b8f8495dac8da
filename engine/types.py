"""The scheduler's vocabulary: a snapshot of one job queue in, decisions out.

Plain frozen dataclasses with no Django import, so the engine can be tested, benchmarked and replayed in
the simulator on its own. `scheduling.passes.snapshot` is the one place that translates ORM rows to and
from these.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal


class Strategy(enum.StrEnum):
    RESERVE = "RESERVE"
    LEND = "LEND"
    LEND_AND_BORROW = "LEND_AND_BORROW"


class Ordering(enum.StrEnum):
    BEST_EFFORT_FIFO = "BEST_EFFORT_FIFO"
    STRICT_FIFO = "STRICT_FIFO"


class IdleCapacityAssignment(enum.StrEnum):
    FIFO = "FIFO"
    FAIR_SHARE = "FAIR_SHARE"


class JobStatus(enum.StrEnum):
    RUNNABLE = "RUNNABLE"
    SCHEDULED = "SCHEDULED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"


PLACED_STATUSES = frozenset({JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING})
# A STOPPING job still holds its placement: it counts wherever a placed job does, but is never a victim.
HOLDING_STATUSES = PLACED_STATUSES | {JobStatus.STOPPING}


class PreemptionKind(enum.StrEnum):
    RECLAIM = "PREEMPTED_RECLAIM"
    IN_SHARE = "PREEMPTED_IN_SHARE"
    LIMIT_REDUCED = "PREEMPTED_LIMIT_REDUCED"


UNLIMITED = -1


class BudgetPeriod(enum.StrEnum):
    DAY = "DAY"
    WEEK = "WEEK"
    MONTH = "MONTH"


class BudgetScope(enum.StrEnum):
    ALL = "ALL"
    BORROWED = "BORROWED"


@dataclass(frozen=True, slots=True)
class Budget:
    """A share's GPU-hour budget as it stands in the current period (behaviour.md#gpu-hour-budgets, `budgets`).

    `used_gpu_hours` is what the share has spent in the period so far (scope BORROWED: on borrowing only);
    `resets_at` is the end of the period.
    """

    gpu_hours: Decimal
    period: BudgetPeriod
    scope: BudgetScope
    used_gpu_hours: Decimal
    resets_at: datetime

    @property
    def spent(self) -> bool:
        return self.used_gpu_hours >= self.gpu_hours


@dataclass(frozen=True, slots=True)
class Share:
    """A quota share. `limits` maps instance type name -> max_capacity (a type not listed has limit 0).

    `lending_limits` maps a type to the most of its limit a LEND or LEND_AND_BORROW share lends (a type not
    listed: all of it); `fair_share_weight` divides its dominant borrowed share under FAIR_SHARE; `budget` is
    its GPU-hour budget in the current period (None: no budget).
    """

    id: int
    name: str
    strategy: Strategy
    limits: dict[str, int]
    borrow_limit: int = UNLIMITED
    in_share_preemption: bool = False
    enabled: bool = True
    lending_limits: dict[str, int] = field(default_factory=dict)
    fair_share_weight: Decimal = Decimal(1)
    budget: Budget | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """A training plan: `instance_count` reserved instances of one type for [start_time, end_time).

    `share_ids` empty means every share of the queue may draw on it.
    """

    id: int
    name: str
    instance_type: str
    instance_count: int
    start_time: datetime
    end_time: datetime
    share_ids: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Entry:
    """One preference entry of a job: a type and count, optionally on a named training plan."""

    instance_type: str
    instance_count: int
    training_plan: str | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a placed job holds capacity. `training_plan` None means on-demand capacity."""

    instance_type: str
    instance_count: int
    training_plan: str | None
    scheduled_at: datetime


@dataclass(frozen=True, slots=True)
class Nomination:
    """An earlier pass preempted for this RUNNABLE job: entry `entry_index` waits for `victim_ids` to stop."""

    entry_index: int
    victim_ids: frozenset[int]


@dataclass(frozen=True, slots=True)
class Job:
    """A job of the queue that is RUNNABLE (placement None), placed (SCHEDULED, STARTING, RUNNING) or STOPPING.

    `submitted_at` orders the queue and survives preemption; `runnable_since` is when the job last became
    RUNNABLE and is what `max_pending_seconds` is measured from. `taken`: the executor has taken the job, so a
    stop is graceful (STOPPING until `stop_deadline`). `nomination`: set on a RUNNABLE job an earlier pass
    preempted for, while its victims stop; and on a job being relocated (`relocation.py`), while it is STOPPING
    and once it is RUNNABLE, naming the entry it moves to and itself as the one victim. `name` and `team_id`
    serve the words only (`messages.job_label`): a text about a job names the jobs of its own team and gives
    another team's jobs by number.
    """

    id: int
    share_id: int
    priority: int
    submitted_at: datetime
    entries: tuple[Entry, ...]
    status: JobStatus = JobStatus.RUNNABLE
    placement: Placement | None = None
    runnable_since: datetime | None = None
    max_pending_seconds: int | None = None
    preemption_count: int = 0
    preemption_retries_before_termination: int | None = None
    taken: bool = False
    stop_deadline: datetime | None = None
    nomination: Nomination | None = None
    # behaviour.md#moving-to-a-preferred-entry: the job may be moved to an earlier entry of its list when one frees (see
    # relocation.py).
    relocate: bool = False
    name: str = ""
    team_id: int | None = None
    # Its place in its share's queue (behaviour.md#order: higher priority first, then earlier submission, then lower
    # id), worked out once: a pass sorts and compares it for every RUNNABLE job it is given.
    queue_key: tuple[int, datetime, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "queue_key", (-self.priority, self.submitted_at, self.id))


# A frozen dataclass sets each field through `object.__setattr__`, about 2.2 us for a Job's 18; setting the
# slots through their descriptors takes half that. A snapshot loader builds a Job per unfinished job (120,000 on
# a large queue), so it uses `job_loaded`: the same Job, every field given (tests/engine/test_types.py checks it
# against the constructor, field by field and by equality).
_new_object = object.__new__
_set_id = Job.id.__set__  # type: ignore[attr-defined]
_set_share_id = Job.share_id.__set__  # type: ignore[attr-defined]
_set_priority = Job.priority.__set__  # type: ignore[attr-defined]
_set_submitted_at = Job.submitted_at.__set__  # type: ignore[attr-defined]
_set_entries = Job.entries.__set__  # type: ignore[attr-defined]
_set_status = Job.status.__set__  # type: ignore[attr-defined]
_set_placement = Job.placement.__set__  # type: ignore[attr-defined]
_set_runnable_since = Job.runnable_since.__set__  # type: ignore[attr-defined]
_set_max_pending_seconds = Job.max_pending_seconds.__set__  # type: ignore[attr-defined]
_set_preemption_count = Job.preemption_count.__set__  # type: ignore[attr-defined]
_set_retries = Job.preemption_retries_before_termination.__set__  # type: ignore[attr-defined]
_set_taken = Job.taken.__set__  # type: ignore[attr-defined]
_set_stop_deadline = Job.stop_deadline.__set__  # type: ignore[attr-defined]
_set_nomination = Job.nomination.__set__  # type: ignore[attr-defined]
_set_relocate = Job.relocate.__set__  # type: ignore[attr-defined]
_set_name = Job.name.__set__  # type: ignore[attr-defined]
_set_team_id = Job.team_id.__set__  # type: ignore[attr-defined]
_set_queue_key = Job.queue_key.__set__  # type: ignore[attr-defined]


def job_loaded(
    *,
    id: int,  # noqa: A002 (the field's name)
    share_id: int,
    priority: int,
    submitted_at: datetime,
    entries: tuple[Entry, ...],
    status: JobStatus,
    placement: Placement | None,
    runnable_since: datetime | None,
    max_pending_seconds: int | None,
    preemption_count: int,
    preemption_retries_before_termination: int | None,
    taken: bool,
    stop_deadline: datetime | None,
    nomination: Nomination | None,
    relocate: bool,
    name: str,
    team_id: int | None,
) -> Job:
    """`Job(...)` with every field given, built in half the time (see above)."""
    job = _new_object(Job)
    _set_id(job, id)
    _set_share_id(job, share_id)
    _set_priority(job, priority)
    _set_submitted_at(job, submitted_at)
    _set_entries(job, entries)
    _set_status(job, status)
    _set_placement(job, placement)
    _set_runnable_since(job, runnable_since)
    _set_max_pending_seconds(job, max_pending_seconds)
    _set_preemption_count(job, preemption_count)
    _set_retries(job, preemption_retries_before_termination)
    _set_taken(job, taken)
    _set_stop_deadline(job, stop_deadline)
    _set_nomination(job, nomination)
    _set_relocate(job, relocate)
    _set_name(job, name)
    _set_team_id(job, team_id)
    _set_queue_key(job, (-priority, submitted_at, id))
    return job


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one pass over one queue may look at. Same snapshot in, same decisions out."""

    now: datetime
    capacity: dict[str, int]
    shares: tuple[Share, ...]
    jobs: tuple[Job, ...]
    plans: tuple[Plan, ...] = ()
    ordering: Ordering = Ordering.BEST_EFFORT_FIFO
    plan_drain_seconds: int = 1800
    queue_enabled: bool = True
    idle_capacity_assignment: IdleCapacityAssignment = IdleCapacityAssignment.FIFO
    preemption_min_runtime_seconds: int = 0
    relocation_min_runtime_seconds: int = 600
    max_relocations_per_pass: int = 4


# --- decisions -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Admission:
    """Place `job_id` on its entry `entry_index`. `borrowed` = instances of it above the share's limit."""

    job_id: int
    share_id: int
    entry_index: int
    instance_type: str
    instance_count: int
    training_plan: str | None
    borrowed: int
    message: str


@dataclass(frozen=True, slots=True)
class Preemption:
    """Stop placed job `job_id` and return it to RUNNABLE (or FAILED when `fails`).

    `preemptor_job_id`/`preemptor_share_id` are None for LIMIT_REDUCED preemptions, which no job caused.
    `graceful`: the victim was taken by its executor, so it goes to STOPPING and keeps its capacity until it
    has stopped; otherwise it stops at once.
    """

    job_id: int
    share_id: int
    kind: PreemptionKind
    instance_type: str
    instances: int
    preemptor_job_id: int | None
    preemptor_share_id: int | None
    fails: bool
    message: str
    graceful: bool = False


@dataclass(frozen=True, slots=True)
class Drain:
    """Stop a job whose training plan ends within the drain window; back to RUNNABLE, not a preemption.

    `graceful` as for a preemption: a taken job goes to STOPPING first.
    """

    job_id: int
    share_id: int
    training_plan: str
    instance_type: str
    instances: int
    message: str
    graceful: bool = False


@dataclass(frozen=True, slots=True)
class Nominate:
    """Earmark entry `entry_index` for RUNNABLE `job_id` until the STOPPING jobs `victim_ids` are gone.

    The job is not placed in this pass: the first pass in which they are gone places it before any other head.
    """

    job_id: int
    share_id: int
    entry_index: int
    instance_type: str
    instance_count: int
    training_plan: str | None
    victim_ids: tuple[int, ...]
    message: str


@dataclass(frozen=True, slots=True)
class Relocation:
    """Move RUNNING `job_id` from its entry `from_entry_index` to the earlier `entry_index`
    (behaviour.md#moving-to-a-preferred-entry).

    `graceful`: the job was taken, so it goes STOPPING (outcome RUNNABLE, reason RELOCATING) and is nominated
    on `entry_index`, earmarked for it until it is placed; otherwise it stopped at once and an `Admission` of
    the same pass places it there. Not a preemption and not a failed attempt.
    """

    job_id: int
    share_id: int
    from_entry_index: int
    from_instance_type: str
    from_instance_count: int
    from_training_plan: str | None
    entry_index: int
    instance_type: str
    instance_count: int
    training_plan: str | None
    message: str
    graceful: bool = True


@dataclass(frozen=True, slots=True)
class Timeout:
    """Fail a RUNNABLE job that waited longer than its `max_pending_seconds` (PENDING_TIMEOUT)."""

    job_id: int
    share_id: int
    message: str


@dataclass(frozen=True, slots=True)
class Pending:
    """A job left RUNNABLE: why, entry by entry, and its 1-based position in its share's queue."""

    job_id: int
    share_id: int
    reason: str
    queue_position: int


@dataclass(slots=True)
class PassStats:
    jobs_considered: int = 0
    placed_within_quota: int = 0
    placed_borrowing: int = 0
    placed_on_plan: int = 0
    fallbacks: int = 0
    preemptions: dict[str, int] = field(default_factory=dict)
    plan_drains: int = 0
    timeouts: int = 0
    relocations: int = 0


@dataclass(slots=True)
class Decisions:
    """The outcome of one pass. Lists are in the order the engine decided them."""

    admissions: list[Admission] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    drains: list[Drain] = field(default_factory=list)
    timeouts: list[Timeout] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    nominations: list[Nominate] = field(default_factory=list)
    # Jobs whose nomination (from the snapshot) ends in this pass without an admission or a new nomination.
    lapsed_nominations: list[int] = field(default_factory=list)
    relocations: list[Relocation] = field(default_factory=list)
    stats: PassStats = field(default_factory=PassStats)
