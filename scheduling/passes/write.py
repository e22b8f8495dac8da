"""Decisions -> rows: a pass's admissions, preemptions, drains, timeouts and pending reasons written back.

Every write is a bulk statement (`scheduling.passes.bulk`), so a pass costs a fixed number of statements
whatever the number of jobs. The caller holds the queue's row lock inside the pass's transaction.
"""

from __future__ import annotations

import logging
import operator
from datetime import datetime

from django.conf import settings
from django.db.models import F, Max, Subquery

from engine import accounting
from engine import types as et
from scheduling.models import (
    CLAUSE_SEPARATOR,
    Event,
    EventKind,
    Executor,
    Job,
    JobAttempt,
    JobQueue,
    JobStatus,
    PendingClause,
    PendingState,
    ShareUsageSample,
    pending_clause_id,
)
from scheduling.passes.bulk import rows_delete, rows_insert, rows_update
from scheduling.passes.snapshot import JOB_COLUMNS, Index
from scheduling.passes.stops import (
    PROTOCOL_FIELDS,
    Settled,
    released_fields,
    stop_deadline,
    stop_outcome_for,
    stopping_fields,
    untaken_fields,
)
from scheduling.passes.tasks import tasks_close
from scheduling.passes.work import work_changed

decision_logger = logging.getLogger("quotaportal.scheduling.decisions")
_SHARE, _CLAUSES, _POSITION, _TEAM = (
    JOB_COLUMNS.index(name)
    for name in ("quota_share_id", "pending__clauses", "pending__queue_position", "team_id")
)

_FULL_FIELDS = (
    "status",
    "status_reason",
    "selected_instance_type_id",
    "selected_instance_count",
    "selected_training_plan_id",
    "borrowed_instances",
    "scheduled_at",
    "runnable_since",
    "stopped_at",
    "preemption_count",
    *PROTOCOL_FIELDS,
)


def decisions_log(*, job_queue: JobQueue, decisions: et.Decisions, index: Index) -> None:
    """One log line per decision, with queue, share and job as fields (LOG_FORMAT=json makes them keys)."""
    if not decision_logger.isEnabledFor(logging.INFO):
        return
    share = index.share_names.get
    for a in decisions.admissions:
        fields = {
            "queue": job_queue.name,
            "share": share(a.share_id),
            "job": a.job_id,
            "decision": "admit",
            "instance_type": a.instance_type,
            "instances": a.instance_count,
            "borrowed": a.borrowed,
            "training_plan": a.training_plan,
            "entry": a.entry_index + 1,
        }
        decision_logger.info(
            "admit queue=%s share=%s job=%s %s",
            job_queue.name,
            fields["share"],
            a.job_id,
            a.message,
            extra=fields,
        )
    for p in decisions.preemptions:
        fields = {
            "queue": job_queue.name,
            "share": share(p.share_id),
            "job": p.job_id,
            "decision": p.kind.value,
            "instance_type": p.instance_type,
            "instances": p.instances,
            "preemptor_job": p.preemptor_job_id,
            "preemptor_share": share(p.preemptor_share_id) if p.preemptor_share_id else None,
        }
        decision_logger.info(
            "preempt queue=%s share=%s job=%s %s",
            job_queue.name,
            fields["share"],
            p.job_id,
            p.message,
            extra=fields,
        )
    for d in decisions.drains:
        decision_logger.info(
            "drain queue=%s share=%s job=%s %s",
            job_queue.name,
            share(d.share_id),
            d.job_id,
            d.message,
            extra={
                "queue": job_queue.name,
                "share": share(d.share_id),
                "job": d.job_id,
                "decision": "drain",
                "training_plan": d.training_plan,
            },
        )
    for r in decisions.relocations:
        decision_logger.info(
            "relocate queue=%s share=%s job=%s %s",
            job_queue.name,
            share(r.share_id),
            r.job_id,
            relocation_words(r),
            extra={
                "queue": job_queue.name,
                "share": share(r.share_id),
                "job": r.job_id,
                "decision": "relocate",
                "instance_type": r.instance_type,
                "instances": r.instance_count,
                "training_plan": r.training_plan,
                "entry": r.entry_index + 1,
                "from_entry": r.from_entry_index + 1,
            },
        )
    for t in decisions.timeouts:
        decision_logger.info(
            "timeout queue=%s share=%s job=%s %s",
            job_queue.name,
            share(t.share_id),
            t.job_id,
            t.message,
            extra={
                "queue": job_queue.name,
                "share": share(t.share_id),
                "job": t.job_id,
                "decision": "timeout",
            },
        )


