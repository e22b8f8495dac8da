"""Pages and the executor protocol: STOPPING with its deadline, attempts with exit codes, the Executors list."""

from __future__ import annotations

from django.urls import reverse
from django.utils import timezone

from scheduling.models import Executor
from scheduling.services import executor as executor_services
from scheduling.services import jobs as job_services
from tests.factories import job_in
from tests.pages.conftest import P5


def test_job_page_shows_stopping_with_its_deadline_and_attempts_with_exit_code_and_output(world, client_for):
    job = job_in(world.nlp, [(P5, 2)], name="train", user=world.ana)
    world.run_pass()
    executor_services.job_report(job_id=job.pk, attempt=1, status="RUNNING", output_tail="step 10 loss 0.3\n")
    job_services.job_cancel(job_id=job.pk, actor=world.ana)
    job.refresh_from_db()
    html = client_for(world.ana).get(reverse("job_detail", args=[job.pk])).content.decode()
    assert "status-stopping" in html and f'until <time datetime="{job.stop_deadline.isoformat()}"' in html
    assert "attempt 1" in html and "step 10 loss 0.3" in html
    # still stopping: it says it is being cancelled, and offers neither Cancel nor Change priority again
    assert (
        "Being cancelled: it stops by" in html and "Cancel job" not in html and "Change priority" not in html
    )
    executor_services.job_report(job_id=job.pk, attempt=1, status="STOPPED", exit_code=143)
    html = client_for(world.ana).get(reverse("job_detail", args=[job.pk])).content.decode()
    # the exit code answers the stop signal: the table says the attempt was stopped, the code is in the title
    assert "status-cancelled" in html
    assert '<td class="num" data-label="Exit code" title="exit code 143">stopped</td>' in html


def test_cancelling_a_running_job_says_it_is_stopping_not_cancelled(world, client_for):
    job = job_in(world.nlp, [(P5, 2)], name="train", user=world.ana)
    world.run_pass()
    executor_services.job_report(job_id=job.pk, attempt=1, status="RUNNING")
    response = client_for(world.ana).post(reverse("job_cancel", args=[job.pk]), {"reason": ""}, follow=True)
    html = response.content.decode()
    assert "Stopping train: its executor has until" in html and "Cancelled train." not in html


def test_a_preempted_attempt_reads_in_words_and_shows_no_exit_code_as_success(world, client_for):
    from scheduling.models import JobAttempt

    job = job_in(world.nlp, [(P5, 2)], name="victim", user=world.ana)
    world.run_pass()
    JobAttempt.objects.filter(job=job).update(
        status_reason="PREEMPTED_RECLAIM: reclaimed by share speech", exit_code=0, stopped_at=timezone.now()
    )
    html = client_for(world.ana).get(reverse("job_detail", args=[job.pk])).content.decode()
    assert "preempted by a reclaim: reclaimed by share speech" in html and "PREEMPTED_RECLAIM:" not in html
    assert '<td class="num" data-label="Exit code" title="exit code 0">stopped</td>' in html


def test_environment_page_lists_its_executors(world, client_for):
    environment = world.queue.service_environment
    Executor.objects.create(
        service_environment=environment,
        name="agent-1",
        host="gpu-07",
        jobs_taken=5,
        jobs_lost=1,
        last_seen_at=timezone.now(),
    )
    html = (
        client_for(world.admin)
        .get(reverse("manage_environment_edit", args=[environment.pk]))
        .content.decode()
    )
    assert "Executors" in html and "agent-1" in html and "gpu-07" in html
    assert '<td class="num">5</td>' in html and '<td class="num">1</td>' in html
