"""The demo's reclaim: a borrower's long jobs take a lender's idle capacity, and the lender's own jobs arrive
a little later, so within the first minutes of `make run` a pass preempts the borrower to give it back.

`seed_demo` submits the borrower's jobs at once and sends `scheduling.tasks.demo_lenders_arrive` with a
countdown; the task calls `demo_lender_jobs_submit`. Client tokens make both safe to run again.

The second, small environment `local` does the same with real processes: its executor is `external`, and
`make run` starts the reference agent (`agent/`) on it, which runs each job's `agent/examples/train.py` (it
prints progress, checkpoints on SIGTERM and resumes from its checkpoint). Vision's two jobs fill it, one of them
on capacity borrowed from nlp; nlp's job arrives a minute later and reclaims it: the borrowed job is STOPPING
(SIGTERM, a checkpoint, STOPPED) before nlp's starts, and resumes where it stopped once nlp's has finished.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
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


# The `local` environment: a few slots of this machine, run by the agent that `make run` starts.
LOCAL_QUEUE = "local"
LOCAL_TYPE = "local.slot"
LOCAL_SLOTS = 4
LOCAL_STOP_GRACE_SECONDS = 20
LOCAL_LEASE_SECONDS = 60
LOCAL_LENDERS_ARRIVE_AFTER_SECONDS = 60
# (share, job name, instances, steps of TRAIN_STEP_SECONDS = 1 s)
LOCAL_BORROWER_JOBS = [
    ("vision", "vision-local-pretrain", 2, 900),
    ("vision", "vision-local-sweep", 2, 900),  # over vision's limit of 2: borrowed from nlp
]
LOCAL_LENDER_JOBS = [("nlp", "nlp-local-finetune", 2, 60)]


def train_command() -> list[str]:
    """The demo job's argv: the agent runs it with the job's directory as its working directory."""
    return ["python3", str(Path(settings.BASE_DIR) / "agent" / "examples" / "train.py")]


def _local_jobs_submit(*, job_queue: JobQueue, jobs: list[tuple[str, str, int, int]]) -> int:
    made = 0
    for share_name, name, count, steps in jobs:
        share = QuotaShare.objects.select_related("team").get(job_queue=job_queue, name=share_name)
        submitter = share.team.memberships.order_by("user__username").first().user
        submission = job_services.JobSubmission(
            name=name,
            job_queue=job_queue,
            quota_share=share,
            instance_preferences=[
                rules.PreferenceInput(InstanceType.objects.get(name=LOCAL_TYPE), count, None)
            ],
            retry_attempts=2,
            duration_seconds=steps,  # what the estimates expect; the process decides how long it runs
            payload={
                "command": train_command(),
                "env": {"TRAIN_STEPS": str(steps), "TRAIN_STEP_SECONDS": "1"},
            },
            client_token=f"demo-local-{name}",
        )
        _, created = job_services.job_submit(user=submitter, submission=submission)
        made += created
    return made


@transaction.atomic
def demo_local_jobs_submit(*, job_queue: JobQueue) -> int:
    """Vision's jobs on `local` now, nlp's (the reclaim) a minute later; the number of jobs made."""
    made = _local_jobs_submit(job_queue=job_queue, jobs=LOCAL_BORROWER_JOBS)
    task = task_named("scheduling.tasks.demo_lenders_arrive")
    transaction.on_commit(
        lambda: task.apply_async(args=[job_queue.pk], countdown=LOCAL_LENDERS_ARRIVE_AFTER_SECONDS)
    )
    return made


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
    if job_queue.name == LOCAL_QUEUE:
        return _local_jobs_submit(job_queue=job_queue, jobs=LOCAL_LENDER_JOBS)
    return _demo_jobs_submit(job_queue=job_queue, jobs=LENDER_JOBS)