def usage_after(snap: et.Snapshot, decisions: et.Decisions) -> dict[tuple[int, str], int]:
    """(share id, type) -> on-demand instances held once the pass's decisions are applied."""
    # A graceful victim is STOPPING: it holds its instances until it has stopped.
    stopped = {p.job_id for p in decisions.preemptions if not p.graceful}
    stopped |= {d.job_id for d in decisions.drains if not d.graceful}
    stopped |= {r.job_id for r in decisions.relocations if not r.graceful}  # placed again by an admission
    usage: dict[tuple[int, str], int] = {}
    for job in snap.jobs:
        placement = job.placement
        if placement is not None and placement.training_plan is None and job.id not in stopped:
            key = (job.share_id, placement.instance_type)
            usage[key] = usage.get(key, 0) + placement.instance_count
    for admission in decisions.admissions:
        if admission.training_plan is None:
            key = (admission.share_id, admission.instance_type)
            usage[key] = usage.get(key, 0) + admission.instance_count
    return usage


def last_sample_at(job_queue_id) -> Subquery:
    """When the queue's usage was last sampled: an expression, so the pass reads it with its queue lock."""
    return Subquery(
        ShareUsageSample.objects.filter(quota_share__job_queue_id=job_queue_id)
        .values("quota_share__job_queue_id")
        .annotate(last=Max("taken_at"))
        .values("last")[:1]
    )


def usage_sample(
    *,
    job_queue: JobQueue,
    snap: et.Snapshot,
    decisions: et.Decisions,
    index: Index,
    now: datetime,
    last: datetime | None,
) -> None:
    """Every SAMPLE_INTERVAL_SECONDS, record per share and type what the charts draw: owned, borrowed,
    lent. `last`: when the queue was last sampled (`last_sample_at`, read with the queue lock)."""
    if last is not None and (now - last).total_seconds() < settings.SAMPLE_INTERVAL_SECONDS:
        return
    rows, _, _ = accounting.share_usage(
        capacity=snap.capacity,
        limits={share.id: share.limits for share in snap.shares},
        strategies={share.id: share.strategy for share in snap.shares},
        usage=usage_after(snap, decisions),
        lending_limits={share.id: share.lending_limits for share in snap.shares},
    )
    pending: dict[int, int] = {}
    for item in decisions.pending:
        pending[item.share_id] = pending.get(item.share_id, 0) + 1
    rows_insert(
        ShareUsageSample,
        [
            dict(
                quota_share_id=row.share_id,
                instance_type_id=index.type_ids[row.instance_type],
                taken_at=now,
                limit=row.limit,
                usage=row.usage,
                borrowed=row.borrowed,
                lent=row.lent,
                pending=pending.get(row.share_id, 0),
            )
            for row in rows
            if row.share_id in index.share_names
        ],
    )


def relocation_words(relocation: et.Relocation) -> str:
    """From where to where and why: `from ml.p4d.24xlarge x4 on-demand (entry 2) to training plan dec-p5 ...`."""

    def where(instance_type: str, count: int, plan: str | None, index: int) -> str:
        on = f"training plan {plan}" if plan else "on-demand"
        return f"{instance_type} x{count} {on} (entry {index + 1})"

    before = where(
        relocation.from_instance_type,
        relocation.from_instance_count,
        relocation.from_training_plan,
        relocation.from_entry_index,
    )
    after = where(
        relocation.instance_type, relocation.instance_count, relocation.training_plan, relocation.entry_index
    )
    return f"relocating from {before} to {after}: {relocation.message}"


