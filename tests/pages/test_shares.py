"""A share's page: utilization chart from samples, loans, evictions, pending and placed jobs; aggregate only
for other teams."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scheduling.models import InstanceType, QuotaShare, ShareUsageSample
from tests.factories import job_in
from tests.pages.conftest import G5, P4, P5, htmx_headers

pytestmark = pytest.mark.django_db


@pytest.fixture
def busy(world):
    """vision borrows P4 from speech and the free pool; speech reclaims; a vision job waits, with why."""
    borrower = job_in(world.vision, [(P4, 12)], name="vision-big", user=world.chen)
    world.run_pass()
    owner = job_in(world.speech, [(P4, 3)], name="speech-wants-back", user=world.eli)
    world.run_pass()
    running = job_in(world.vision, [(G5, 4)], name="vision-small", user=world.chen)
    world.run_pass()
    return {"borrower": borrower, "owner": owner, "running": running}


def test_share_page_shows_usage_loans_evictions_pending_and_placed_jobs_to_its_team(world, busy, client_for):
    html = client_for(world.chen).get(reverse("share_detail", args=[world.vision.pk])).content.decode()
    assert "Share vision" in html and "LEND_AND_BORROW" in html and "borrow limit 100%" in html
    assert "reclaim" in html and "speech-wants-back" not in html  # the preemptor is another team's job
    assert "vision-big" in html and "vision-small" in html
    assert "Pending jobs (1)" in html and "Placed jobs (1)" in html
    busy["borrower"].refresh_from_db()
    assert busy["borrower"].current_reason in html  # why it waits, for its own team
    assert "Borrows nothing." in html


def test_share_page_names_who_borrows_from_a_lender(world, client_for):
    job_in(world.vision, [(P4, 10)], name="vision-borrows")  # 4 above its 6: 2 of the free pool, 2 of speech
    world.run_pass()
    html = client_for(world.eli).get(reverse("share_detail", args=[world.speech.pk])).content.decode()
    assert "<strong>2</strong> ml.p4d.24xlarge to vision" in html
    html = client_for(world.chen).get(reverse("share_detail", args=[world.vision.pk])).content.decode()
    assert "<strong>2</strong> ml.p4d.24xlarge from free pool" in html
    assert "<strong>2</strong> ml.p4d.24xlarge from speech" in html


def test_share_page_now_table_shows_what_the_share_holds_on_plans(world, client_for):
    job_in(world.nlp, [(P5, 2)], name="nlp-on-demand")
    job_in(world.nlp, [(P5, 3, world.plan)], name="nlp-on-the-plan")
    world.run_pass()
    html = client_for(world.ana).get(reverse("share_detail", args=[world.nlp.pk])).content.decode()
    assert "<th>On plans</th>" in html
    assert "<strong>+3</strong> on plan nlp-p5-december" in html
    assert "3 instances held on training plans" in html
    assert "ml.p5.48xlarge x3 on plan nlp-p5-december" in html  # the placed job


def test_share_page_marks_jobs_protected_from_early_preemption_until_when(world, client_for):
    world.queue.preemption_min_runtime_seconds = 600
    world.queue.save()
    job_in(world.speech, [(G5, 2)], name="speech-new", user=world.eli)
    world.run_pass()
    old = job_in(world.speech, [(G5, 1)], name="speech-old", user=world.eli)
    world.run_pass()
    old.refresh_from_db()
    old.scheduled_at = timezone.now() - timedelta(minutes=11)  # ran past the minimum
    old.save(update_fields=["scheduled_at"])
    new = type(old).objects.get(name="speech-new")

    html = client_for(world.eli).get(reverse("share_detail", args=[world.speech.pk])).content.decode()

    until = new.scheduled_at + timedelta(seconds=600)
    assert f'<time datetime="{until.isoformat()}">protected until {until:%H:%M}</time>' in html
    assert html.count("protected until") == 1  # not speech-old


def test_share_page_shows_what_a_share_may_lend_and_what_it_keeps_per_type(world, client_for):
    limit = world.speech.capacity_limits.get(instance_type__name=G5)
    limit.lending_limit = 3
    limit.save()
    job_in(world.speech, [(G5, 1)], name="speech-one", user=world.eli)
    world.run_pass()

    html = client_for(world.eli).get(reverse("share_detail", args=[world.speech.pk])).content.decode()

    row = html[html.index(f'<th scope="row">{G5}</th>') :]
    row = row[: row.index("</tr>")]
    # 8 G5, 1 in use, lends at most 3: 3 lendable, 4 kept (as the overview's bar says)
    assert '<td class="num" data-label="Lendable / kept">3 / 4</td>' in row
    overview = client_for(world.eli).get(reverse("overview")).content.decode()
    assert "4 kept" in overview


def test_share_page_of_another_team_is_aggregate_only(world, busy, client_for):
    html = client_for(world.ana).get(reverse("share_detail", args=[world.vision.pk])).content.decode()
    assert "you see it in aggregate" in html and "<strong>1</strong> pending" in html
    assert "vision-big" not in html and "vision-small" not in html
    busy["borrower"].refresh_from_db()
    assert busy["borrower"].current_reason not in html
    assert "speech reclaimed capacity lent to vision" in html


def test_share_page_draws_the_utilization_chart_from_samples(world, client_for):
    g5 = InstanceType.objects.get(name=G5)
    now = timezone.now()
    for minutes, usage, borrowed in [(50, 4, 0), (30, 10, 2), (10, 8, 0)]:
        ShareUsageSample.objects.create(
            quota_share=world.vision,
            instance_type=g5,
            limit=8,
            usage=usage,
            borrowed=borrowed,
            lent=0,
            pending=0,
            taken_at=now - timedelta(minutes=minutes),
        )
    html = client_for(world.chen).get(reverse("share_detail", args=[world.vision.pk])).content.decode()
    assert "ml.g5.12xlarge" in html and 'class="area area-owned" d="M' in html
    assert 'class="area area-borrowed" d="M' in html and 'class="limit-line" d="M' in html
    assert 'href="?window=day"' in html and 'hx-get="?window=day"' in html  # a real link, and htmx on top


def test_share_chart_window_is_selectable_and_fragments_come_alone(world, client_for):
    g5 = InstanceType.objects.get(name=G5)
    ShareUsageSample.objects.create(
        quota_share=world.vision,
        instance_type=g5,
        limit=8,
        usage=3,
        borrowed=0,
        lent=0,
        pending=0,
        taken_at=timezone.now() - timedelta(days=3),
    )
    client = client_for(world.chen)
    url = reverse("share_detail", args=[world.vision.pk])
    hour = client.get(url, headers=htmx_headers("share-chart")).content.decode()
    assert "<html" not in hour and "No utilization samples in this window" in hour
    week = client.get(url + "?window=week", headers=htmx_headers("share-chart")).content.decode()
    assert 'id="share-chart" hx-get="' + url + '?window=week"' in week and "area-owned" in week
    live = client.get(url, headers=htmx_headers("share-live")).content.decode()
    assert "<html" not in live and "Loans right now" in live and "Utilization" not in live


def test_unknown_share_is_a_404(world, client_for):
    assert client_for(world.ana).get(reverse("share_detail", args=[999])).status_code == 404


def test_share_page_and_fragments_keep_their_query_budgets(
    world, busy, client_for, django_assert_max_num_queries
):
    for i in range(20):
        job_in(world.vision, [(G5, 1)], name=f"more-{i}")
    world.run_pass()
    client = client_for(world.chen)
    url = reverse("share_detail", args=[world.vision.pk])
    # session + user, share, viewer, queue_usage (7), jobs (2), placed count, last pass, evictions, samples,
    # and the words of the waiting jobs' reasons when this process has not read them before
    with django_assert_max_num_queries(18):
        assert client.get(url).status_code == 200
    with django_assert_max_num_queries(17):
        assert client.get(url, headers=htmx_headers("share-live")).status_code == 200
    with django_assert_max_num_queries(4):
        assert client.get(url, headers=htmx_headers("share-chart")).status_code == 200
    outsider = client_for(world.ana)
    with django_assert_max_num_queries(15):  # an outsider reads no job rows
        assert outsider.get(url).status_code == 200


def test_a_share_moved_to_another_team_does_not_show_the_old_teams_jobs(world, client_for):
    job_in(world.nlp, [(P4, 1)], name="nlp-waiting", user=world.ana)
    job_in(world.nlp, [(P4, 1)], name="nlp-placed", user=world.ana)
    world.run_pass()
    # Moved behind the service's back, as a share moved before moves with unfinished jobs were refused.
    QuotaShare.objects.filter(pk=world.nlp.pk).update(team=world.team_vision)

    html = client_for(world.chen).get(reverse("share_detail", args=[world.nlp.pk])).content.decode()

    assert "nlp-waiting" not in html and "nlp-placed" not in html and "ana" not in html
    assert "nlp-placed" in client_for(world.ana).get(reverse("job_list")).content.decode()
