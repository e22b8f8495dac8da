"""What a replay measured, per share and overall, as JSON-ready numbers.

- jobs: arrived, rejected at submission, completed, still running / waiting at the end, never started (waiting
  at the end without ever having been placed), failed (pending timeout, preemption retries), cancelled;
- GPU-hours held on demand (within the share's limits and borrowed above them), on training plans, and lent
  (idle capacity of the share used by borrowers, as `engine.accounting` apportions it), all
  integrated over the window; a job holds every GPU of its instances (a 2-GPU job on a 4-GPU instance holds
  4);
- utilization: GPU-hours within the limits / (limit GPUs x hours), GPU-hours on demand / (limit GPUs x hours)
  (above 100% when borrowing), and the share of the environment's GPU-hours;
- wait: first placement minus arrival, over the jobs that were placed (p50, p95, p99 by linear interpolation
  between closest ranks, as numpy's default); jobs never placed are counted apart, not in the percentiles;
- preemptions and the GPU-hours of work they threw away (the preempted attempt restarts from zero), and the
  same for plan drains.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from .config import configuration_summary, iso
from .meter import bucket_series
from .simulation import JobOutcome, Kind, Result, Status

HOUR = 3600.0
PERCENTILES = (50, 95, 99)
CDF_POINTS = (0, 5, 10, 25, 50, 75, 90, 95, 99, 100)


def percentile(ordered: Sequence[float], q: float) -> float | None:
    """The q-th percentile of sorted values, interpolating linearly between closest ranks; None when empty."""
    if not ordered:
        return None
    if not 0 <= q <= 100:
        raise ValueError("q must be between 0 and 100")
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def job_counts(outcomes: Iterable[JobOutcome]) -> dict[str, int]:
    counts = dict.fromkeys(
        (
            "arrived",
            "rejected",
            "completed",
            "running_at_end",
            "waiting_at_end",
            "never_started",
            "failed_pending_timeout",
            "failed_preemption_retries",
            "cancelled",
        ),
        0,
    )
    for outcome in outcomes:
        status = outcome.status
        if status == Status.NOT_ARRIVED:
            continue
        counts["arrived"] += 1
        if status == Status.REJECTED:
            counts["rejected"] += 1
        elif status == Status.SUCCEEDED:
            counts["completed"] += 1
        elif status == Status.RUNNING:
            counts["running_at_end"] += 1
        elif status == Status.RUNNABLE:
            counts["waiting_at_end"] += 1
            if outcome.first_placed_at is None:
                counts["never_started"] += 1
        elif status == Status.CANCELLED:
            counts["cancelled"] += 1
        elif outcome.reason == Kind.PENDING_TIMEOUT:
            counts["failed_pending_timeout"] += 1
        else:
            counts["failed_preemption_retries"] += 1
    return counts


def wait_summary(outcomes: Iterable[JobOutcome]) -> dict[str, Any]:
    waits = sorted(w for o in outcomes if (w := o.wait_seconds) is not None)
    summary: dict[str, Any] = {f"p{q}": percentile(waits, q) for q in PERCENTILES}
    summary["mean"] = sum(waits) / len(waits) if waits else None
    summary["placed_jobs"] = len(waits)
    summary["cdf"] = {str(q): percentile(waits, q) for q in CDF_POINTS}
    return summary


def summarize(result: Result, *, buckets: int = 240) -> dict[str, Any]:
    """Per share and overall metrics of one replay, the utilization series, and how the replay ran."""
    config = result.configuration
    meter = result.meter
    hours = max(result.end - result.start, 0.0) / HOUR
    capacity_gpus = config.capacity_gpus()
    by_share: dict[str, list[JobOutcome]] = {share.name: [] for share in config.shares}
    for outcome in result.outcomes.values():
        by_share.setdefault(outcome.job.share, []).append(outcome)
    preemptions: dict[str, int] = {}
    drains: dict[str, int] = {}
    for record in result.records:
        if record.kind.startswith("PREEMPTED"):
            preemptions[record.share] = preemptions.get(record.share, 0) + 1
        elif record.kind == Kind.PLAN_EXPIRING:
            drains[record.share] = drains.get(record.share, 0) + 1
    shares = []
    for share in config.shares:
        i = meter.position[result.share_ids[share.name]]
        outcomes = by_share[share.name]
        limit_gpus = sum(n * config.gpus_of(t) for t, n in share.limits.items())
        on_demand, borrowed = meter.on_demand[i] / HOUR, meter.borrowed[i] / HOUR
        shares.append(
            {
                "share": share.name,
                "strategy": str(share.strategy),
                "limit_gpus": limit_gpus,
                "jobs": job_counts(outcomes),
                "gpu_hours": {
                    "used": on_demand + meter.on_plan[i] / HOUR,
                    "on_demand": on_demand,
                    "within_limits": on_demand - borrowed,
                    "borrowed": borrowed,
                    "lent": meter.lent[i] / HOUR,
                    "on_plans": meter.on_plan[i] / HOUR,
                },
                "utilization": {
                    "of_limits": _ratio(on_demand - borrowed, limit_gpus * hours),
                    "of_limits_with_borrowing": _ratio(on_demand, limit_gpus * hours),
                    "of_environment": _ratio(on_demand, capacity_gpus * hours),
                },
                "wait_seconds": wait_summary(outcomes),
                "preemptions": preemptions.get(share.name, 0),
                "preempted_gpu_hours_lost": sum(o.lost_gpu_seconds for o in outcomes) / HOUR,
                "plan_drains": drains.get(share.name, 0),
                "drained_gpu_hours_lost": sum(o.drained_gpu_seconds for o in outcomes) / HOUR,
                "stopping_gpu_hours": sum(o.stopping_gpu_seconds for o in outcomes) / HOUR,
            }
        )
    everyone = list(result.outcomes.values())
    on_demand = sum(meter.on_demand) / HOUR
    overall = {
        "capacity_gpus": capacity_gpus,
        "limit_gpus": sum(s["limit_gpus"] for s in shares),
        "jobs": job_counts(everyone),
        "gpu_hours": {
            "used": on_demand + sum(meter.on_plan) / HOUR,
            "on_demand": on_demand,
            "borrowed": sum(meter.borrowed) / HOUR,
            "lent": sum(meter.lent) / HOUR,
            "on_plans": sum(meter.on_plan) / HOUR,
            "capacity": capacity_gpus * hours,
        },
        "utilization": {
            "of_limits": _ratio(
                on_demand - sum(meter.borrowed) / HOUR, sum(s["limit_gpus"] for s in shares) * hours
            ),
            "of_environment": _ratio(on_demand, capacity_gpus * hours),
        },
        "wait_seconds": wait_summary(everyone),
        "preemptions": sum(preemptions.values()),
        "preempted_gpu_hours_lost": sum(o.lost_gpu_seconds for o in everyone) / HOUR,
        "plan_drains": sum(drains.values()),
        "drained_gpu_hours_lost": sum(o.drained_gpu_seconds for o in everyone) / HOUR,
        "stopping_gpu_hours": sum(o.stopping_gpu_seconds for o in everyone) / HOUR,
        "relocations": sum(o.relocations for o in everyone),
        "jobs_relocated": sum(1 for o in everyone if o.relocations),
        "gpu_hours_moved_onto_plans": sum(o.moved_onto_plan_gpu_seconds for o in everyone) / HOUR,
        "jobs_of_unknown_shares": dict(result.unknown_shares),
        "borrowing_fairness": jain_index([s["gpu_hours"]["borrowed"] for s in shares]),
        "reclaim_delay_seconds": reclaim_delays(result),
    }
    times, used, borrowed = bucket_series(meter.series, start=result.start, end=result.end, buckets=buckets)
    stats = result.stats
    return {
        "configuration": configuration_summary(config),
        "window": {"start": iso(result.start), "end": iso(result.end), "hours": hours},
        "shares": shares,
        "overall": overall,
        "series": {
            "time": [iso(t) for t in times],
            "gpus_in_use": {
                share.name: [round(v, 3) for v in used[k]] for k, share in enumerate(config.shares)
            },
            "gpus_borrowed": {
                share.name: [round(v, 3) for v in borrowed[k]] for k, share in enumerate(config.shares)
            },
        },
        "replay": {
            "jobs": result.jobs,
            "wall_seconds": stats.wall_seconds,
            "cpu_seconds": stats.cpu_seconds,
            "engine_seconds": stats.engine_seconds,
            "jobs_per_second": result.jobs / stats.wall_seconds if stats.wall_seconds else None,
            "passes_on_clock": stats.passes_on_clock,
            "passes_run": stats.passes_run,
            "passes_reduced": stats.passes_reduced,
            "passes_preempting": stats.passes_preempting,
            "passes_whole": stats.passes_whole,
            "reduced_retries": stats.reduced_retries,
            "preempting_retries": dict(sorted(stats.preempting_retries.items())),
            "seconds_by_pass": dict(sorted(stats.seconds_by_pass.items())),
            "passes_skipped_after_events": stats.passes_skipped_after_events,
        },
    }


def jain_index(amounts: Sequence[float]) -> float | None:
    """Jain's fairness index of the amounts above 0 (shares that borrowed): 1 when all equal, 1/n at worst."""
    positive = [amount for amount in amounts if amount > 0]
    if not positive:
        return None
    return sum(positive) ** 2 / (len(positive) * sum(amount * amount for amount in positive))


def reclaim_delays(result: Result) -> dict[str, Any]:
    """What a lender sees when it takes its capacity back: from its job's submission to the placement for
    which it reclaimed (p50, p95, how many such placements)."""
    reclaims = {
        (record.preemptor_job_id, record.time)
        for record in result.records
        if record.kind == Kind.PREEMPTED_RECLAIM and record.preemptor_job_id in result.outcomes
    }
    delays = sorted(at - result.outcomes[job_id].job.submitted_at for job_id, at in reclaims)
    return {"p50": percentile(delays, 50), "p95": percentile(delays, 95), "placements": len(delays)}


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole > 0 else None


def waits_of(result: Result) -> list[float]:
    """Every placed job's wait, sorted (for the charts)."""
    return sorted(w for o in result.outcomes.values() if (w := o.wait_seconds) is not None)
