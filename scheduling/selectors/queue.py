"""A queue as the next pass would start from it: RUNNABLE jobs in the engine's head order, and usage."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from engine.order import head_order
from scheduling.models import Job, JobQueue, Team, pending_words_load
from scheduling.passes.snapshot import snapshot_load
from scheduling.selectors.usage import QueueUsage, queue_usage


@dataclass
class QueueSnapshot:
    job_queue: JobQueue
    taken_at: datetime
    usage: QueueUsage
    runnable_count: int  # RUNNABLE jobs of the queue's enabled shares
    jobs: list[Job]  # the first `job_limit` of them, in head order, with share, team and pending state
    team_slugs: dict[int, str]  # team id -> slug, for the queue's shares


def queue_snapshot(*, job_queue: JobQueue, now: datetime, job_limit: int = 100) -> QueueSnapshot:
    """The queue's usage, and its RUNNABLE jobs in the order the engine takes heads (behaviour.md#order).

    The order comes from the engine itself, on the snapshot a pass loads: heads of shares under their limit
    before heads of shares at or over it, then priority, submission time and id (`engine.order.head_order`).
    18 queries: 7 `queue_usage`, 8 `snapshot_load`, the jobs shown, the teams' slugs; one more for the
    words of clauses of their reasons not read before in this process.
    """
    usage = queue_usage(job_queue=job_queue)
    snapshot, _index = snapshot_load(job_queue=job_queue, now=now)
    order = [job.id for job in head_order(snapshot)]
    shown = order[:job_limit]
    rows = Job.objects.select_related("quota_share", "team", "pending").in_bulk(shown) if shown else {}
    pending_words_load(rows.values())  # their reasons, worded in one query
    team_slugs = dict(
        Team.objects.filter(pk__in={share.team_id for share in usage.shares}).values_list("id", "slug")
    )
    return QueueSnapshot(
        job_queue=job_queue,
        taken_at=now,
        usage=usage,
        runnable_count=len(order),
        jobs=[rows[job_id] for job_id in shown if job_id in rows],
        team_slugs=team_slugs,
    )
