"""The queue's row lock: the one lock every change to a queue's jobs takes first.

A pass, a cancellation, an executor report, a priority change, the simulated executor and a configuration
change of a queue's shares, plans or environment all take it before anything else, so they never interleave
on one queue. Submissions do not take it: they only insert rows, which the lock lets through.
"""

from __future__ import annotations

from scheduling.models import Job, JobQueue


def queue_lock(job_queue_id: int, **annotations) -> JobQueue:
    """Take the queue's row lock and return the queue (with its environment, and `annotations`, expressions
    read in the same statement); hold it to the commit.

    The caller must be inside `transaction.atomic`. FOR NO KEY UPDATE serializes everything that changes the
    queue's jobs, as FOR UPDATE would, but lets a submission insert rows that refer to the queue meanwhile:
    their foreign-key checks take FOR KEY SHARE, which FOR UPDATE blocks, so every submission used to wait
    for the pass in progress.
    """
    return (
        JobQueue.objects.select_for_update(no_key=True)
        .select_related("service_environment")
        .annotate(**annotations)
        .get(pk=job_queue_id)
    )


def job_lock(job_id: int) -> Job:
    """Take the job's queue lock, then the job's row lock, and return the job; the caller is atomic.

    A job whose queue was deleted is finished (deleting a queue cancels its jobs first) and no pass or
    executor moves it any more: its row lock is enough.
    """
    job_queue_id = Job.objects.filter(pk=job_id).values_list("job_queue_id", flat=True).get()
    if job_queue_id is not None:
        queue_lock(job_queue_id)
    return Job.objects.select_for_update().get(pk=job_id)
