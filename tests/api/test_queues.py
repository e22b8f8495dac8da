"""POST /job-queues/{id}/schedule/ runs one pass now; GET .../snapshot/ shows the queue a pass starts from."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from engine.order import head_order
from scheduling.models import Job, JobStatus, QuotaShare, SchedulingPass, State
from scheduling.passes.snapshot import snapshot_load
from tests.api.support import G5, P4, P5, placed
from tests.factories import job_in, share_with

pytestmark = pytest.mark.django_db


def schedule(client, queue):
    return client.post(f"/api/v1/job-queues/{queue.pk}/schedule/")


def snapshot(client, queue):
    return client.get(f"/api/v1/job-queues/{queue.pk}/snapshot/")


# --- schedule --------------------------------------------------------------------------------------------


def test_schedule_places_the_jobs_that_fit_and_says_which(world, client_for):
    fits = job_in(world.nlp, [(P5, 2)], name="fits")
    too_big = job_in(world.nlp, [(P5, 4)], name="waits", scheduling_priority=0)
    placed(job_in(world.nlp, [(P5, 2)], name="running"), count=2)

    response = schedule(client_for(world.admin), world.queue)

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["admitted"] == [fits.pk]
    assert body["preempted"] == []
    assert isinstance(body["duration_ms"], float)
    assert Job.objects.get(pk=fits.pk).status == JobStatus.SCHEDULED
    assert Job.objects.get(pk=too_big.pk).status == JobStatus.RUNNABLE
    assert SchedulingPass.objects.get(job_queue=world.queue).trigger == "api"


def test_schedule_reports_the_jobs_it_preempted(world, client_for):
    # speech lends its idle P4 to vision, which borrows beyond its limit of 6; speech's new job reclaims it.
    speech = share_with(world.queue, "speech", {P4: 6}, team=world.team_vision, strategy="LEND")
    within = placed(job_in(world.vision, [(P4, 6)], name="within"), P4, 6)
    borrower = placed(job_in(world.vision, [(P4, 6)], name="borrower"), P4, 6)
    reclaimer = job_in(speech, [(P4, 6)], name="reclaimer")

    body = schedule(client_for(world.admin), world.queue).json()

    assert body["admitted"] == [reclaimer.pk]
    assert len(body["preempted"]) == 1
    assert body["preempted"][0] in {within.pk, borrower.pk}
    assert Job.objects.get(pk=body["preempted"][0]).status == JobStatus.RUNNABLE


def test_schedule_on_a_missing_queue_is_404(world, client_for):
    response = client_for(world.admin).post("/api/v1/job-queues/999999/schedule/")

    assert response.status_code == 404


# --- snapshot --------------------------------------------------------------------------------------------


def test_snapshot_lists_runnable_jobs_in_scheduling_order(world, client_for):
    now = timezone.now()
    low_old = job_in(world.nlp, [(P5, 1)], name="low-old", created_at=now - timedelta(minutes=9))
    high = job_in(world.vision, [(P4, 1)], name="high", scheduling_priority=100, created_at=now)
    low_new = job_in(world.vision, [(P4, 1)], name="low-new", created_at=now - timedelta(minutes=1))
    mid = job_in(world.nlp, [(P5, 1)], name="mid", scheduling_priority=50, created_at=now)
    placed(job_in(world.nlp, [(P5, 1)], name="placed"), count=1)
    job_in(world.nlp, [(P5, 1)], name="done", status=JobStatus.SUCCEEDED)
    disabled = share_with(world.queue, "paused", {G5: 1}, team=world.team_nlp, state=State.DISABLED)
    job_in(disabled, [(G5, 1)], name="in-a-disabled-share")

    body = snapshot(client_for(world.chen), world.queue).json()

    assert [job["id"] for job in body["jobs"]] == [high.pk, mid.pk, low_old.pk, low_new.pk]
    assert body["runnable_count"] == 4
    assert set(body["jobs"][0]) == {
        "id",
        "name",
        "quota_share",
        "team",
        "scheduling_priority",
        "queue_position",
        "status_reason",
        "estimated_start",
        "created_at",
    }
    assert (body["jobs"][0]["quota_share"], body["jobs"][0]["team"]) == ("vision", "vision")


def test_snapshot_shows_another_teams_jobs_without_their_names_or_reasons(world, client_for):
    ours = job_in(world.nlp, [(P5, 1)], name="secret-llm", status_reason="waiting for ml.p5.48xlarge")
    theirs = job_in(world.vision, [(P4, 1)], name="vision-run", status_reason="waiting for ml.p4d")

    as_chen = {job["id"]: job for job in snapshot(client_for(world.chen), world.queue).json()["jobs"]}
    as_ana = {job["id"]: job for job in snapshot(client_for(world.ana), world.queue).json()["jobs"]}
    as_executor = {job["id"]: job for job in snapshot(client_for(world.executor), world.queue).json()["jobs"]}

    assert (as_chen[ours.pk]["name"], as_chen[ours.pk]["status_reason"]) == (None, None)
    assert (as_chen[ours.pk]["quota_share"], as_chen[ours.pk]["team"]) == ("nlp", "nlp")
    assert as_chen[theirs.pk]["name"] == "vision-run" and as_chen[theirs.pk]["status_reason"]
    assert as_ana[ours.pk]["name"] == "secret-llm" and as_ana[theirs.pk]["name"] is None
    assert as_executor[ours.pk]["name"] == "secret-llm" and as_executor[theirs.pk]["name"] == "vision-run"


def test_snapshot_lists_runnable_jobs_in_the_engines_head_order(world, client_for):
    # nlp and speech are under their limits; vision borrows (15 of P4 against limits summing to 14), so its
    # heads come after theirs whatever their priority. Within a group: priority, then submission, then id.
    speech = share_with(world.queue, "speech", {P4: 2}, team=world.team_vision, strategy="LEND")
    placed(job_in(world.nlp, [(P5, 1)], name="nlp-running"), P5, 1)
    placed(job_in(world.vision, [(P4, 15)], name="vision-borrowing"), P4, 15)
    now = timezone.now()
    tie = now - timedelta(minutes=5)
    for name, share, priority, created_at in [
        ("v-high", world.vision, 90, now - timedelta(minutes=10)),
        ("v-high-older", world.vision, 90, now - timedelta(minutes=30)),
        ("v-mid", world.vision, 50, now),
        ("n-tie-1", world.nlp, 10, tie),
        ("n-tie-2", world.nlp, 10, tie),
        ("n-top", world.nlp, 30, now),
        ("s-tie-3", speech, 10, tie),
        ("n-low", world.nlp, 0, now - timedelta(hours=1)),
    ]:
        job_in(share, [(P4, 1)], name=name, scheduling_priority=priority, created_at=created_at)

    body = snapshot(client_for(world.admin), world.queue).json()

    names = [job["name"] for job in body["jobs"]]
    assert names == ["n-top", "n-tie-1", "n-tie-2", "s-tie-3", "n-low", "v-high-older", "v-high", "v-mid"]
    engine_snapshot, _index = snapshot_load(job_queue=world.queue, now=timezone.now())
    assert [job["id"] for job in body["jobs"]] == [job.id for job in head_order(engine_snapshot)]


def test_snapshot_shows_at_most_100_jobs_and_counts_them_all(world, client_for):
    Job.objects.bulk_create(
        Job(name=f"j{i}", job_queue=world.queue, quota_share=world.nlp, team=world.team_nlp)
        for i in range(105)
    )

    body = snapshot(client_for(world.ana), world.queue).json()

    assert len(body["jobs"]) == 100
    assert body["runnable_count"] == 105


def test_snapshot_shows_limit_usage_borrowed_and_lent_per_share_and_type(world, client_for):
    speech = share_with(world.queue, "speech", {P4: 6}, team=world.team_vision, strategy="LEND")
    placed(job_in(world.vision, [(P4, 10)], name="borrower"), P4, 10)  # 4 over its limit of 6
    placed(job_in(world.nlp, [(P5, 2, world.plan)], name="on-plan"), P5, 2, plan=world.plan)
    job_in(world.nlp, [(P5, 1)], name="pending")

    body = snapshot(client_for(world.ana), world.queue).json()

    shares = {share["name"]: share for share in body["shares"]}
    assert set(shares) == {"nlp", "speech", "vision"}
    vision_p4 = next(row for row in shares["vision"]["instance_types"] if row["instance_type"] == P4)
    assert (vision_p4["limit"], vision_p4["usage"], vision_p4["borrowed"]) == (6, 10, 4)
    assert shares["vision"]["borrowed"] == 4
    assert shares["nlp"]["pending"] == 1
    nlp_p5 = next(row for row in shares["nlp"]["instance_types"] if row["instance_type"] == P5)
    assert nlp_p5["usage"] == 0  # instances on a plan count against the plan only
    speech_p4 = next(row for row in shares["speech"]["instance_types"] if row["instance_type"] == P4)
    assert speech_p4["lent"] == sum(loan["instances"] for loan in shares["speech"]["lends_to"])
    assert sum(loan["instances"] for loan in shares["vision"]["borrows_from"]) == 4
    assert speech.pk == shares["speech"]["id"]
    types = {row["instance_type"]: row for row in body["instance_types"]}
    assert types[P4]["capacity"] == 16
    assert types[P4]["owned"] + types[P4]["borrowed"] == 10
    [plan] = body["plans"]
    assert (plan["name"], plan["in_use_instance_count"], plan["available_instance_count"]) == (
        "nlp-p5-december",
        2,
        2,
    )


def test_snapshot_of_a_queue_with_no_shares_is_empty(world, client_for):
    QuotaShare.objects.all().delete()

    body = snapshot(client_for(world.ana), world.queue).json()

    assert (body["jobs"], body["shares"], body["runnable_count"]) == ([], [], 0)
    assert body["job_queue"] == "training"
