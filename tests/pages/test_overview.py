"""The overview: capacity per queue and type, share cards, evictions, last pass; live, and in a constant
number of queries whatever the number of jobs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scheduling.models import Heartbeat, Job, SchedulingPass
from scheduling.selectors import overview
from scheduling.services.heartbeat import heartbeat_record
from tests.factories import job_in
from tests.pages.conftest import G5, P4, P5, htmx_headers

pytestmark = pytest.mark.django_db


def borrow_and_reclaim(world):
    """vision borrows 6 P4 (2 of the free pool, 4 lent by speech); speech takes its P4 back by reclaim."""
    borrower = job_in(world.vision, [(P4, 12)], name="vision-big", user=world.chen)
    world.run_pass()
    owner = job_in(world.speech, [(P4, 3)], name="speech-wants-back", user=world.eli)
    world.run_pass()
    return borrower, owner


def test_overview_labels_each_capacity_bar_with_its_numbers(world, client_for):
    job_in(world.nlp, [(P5, 4)], name="nlp-full")
    job_in(world.vision, [(G5, 10)], name="vision-borrows")
    world.run_pass()
    html = client_for(world.ana).get("/").content.decode()
    assert "p5.48xlarge" in html
    assert "4 owned · 0 borrowed · 0 idle · 4 free of 8" in html  # P5: nlp holds its 4, nobody owns the rest
    # G5: vision uses its 8 and borrows 2 from the free pool (8 that no share owns); speech's 8 stay idle.
    assert "8 owned · 2 borrowed · 8 idle · 6 free of 24" in html
    assert 'class="seg seg-borrowed"' in html


def test_overview_shows_plan_use_beside_on_demand_use(world, client_for):
    job_in(world.nlp, [(P5, 4)], name="nlp-on-demand")
    job_in(world.nlp, [(P5, 3, world.plan)], name="nlp-on-the-plan")
    world.run_pass()
    html = client_for(world.ana).get("/").content.decode()
    assert "4 owned · 0 borrowed · 0 idle · 4 free of 8" in html  # on demand
    assert "+ on plan nlp-p5-december: 3 of 4 in use" in html  # the capacity row, beside it
    assert "<strong>4</strong>/4" in html and "<strong>+3</strong>" in html  # nlp's card
    assert "on plan nlp-p5-december" in html


def test_overview_shows_each_share_usage_loans_and_pending(world, client_for):
    job_in(world.vision, [(G5, 10)], name="vision-borrows")
    job_in(world.nlp, [(P5, 4)], name="nlp-first")
    job_in(world.nlp, [(P5, 1)], name="nlp-waits")
    world.run_pass()
    html = client_for(world.admin).get("/").content.decode()
    assert "<strong>10</strong>/8" in html and "+2 borrowed" in html
    assert "Borrows 2 g5.12xlarge from free pool" in html
    assert "1 pending" in html
    assert "nlp-waits</a> — ml.p5.48xlarge x1: share nlp at its limit 4/4" in html  # why the head job waits
    assert "Last pass" in html and "1 placed" not in html  # two placed in the last pass
    assert "2 placed" in html


def test_overview_names_evictions_with_both_shares_and_the_reason(world, client_for):
    borrower, owner = borrow_and_reclaim(world)
    html = client_for(world.admin).get("/").content.decode()
    assert "reclaim" in html
    assert f'<a href="{reverse("job_detail", args=[borrower.pk])}">vision-big</a>' in html
    assert f'<a href="{reverse("job_detail", args=[owner.pk])}">speech-wants-back</a>' in html
    assert "to reclaim" in html  # the engine's reason, in full for staff


def test_overview_shows_other_teams_only_in_aggregate(world, client_for):
    borrower, owner = borrow_and_reclaim(world)
    job_in(world.vision, [(G5, 16)], name="vision-secret-pending")
    job_in(world.vision, [(G5, 16)], name="vision-secret-too")  # cannot fit beside the first: pending
    world.run_pass()
    html = client_for(world.ana).get("/").content.decode()  # ana is in nlp only
    assert "vision-big" not in html and "speech-wants-back" not in html and "vision-secret" not in html
    assert (
        "speech reclaimed capacity lent to vision, stopping a job on 12 ml.p4d.24xlarge" in html
    )  # the why, at the level of shares
    assert (
        "2 pending" in html
    )  # vision's pending count is aggregate, and shown (the reclaimed job and one more)
    assert f"job {borrower.pk} of share vision" not in html  # the engine's text names jobs: not for outsiders


def test_overview_marks_a_share_starved_only_when_it_waits_below_its_limit_of_a_type_it_wants(
    world, client_for
):
    long_ago = timezone.now() - timedelta(hours=1)
    job_in(world.nlp, [(P5, 4)], name="nlp-full")
    job_in(world.nlp, [(P5, 1)], name="nlp-backlog", runnable_since=long_ago)  # full on P5 (its P4 is idle)
    world.run_pass()
    # No pass since speech's job came (the scheduler is down, say): it is owed its idle P4 and waits long.
    job_in(world.speech, [(P4, 2)], name="speech-owed", runnable_since=long_ago)
    html = client_for(world.admin).get("/").content.decode()
    nlp_card, speech_card = card(html, world.nlp), card(html, world.speech)
    assert "card-backlog" in nlp_card and "at its limits" in nlp_card and "starved" not in nlp_card
    assert "card-starved" in speech_card and ">starved<" in speech_card


def card(html: str, share) -> str:
    """The share's card on the overview, from its opening tag to its end."""
    marker = f'id="share-{share.pk}"'
    start = html.rindex("<article", 0, html.index(marker))
    return html[start : html.index("</article>", start)]


