"""The demo's reclaim: a borrower's long jobs take a lender's idle capacity, and the lender's own jobs arrive
a little later, so within the first minutes of `make run` a pass preempts the borrower to give it back.

`seed_demo` submits the borrower's jobs at once and sends `scheduling.tasks.demo_lenders_arrive` with a
countdown; the task calls `demo_lender_jobs_submit`. Client tokens make both safe to run again.
"""

from __future__ import annotations

from django.db import transaction

from quotaportal.celery import task_named
from scheduling import rules
from scheduling.models import InstanceType, JobQueue, QuotaShare
from scheduling.services import jobs as job_services

# Seconds after seeding at which the lender's jobs are submitted: after the first passes have placed the
# borrower's jobs, early enough that a newcomer sees the reclaim in the first minutes.
LENDERS_ARRIVE_AFTER_SECONDS = 90

# (share, job name, instance type, instances, duration seconds). The borrower's jobs hold more than its
# limit for half an hour; the lender's want their own capacity back.
BORROWER_JOBS = [
    ("vision", "vision-long-pretrain", "ml.g5.12xlarge", 8, 1800),
    ("vision", "vision-long-sweep", "ml.g5.12xlarge", 6, 1800),
]
LENDER_JOBS = [
    ("speech", "speech-urgent-asr", "ml.g5.12xlarge", 4, 300),
    ("speech", "speech-urgent-tts", "ml.g5.12xlarge", 4, 300),
]


def _demo_jobs_submit(*, job_queue: JobQueue, jobs: list[tuple[str, str, str, int, int]]) -> int:
    made = 0
    for share_name, name, type_name, count, duration in jobs:
        share = QuotaShare.objects.select_related("team").get(job_queue=job_queue, name=share_name)
        submitter = share.team.memberships.order_by("user__username").first().user
        submission = job_services.JobSubmission(
            name=name,
            job_queue=job_queue,
            quota_share=share,
            instance_preferences=[
                rules.PreferenceInput(InstanceType.objects.get(name=type_name), count, None)
            ],
            scheduling_priority=100,
            retry_attempts=2,
            duration_seconds=duration,
            payload={"image": f"registry.example.com/{share_name}/trainer:2026.11"},
            client_token=f"demo-reclaim-{name}",
        )
        _, created = job_services.job_submit(user=submitter, submission=submission)
        made += created
    return made


@transaction.atomic
def demo_borrower_jobs_submit(*, job_queue: JobQueue) -> int:
    """Submit the borrower's long jobs and send the lender's for later; the number of jobs made."""
    made = _demo_jobs_submit(job_queue=job_queue, jobs=BORROWER_JOBS)
    task = task_named("scheduling.tasks.demo_lenders_arrive")
    transaction.on_commit(
        lambda: task.apply_async(args=[job_queue.pk], countdown=LENDERS_ARRIVE_AFTER_SECONDS)
    )
    return made


@transaction.atomic
def demo_lender_jobs_submit(*, job_queue_id: int) -> int:
    """Submit the lender's jobs, which reclaim what the borrower's jobs took; the number of jobs made."""
    job_queue = JobQueue.objects.filter(pk=job_queue_id).first()
    if job_queue is None:
        return 0
    return _demo_jobs_submit(job_queue=job_queue, jobs=LENDER_JOBS)