def decisions_write(
    *,
    job_queue: JobQueue,
    decisions: et.Decisions,
    index: Index,
    now: datetime,
    settled: Settled | None = None,
) -> tuple[list[int], list[int]]:
    """Write a pass's housekeeping (`settled`) and decisions: job rows, attempts and events, in bulk.

    A graceful victim (one its executor has taken) goes to STOPPING with a deadline; any other stops at once.
    """
    changed: dict[int, dict] = {}
    events: list[dict] = []
    stopped: dict[int, str] = {}  # job id -> why its open attempt ended
    grace = job_queue.service_environment.stop_grace_seconds

    def row(job_id: int) -> dict:
        if job_id not in changed:
            changed[job_id] = dict(zip(JOB_COLUMNS, index.jobs[job_id], strict=True))
        return changed[job_id]

    def event(kind: str, job_id: int, message: str, **extra) -> None:
        events.append(
            dict(
                kind=str(kind),
                job_id=job_id,
                team_id=index.jobs[job_id][_TEAM],
                job_queue_id=job_queue.pk,
                quota_share_id=index.jobs[job_id][_SHARE],
                message=message,
                created_at=now,
                **extra,
            )
        )

    def stop(job_id: int, *, status: str, reason: str, graceful: bool, why: str, words: str = "") -> None:
        """Stop a placed job at once, or (graceful) ask its executor to: STOPPING until the deadline.

        `why` goes into the status reason with its code; the event says `words` (`why` without the code)."""
        job = row(job_id)
        if graceful:
            deadline = stop_deadline(now=now, grace_seconds=grace)
            job.update(stopping_fields(outcome=status, reason=reason, why=why, deadline=deadline))
            said = words or why
            event(EventKind.STOPPING, job_id, f"{job['name']} stopping until {deadline:%H:%M:%S}: {said}")
            return
        stopped[job_id] = reason
        job.update(released_fields(status=status, reason=reason, now=now))

    if settled is not None:
        changed.update(settled.rows)
        stopped.update(settled.closed)
        for kind, job_id, message in settled.events:
            event(kind, job_id, message)

    for drain in decisions.drains:
        reason = f"TRAINING_PLAN_EXPIRING: {drain.message}"
        event(
            EventKind.PLAN_EXPIRING,
            drain.job_id,
            drain.message,
            instance_type_id=index.type_ids.get(drain.instance_type),
            instances=drain.instances,
        )
        stop(drain.job_id, status=JobStatus.RUNNABLE, reason=reason, graceful=drain.graceful, why=reason)

    preempted: list[int] = []
    for preemption in decisions.preemptions:
        job = row(preemption.job_id)
        preempted.append(preemption.job_id)
        code = preemption.kind.value  # the engine names its kinds as the events and reason codes do
        event(
            preemption.kind.value,
            preemption.job_id,
            preemption.message,
            other_job_id=preemption.preemptor_job_id,
            other_share_id=preemption.preemptor_share_id,
            instance_type_id=index.type_ids.get(preemption.instance_type),
            instances=preemption.instances,
        )
        job["preemption_count"] = job["preemption_count"] + 1
        reason = f"{code}: {preemption.message}"
        if preemption.fails:
            reason = (
                f"PREEMPTION_RETRIES_EXHAUSTED: preempted {job['preemption_count']} time(s), "
                f"the limit is {job['preemption_retries_before_termination']}; "
                f"last: {preemption.message}"
            )
            if not preemption.graceful:  # a graceful victim fails once it has stopped
                event(EventKind.FAILED, preemption.job_id, reason)
        stop(
            preemption.job_id,
            status=stop_outcome_for(fails=preemption.fails),
            reason=reason,
            graceful=preemption.graceful,
            why=f"{code}: {preemption.message}",
            words=preemption.message,
        )

    # A relocation ends the attempt like a preemption, but is none: no preemption count, no failed attempt.
    # A taken job stops gracefully, nominated on its new entry with itself as its one victim (the next
    # passes earmark that entry for it); one not taken stops at once and an admission below places it.
    for relocation in decisions.relocations:
        reason = f"RELOCATING: {relocation.message}"
        event(
            EventKind.RELOCATING,
            relocation.job_id,
            relocation_words(relocation),
            instance_type_id=index.type_ids.get(relocation.instance_type),
            instances=relocation.instance_count,
        )
        stop(
            relocation.job_id,
            status=JobStatus.RUNNABLE,
            reason=reason,
            graceful=relocation.graceful,
            why=reason,
            words=relocation.message,
        )
        if relocation.graceful:
            row(relocation.job_id).update(
                nominated_entry=relocation.entry_index, nominated_victims=[relocation.job_id]
            )

    for timeout in decisions.timeouts:
        job = row(timeout.job_id)
        reason = f"PENDING_TIMEOUT: {timeout.message}"
        job.update(status=JobStatus.FAILED, status_reason=reason, stopped_at=now)
        event(EventKind.FAILED, timeout.job_id, reason)

    # A nomination is a transition of a RUNNABLE job: its status_reason says so (why it waits is pending's).
    for nomination in decisions.nominations:
        row(nomination.job_id).update(
            status_reason=f"NOMINATED: {nomination.message}",
            nominated_entry=nomination.entry_index,
            nominated_victims=sorted(nomination.victim_ids),
        )
    for job_id in decisions.lapsed_nominations:
        row(job_id).update(
            status_reason="NOMINATION_LAPSED: the capacity earmarked for it no longer fits it",
            nominated_entry=None,
            nominated_victims=[],
        )

    attempts: list[dict] = []
    admitted: list[int] = []
    for admission in decisions.admissions:
        job = row(admission.job_id)
        admitted.append(admission.job_id)
        type_id = index.type_ids[admission.instance_type]
        plan_id = index.plan_ids.get(admission.training_plan) if admission.training_plan else None
        job.update(
            status=JobStatus.SCHEDULED,
            status_reason=admission.message,
            selected_instance_type_id=type_id,
            selected_instance_count=admission.instance_count,
            selected_training_plan_id=plan_id,
            borrowed_instances=admission.borrowed,
            scheduled_at=now,
            stopped_at=None,
            attempt=job["attempt"] + 1,
            nominated_entry=None,
            nominated_victims=[],
            **untaken_fields(),
        )
        attempts.append(
            dict(
                job_id=admission.job_id,
                attempt=job["attempt"],
                instance_type_id=type_id,
                instance_count=admission.instance_count,
                training_plan_id=plan_id,
                borrowed_instances=admission.borrowed,
                scheduled_at=now,
            )
        )
        placed = dict(instance_type_id=type_id, instances=admission.instance_count)
        event(EventKind.ADMITTED, admission.job_id, admission.message, **placed)
        if admission.borrowed:
            event(
                EventKind.BORROWED,
                admission.job_id,
                f"borrowing {admission.borrowed} {admission.instance_type} above share "
                f"{index.share_names.get(admission.share_id)}'s limit",
                instance_type_id=type_id,
                instances=admission.borrowed,
            )
        if admission.entry_index > 0:
            event(
                EventKind.FALLBACK,
                admission.job_id,
                f"fell back to entry {admission.entry_index + 1}: {admission.message}",
                **placed,
            )

    # Only the reasons and positions that changed are rewritten (every one on a queue's first pass).
    waiting, stale, clauses_new, clauses_gone = pending_rows(
        job_queue=job_queue, decisions=decisions, index=index
    )

    # The open attempt of each stopped job, matched by its job: no read of the attempts' ids first.
    rows_update(
        model=JobAttempt,
        fields=("stopped_at", "status_reason"),
        rows={job_id: {"stopped_at": now, "status_reason": why} for job_id, why in stopped.items()},
        key="job_id",
        where_null="stopped_at",
    )
    rows_update(model=Job, fields=_FULL_FIELDS, rows=changed)
    if tasks_close(stopped, now=now):
        work_changed(environment=job_queue.service_environment)  # executors free the slots of released claims
    rows_delete(PendingState, stale)
    rows_insert(PendingClause, clauses_new)
    # In key order, so the new rows append to the primary key's index rather than land all over it.
    rows_insert(PendingState, sorted(waiting, key=operator.itemgetter("job_id")))
    rows_delete(PendingClause, clauses_gone)
    rows_insert(JobAttempt, attempts)
    rows_insert(Event, events)
    if settled is not None:
        for executor_id, lost in sorted(settled.lost_by_executor.items()):
            Executor.objects.filter(pk=executor_id).update(jobs_lost=F("jobs_lost") + lost)
    return admitted, preempted