def test_share_condition_reads_pending_wait_and_limits():
    now = timezone.now()
    since = now - timedelta(minutes=15)
    condition = overview.share_condition
    assert condition(pending=0, oldest_pending_since=None, owed=True, long_wait_since=since) == "ok"
    assert condition(pending=2, oldest_pending_since=now, owed=True, long_wait_since=since) == "waiting"
    old = now - timedelta(hours=1)
    assert condition(pending=2, oldest_pending_since=old, owed=True, long_wait_since=since) == "starved"
    assert condition(pending=2, oldest_pending_since=old, owed=False, long_wait_since=since) == "backlog"


def test_overview_is_live_only_while_visible_and_returns_just_the_fragment_to_htmx(world, client_for):
    client = client_for(world.ana)
    page = client.get("/").content.decode()
    assert 'id="overview-live" hx-get="/" hx-trigger="every 5s, poll-now"' in page and "data-poll" in page
    fragment = client.get("/", headers=htmx_headers("overview-live")).content.decode()
    assert "<html" not in fragment and "Queue training" in fragment and 'id="overview-live"' not in fragment


def test_overview_refresh_interval_comes_from_settings(world, client_for, settings):
    settings.PAGE_REFRESH_SECONDS = 2
    assert 'hx-trigger="every 2s, poll-now"' in client_for(world.ana).get("/").content.decode()


def test_overview_warns_when_no_pass_ran_for_a_while(world, client_for):
    html = client_for(world.ana).get("/").content.decode()
    assert "No pass has run on this queue yet." in html


def many_jobs(world, n):
    for i in range(n):
        job_in(world.vision, [(P4, 1)], name=f"v{i}")
        job_in(world.nlp, [(P5, 1), (P4, 1)], name=f"n{i}")
    world.run_pass()
    job_in(world.speech, [(P4, 4)], name="reclaimer")  # preempts borrowers: evictions to show
    world.run_pass()


@pytest.mark.parametrize("jobs", [2, 40])
def test_overview_reads_a_constant_number_of_queries_whatever_the_jobs(
    world, client_for, django_assert_max_num_queries, jobs
):
    many_jobs(world, jobs)
    client = client_for(world.ana)
    assert Job.objects.count() == 2 * jobs + 1
    # session + user, viewer, queues, passes, teams, pending (3), evictions, budgeted shares, queue_usage
    # (6 + plans), heartbeats, and the words of the heads' reasons when this process has not read them before
    with django_assert_max_num_queries(20):
        assert client.get("/").status_code == 200
    with django_assert_max_num_queries(20):
        assert client.get("/", headers=htmx_headers("overview-live")).status_code == 200


# --- is the scheduler running? ------------------------------------------------------------------------------


def heard(component: str, seconds_ago: float) -> None:
    heartbeat_record(component=component, now=timezone.now() - timedelta(seconds=seconds_ago))


def test_a_settled_queue_whose_last_pass_is_old_raises_no_alarm_while_beat_and_workers_beat(
    world, client_for, settings
):
    settings.HEARTBEAT_SILENT_SECONDS = 60
    job_in(world.nlp, [(P5, 1)], name="placed-long-ago")
    world.run_pass()
    SchedulingPass.objects.update(started_at=timezone.now() - timedelta(hours=3))
    heard("beat", 5)
    heard("worker", 7)
    html = client_for(world.ana).get("/").content.decode()
    assert "Last pass" in html and "a settled queue runs none until something changes" in html
    assert "scheduler-silent" not in html and "is the scheduler" not in html


def test_a_silent_beat_is_named_as_the_beat(world, client_for, settings):
    settings.HEARTBEAT_SILENT_SECONDS = 60
    heard("beat", 300)
    heard("worker", 300)
    html = client_for(world.ana).get("/").content.decode()
    assert 'data-silent="beat"' in html and "The beat has been silent for 5 min" in html
    assert "Is celery beat running?" in html


def test_silent_workers_are_named_as_the_workers_while_the_beat_sends(world, client_for, settings):
    settings.HEARTBEAT_SILENT_SECONDS = 60
    heard("beat", 3)
    heard("worker", 600)
    html = client_for(world.ana).get("/", headers=htmx_headers("overview-live")).content.decode()
    assert 'data-silent="workers"' in html
    assert "The beat is sending tasks, but no worker has run one for 10 min" in html


def test_a_beat_never_heard_from_says_so(world, client_for):
    html = client_for(world.ana).get("/").content.decode()
    assert "The beat has never been heard from" in html


def test_the_heartbeat_task_records_the_worker_and_publishing_it_records_the_beat(world, settings):
    from quotaportal.celery import beat_heartbeat
    from scheduling import tasks

    tasks.heartbeat.apply()
    beat_heartbeat(sender="scheduling.tasks.run_all_passes")  # another task: no beat heartbeat
    assert set(Heartbeat.objects.values_list("component", flat=True)) == {"worker"}
    beat_heartbeat(sender="scheduling.tasks.heartbeat")
    assert set(Heartbeat.objects.values_list("component", flat=True)) == {"worker", "beat"}
    assert "heartbeat" in settings.CELERY_BEAT_SCHEDULE
