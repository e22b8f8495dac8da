"""Short builders for engine scenarios, and `apply_decisions`: one pass's decisions -> the next snapshot."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from engine import (
    Decisions,
    Entry,
    Job,
    JobStatus,
    Nomination,
    Placement,
    Plan,
    Share,
    Snapshot,
    Strategy,
)

NOW = datetime(2025, 6, 2, 12, 0, tzinfo=UTC)
P5 = "ml.p5.48xlarge"
P4 = "ml.p4d.24xlarge"
G5 = "ml.g5.12xlarge"

RESERVE = Strategy.RESERVE
LEND = Strategy.LEND
LEND_AND_BORROW = Strategy.LEND_AND_BORROW


def share(share_id: int, name: str, strategy: Strategy = LEND, **limits_and_fields) -> Share:
    """`share(1, "nlp", RESERVE, limits={P5: 8}, in_share_preemption=True)`."""
    limits = limits_and_fields.pop("limits", {})
    return Share(id=share_id, name=name, strategy=strategy, limits=dict(limits), **limits_and_fields)


def entry(instance_type: str, count: int, plan: str | None = None) -> Entry:
    return Entry(instance_type, count, plan)


def runnable(job_id: int, owner: Share, *entries: Entry, priority: int = 0, **fields) -> Job:
    """A RUNNABLE job; by default submitted in id order, a day before NOW."""
    fields.setdefault("submitted_at", NOW - timedelta(days=1) + timedelta(seconds=job_id))
    return Job(id=job_id, share_id=owner.id, priority=priority, entries=tuple(entries), **fields)


def placed(
    job_id: int,
    owner: Share,
    instance_type: str,
    count: int,
    *,
    plan: str | None = None,
    priority: int = 0,
    scheduled_minutes_ago: int = 60,
    entries: tuple[Entry, ...] | None = None,
    **fields,
) -> Job:
    """A RUNNING job holding `count` of `instance_type` on-demand or on `plan` (its only entry by default)."""
    fields.setdefault("submitted_at", NOW - timedelta(days=1) + timedelta(seconds=job_id))
    return Job(
        id=job_id,
        share_id=owner.id,
        priority=priority,
        entries=entries or (Entry(instance_type, count, plan),),
        status=JobStatus.RUNNING,
        placement=Placement(instance_type, count, plan, NOW - timedelta(minutes=scheduled_minutes_ago)),
        **fields,
    )


def plan(
    plan_id: int,
    name: str,
    instance_type: str,
    count: int,
    *,
    started_hours_ago: float = 1,
    ends_in_hours: float = 24,
    share_ids: frozenset[int] = frozenset(),
) -> Plan:
    return Plan(
        id=plan_id,
        name=name,
        instance_type=instance_type,
        instance_count=count,
        start_time=NOW - timedelta(hours=started_hours_ago),
        end_time=NOW + timedelta(hours=ends_in_hours),
        share_ids=frozenset(share_ids),
    )


def snapshot(capacity: dict[str, int], shares: list[Share], jobs: list[Job], **fields) -> Snapshot:
    fields.setdefault("now", NOW)
    return Snapshot(capacity=dict(capacity), shares=tuple(shares), jobs=tuple(jobs), **fields)


# --- reading decisions -----------------------------------------------------------------------------------


def admitted(decisions: Decisions) -> dict[int, tuple[str, int, str | None]]:
    """job id -> (instance type, count, plan) of every admission."""
    return {a.job_id: (a.instance_type, a.instance_count, a.training_plan) for a in decisions.admissions}


def preempted(decisions: Decisions) -> list[int]:
    return [p.job_id for p in decisions.preemptions]


def reason_of(decisions: Decisions, job_id: int) -> str:
    [pending] = [p for p in decisions.pending if p.job_id == job_id]
    return pending.reason


# --- the next state --------------------------------------------------------------------------------------


def apply_decisions(before: Snapshot, decisions: Decisions, *, stop_grace_seconds: int = 120) -> Snapshot:
    """The snapshot the next pass would read once the decisions are written (finished jobs leave it).

    A graceful victim or drain is STOPPING (its deadline `stop_grace_seconds` on) and keeps its placement;
    `finish_stopping` ends it. Nominations are set, and cleared by a lapse or an admission.
    """
    admissions = {a.job_id: a for a in decisions.admissions}
    stopped = {p.job_id: p for p in decisions.preemptions if not p.graceful}
    drained = {d.job_id for d in decisions.drains if not d.graceful}
    stopping = {p.job_id for p in decisions.preemptions if p.graceful} | {
        d.job_id for d in decisions.drains if d.graceful
    }
    counted = {p.job_id for p in decisions.preemptions if p.graceful}
    relocated = {r.job_id: r for r in decisions.relocations if r.graceful}
    nominated = {n.job_id: n for n in decisions.nominations}
    lapsed = set(decisions.lapsed_nominations)
    gone = {t.job_id for t in decisions.timeouts} | {
        p.job_id for p in decisions.preemptions if p.fails and not p.graceful
    }
    jobs: list[Job] = []
    for job in before.jobs:
        if job.id in gone:
            continue
        if job.id in stopping:
            job = replace(
                job,
                status=JobStatus.STOPPING,
                stop_deadline=before.now + timedelta(seconds=stop_grace_seconds),
                preemption_count=job.preemption_count + (job.id in counted),
            )
        if job.id in relocated:  # STOPPING, nominated on its new entry with itself as its one victim
            job = replace(
                job,
                status=JobStatus.STOPPING,
                stop_deadline=before.now + timedelta(seconds=stop_grace_seconds),
                nomination=Nomination(relocated[job.id].entry_index, frozenset({job.id})),
            )
        if job.id in lapsed:
            job = replace(job, nomination=None)
        if job.id in nominated:
            nomination = nominated[job.id]
            job = replace(
                job, nomination=Nomination(nomination.entry_index, frozenset(nomination.victim_ids))
            )
        if job.id in stopped:
            job = replace(
                job,
                status=JobStatus.RUNNABLE,
                placement=None,
                runnable_since=before.now,
                preemption_count=job.preemption_count + 1,
            )
        elif job.id in drained:
            job = replace(job, status=JobStatus.RUNNABLE, placement=None, runnable_since=before.now)
        if job.id in admissions:
            admission = admissions[job.id]
            job = replace(
                job,
                status=JobStatus.SCHEDULED,
                placement=Placement(
                    admission.instance_type, admission.instance_count, admission.training_plan, before.now
                ),
                nomination=None,
                taken=False,
            )
        jobs.append(job)
    return replace(before, jobs=tuple(jobs))


def finish_stopping(snap: Snapshot, job_ids: set[int] | None = None) -> Snapshot:
    """STOPPING jobs (all, or `job_ids`) have stopped: back to RUNNABLE, or gone when out of retries."""
    jobs: list[Job] = []
    for job in snap.jobs:
        if job.status == JobStatus.STOPPING and (job_ids is None or job.id in job_ids):
            retries = job.preemption_retries_before_termination
            if retries is not None and job.preemption_count > retries:
                continue
            job = replace(
                job,
                status=JobStatus.RUNNABLE,
                placement=None,
                stop_deadline=None,
                taken=False,
                runnable_since=snap.now,
            )
        jobs.append(job)
    return replace(snap, jobs=tuple(jobs))