def pending_rows(
    *, job_queue: JobQueue, decisions: et.Decisions, index: Index
) -> tuple[list[dict], list[int], list[dict], list[int]]:
    """The pending rows to write (the jobs whose reason or position changed), the rows to remove (those
    rewritten, and those of jobs no longer waiting), the clauses to add, and the clauses to remove.

    A reason is stored as its clauses (`PendingState.clauses`): split on "; ", which joins them back into the
    very same sentence. A clause no pending row used before this pass nor uses after it is removed; one that
    only the rows before it used stays until the next pass, for a page that read such a row just before.
    """
    queue_id = job_queue.pk
    if index.clause_ids is None:
        raise ValueError("the snapshot was loaded without the queue's clauses: snapshot_load(clauses=True)")
    known = set(index.clause_ids)  # and those this pass adds
    ids_of: dict[str, str] = {}  # a clause's words -> its id as `clauses` spells it
    added: list[dict] = []

    def clause(text: str) -> str:
        found = ids_of.get(text)
        if found is None:
            clause_id = pending_clause_id(queue_id, text)
            found = ids_of[text] = f"{clause_id:x}"
            if clause_id not in known:
                known.add(clause_id)
                added.append(dict(id=clause_id, job_queue_id=queue_id, text=text))
        return found

    spelled: dict[str, str] = {}  # a whole reason -> its clauses (many jobs wait for the same reason)
    waiting: list[dict] = []
    for pending in decisions.pending:
        clauses = spelled.get(pending.reason)
        if clauses is None:
            clauses = spelled[pending.reason] = " ".join(map(clause, pending.reason.split(CLAUSE_SEPARATOR)))
        current = index.jobs[pending.job_id]
        if current[_CLAUSES] != clauses or current[_POSITION] != pending.queue_position:
            waiting.append(
                dict(job_id=pending.job_id, clauses=clauses, queue_position=pending.queue_position)
            )
    still_waiting = {pending.job_id for pending in decisions.pending}
    # Rows to remove: the rewritten ones that exist, and those of jobs that left the queue in this pass.
    stale = [row["job_id"] for row in waiting if index.jobs[row["job_id"]][_CLAUSES] is not None]
    stale += [
        job_id
        for job_id, current in index.jobs.items()
        if current[_CLAUSES] is not None and job_id not in still_waiting
    ]
    used = {int(spelling, 16) for spelling in ids_of.values()}
    unused = known - used
    if unused:
        # Used before but not after: only the rows rewritten or removed can have used them (a row kept uses
        # the same clauses after the pass).
        before = " ".join(index.jobs[job_id][_CLAUSES] for job_id in stale).split()
        unused -= {int(part, 16) for part in set(before)}
    return waiting, stale, added, sorted(unused)
