"""Thin Celery entry points: each takes ids, calls one service and owns only retries and time limits."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.db import OperationalError
from django.utils import timezone

from scheduling.models import Heartbeat, JobQueue, ServiceEnvironment, State
from scheduling.passes.due import queues_needing_pass
from scheduling.passes.requests import pass_send, pass_waiting_clear
from scheduling.passes.run import queue_pass_run
from scheduling.services import demo, estimates, executor, history
from scheduling.services import heartbeat as heartbeats

logger = logging.getLogger("quotaportal.scheduling")


# Redis keeps a list per priority step (0 first, 9 last) and a worker takes from the first that holds a
# message: a pass (priority 0, the default) never waits behind estimates, which cost more than a small pass and
# follow every pass that placed someone. Behind 1,000 queues' estimates, 100 dirty queues waited 30-44 s for
# their passes; first in line, 7.2-8.3 s (`tools.bench_queues`). Brokers without priorities ignore it.
ESTIMATE_PRIORITY = 9


@shared_task(
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=5,
    soft_time_limit=120,
    time_limit=180,
)
def run_queue_pass(job_queue_id: int, trigger: str = "beat") -> dict:
    """One scheduling pass over one queue (safe to run twice: the pass is idempotent on a settled queue)."""
    if JobQueue.objects.filter(pk=job_queue_id).exists():
        pass_waiting_clear(job_queue_id)
        try:
            result = queue_pass_run(job_queue_id=job_queue_id, trigger=trigger)
        except JobQueue.DoesNotExist:  # deleted between the check above and the pass taking its row lock
            pass
        else:
            changed = result.admitted or result.preempted or trigger != "beat"
            if changed and estimates.estimate_due(job_queue_id=job_queue_id):
                # Trailing edge: the run sees every change of the interval that the mark opened.
                estimate_queue.apply_async(
                    (job_queue_id,), countdown=settings.ESTIMATE_INTERVAL_SECONDS, priority=ESTIMATE_PRIORITY
                )
            return {
                "job_queue_id": job_queue_id,
                "admitted": len(result.admitted),
                "preempted": len(result.preempted),
            }
    logger.info("pass skipped: queue %s was deleted while the pass waited in the broker", job_queue_id)
    return {"job_queue_id": job_queue_id, "skipped": "queue no longer exists"}


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=120, time_limit=180)
def estimate_queue(job_queue_id: int) -> int:
    """Estimated start times of one queue's RUNNABLE jobs (behaviour.md#why-pending-and-when-it-will-start), off the
    pass's hot path."""
    if not JobQueue.objects.filter(pk=job_queue_id).exists():
        return 0
    return estimates.queue_estimates_refresh(job_queue_id=job_queue_id)


@shared_task(bind=True, ignore_result=True)
def heartbeat(self) -> None:
    """A worker's sign of life (the beat recorded its own when it sent this task: `quotaportal.celery`)."""
    heartbeats.heartbeat_record(component=Heartbeat.Component.WORKER, detail=self.request.hostname or "")


@shared_task(acks_late=True, ignore_result=True)
def run_all_passes() -> int:
    """The beat: enqueue a pass for every queue that changed or has something due (`scheduling.passes.due`;
    a disabled queue too: its housekeeping and reasons), unless one already waits in the broker."""
    queue_ids = JobQueue.objects.order_by("pk").values_list("pk", flat=True)
    needing = queues_needing_pass(queue_ids, now=timezone.now())
    return sum(pass_send(job_queue_id=queue_id, trigger="beat") for queue_id in needing)


@shared_task(
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=3,
    soft_time_limit=60,
    time_limit=90,
)
def simulated_executor_tick() -> int:
    """Advance jobs on every enabled `simulated` environment."""
    queue_ids = JobQueue.objects.filter(
        service_environment__executor=ServiceEnvironment.Executor.SIMULATED,
        service_environment__state=State.ENABLED,
    ).values_list("pk", flat=True)
    return sum(executor.simulated_executor_tick(job_queue_id=queue_id) for queue_id in queue_ids)


@shared_task(acks_late=True, ignore_result=True)
def prune_history() -> int:
    """Drop utilization samples and pass records older than HISTORY_DAYS (events: prune_events)."""
    return history.history_prune()


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=600, time_limit=660)
def prune_events() -> int:
    """Drop events past EVENT_RETENTION_DAYS, in batches (CONFIG_CHANGED and unfinished jobs' events kept)."""
    return history.events_prune()


@shared_task(acks_late=True, ignore_result=True)
def demo_lenders_arrive(job_queue_id: int) -> int:
    """The demo's lender submits its jobs, a minute or two after seeding (`scheduling.services.demo`)."""
    return demo.demo_lender_jobs_submit(job_queue_id=job_queue_id)
