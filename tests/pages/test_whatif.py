"""The what-if pages: the editor prefilled with the queue's shares, errors next to the field at fault, a run's
live progress, the side-by-side result with its charts, and applying it (confirmed, refused when stale)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scheduling.models import InstanceType, QuotaShare
from scheduling.services import configuration as config_services
from tests.factories import JobQueueFactory, ServiceEnvironmentFactory, job_in
from tests.pages.conftest import G5, P4, P5, htmx_headers
from whatif import services as whatif_services
from whatif.models import WhatIfRun

pytestmark = pytest.mark.django_db


@pytest.fixture
def begin():
    return (timezone.now() - timedelta(days=2)).replace(hour=0, minute=0, second=0, microsecond=0)


@pytest.fixture
def history(world, begin):
    """Vision wants 20 P4 for an hour; it holds 12 at most while nlp keeps its 4 idle P4 to itself."""
    for n in range(4):
        at = begin + timedelta(minutes=n)
        job_in(
            world.vision,
            [(P4, 5)],
            name=f"vision-{n}",
            created_at=at,
            runnable_since=at,
            duration_seconds=3600,
        )
    at = begin + timedelta(minutes=5)
    job_in(world.speech, [(G5, 2)], name="speech-0", created_at=at, runnable_since=at, duration_seconds=1800)


def ids(name: str) -> int:
    return InstanceType.objects.get(name=name).pk


def editor_data(world, begin, **overrides) -> dict:
    """The editor's form as it comes prefilled, with `overrides` (field name -> value) on top."""
    data = {
        "job_queue": world.queue.pk,
        "source": "HISTORY",
        "start": begin.strftime("%Y-%m-%dT%H:%M"),
        "hours": "24",
    }
    for share in (world.nlp, world.vision, world.speech):
        data[f"s{share.pk}-strategy"] = share.strategy
        data[f"s{share.pk}-borrow_limit"] = share.borrow_limit
        if share.in_share_preemption:
            data[f"s{share.pk}-in_share_preemption"] = "on"
        for limit in share.capacity_limits.all():
            data[f"s{share.pk}-limit_{limit.instance_type_id}"] = limit.max_capacity
    data.update(overrides)
    return data


def lend_nlp(world):
    return {f"s{world.nlp.pk}-strategy": "LEND"}


# nlp lends its idle P4, and vision may borrow without a limit: 16 P4 for vision instead of 12.
LENDING = [
    whatif_services.ShareProposal("nlp", {P5: 4, P4: 4}, "LEND"),
    whatif_services.ShareProposal("vision", {P4: 6, G5: 8}, "LEND_AND_BORROW", borrow_limit=-1),
]


def done_run(world, begin) -> WhatIfRun:
    run = whatif_services.whatif_run_start(
        job_queue=world.queue, source="HISTORY", start=begin, days=1.0, actor=world.admin, proposal=LENDING
    )
    return whatif_services.whatif_run_execute(run_id=run.pk)


# --- the editor ---------------------------------------------------------------------------------------------


def test_the_editor_shows_every_share_prefilled_with_its_values_and_the_capacity(world, client_for):
    page = client_for(world.admin).get(reverse("manage_whatif")).content.decode()
    assert "Proposal for queue training" in page
    assert f'name="s{world.vision.pk}-borrow_limit" value="100"' in page
    assert f'name="s{world.nlp.pk}-limit_{ids(P5)}" value="4"' in page
    assert '<option value="LEND_AND_BORROW" selected>' in page
    assert '<td class="num" data-label="p4d.24xlarge">16</td>' in page  # P4 capacity, under the limits
    assert 'name="source" value="HISTORY"' in page and "checked" in page


def test_choosing_a_queue_answers_only_the_editor_to_htmx(world, client_for):
    response = client_for(world.admin).get(
        reverse("manage_whatif"), {"job_queue": world.queue.pk}, headers=htmx_headers("whatif-editor")
    )
    page = response.content.decode()
    assert page.lstrip().startswith('<div id="whatif-editor">')
    assert "Past runs" not in page


def test_submitting_a_proposal_starts_a_run_and_goes_to_its_page(world, client_for, begin, history):
    data = editor_data(world, begin, **lend_nlp(world))
    response = client_for(world.admin).post(reverse("manage_whatif"), data)
    run = WhatIfRun.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("manage_whatif_run", args=[run.pk])
    assert run.status == WhatIfRun.Status.QUEUED and run.created_by == world.admin
    assert {p["name"]: p["strategy"] for p in run.proposal}["nlp"] == "LEND"


def test_a_bad_borrow_limit_is_shown_next_to_that_shares_field(world, client_for, begin, history):
    response = client_for(world.admin).post(
        reverse("manage_whatif"), editor_data(world, begin, **{f"s{world.nlp.pk}-borrow_limit": 50})
    )
    assert response.status_code == 400
    page = response.content.decode()
    slot = page.index(f'id="errors-s{world.nlp.pk}-borrow_limit"')
    assert "share nlp: borrow_limit applies only to LEND_AND_BORROW shares" in page[slot : slot + 300]
    assert f'name="s{world.nlp.pk}-borrow_limit" value="50"' in page  # what was typed is kept
    assert not WhatIfRun.objects.exists()


def test_limits_beyond_the_capacity_are_shown_on_the_shares_rows(world, client_for, begin, history):
    response = client_for(world.admin).post(
        reverse("manage_whatif"), editor_data(world, begin, **{f"s{world.vision.pk}-limit_{ids(P4)}": 12})
    )
    assert response.status_code == 400
    page = response.content.decode()
    row = page.index(f'id="errors-share-{world.vision.pk}"')
    message = "share vision: ml.p4d.24xlarge: limits would total 20 but the environment has 16"
    assert message in page[row : row + 400]


def test_field_errors_of_the_window_and_an_unchanged_proposal_are_named(world, client_for, begin, history):
    client = client_for(world.admin)
    page = client.post(reverse("manage_whatif"), editor_data(world, begin, hours="0")).content.decode()
    assert "Ensure this value is greater than or equal to 1." in page
    page = client.post(reverse("manage_whatif"), editor_data(world, begin)).content.decode()
    assert (
        "the proposal is the queue&#x27;s configuration as it is: "
        "change at least one setting of a share or of the queue" in page
    )
    far = (begin - timedelta(days=20)).strftime("%Y-%m-%dT%H:%M")
    data = editor_data(world, begin, start=far, **lend_nlp(world))
    page = client.post(reverse("manage_whatif"), data).content.decode()
    slot = page.index('id="errors-start"')
    assert "queue training has no jobs submitted between" in page[slot : slot + 300]


def test_a_past_run_prefills_the_editor_to_run_it_again(world, client_for, begin, history):
    run = done_run(world, begin)
    page = client_for(world.admin).get(reverse("manage_whatif"), {"from_run": run.pk}).content.decode()
    assert f"Prefilled with the shares as they are in what-if #{run.pk}" in page
    nlp_strategy = page[page.index(f'name="s{world.nlp.pk}-strategy"') :]
    assert nlp_strategy.index('value="LEND" selected') < nlp_strategy.index("</select>")


def test_the_editor_keeps_its_query_budget(world, client_for, begin, history, django_assert_max_num_queries):
    client = client_for(world.admin)
    done_run(world, begin)
    # session + user, the queue, its shares, their limits, capacity, instance types, past runs, queue picker
    with django_assert_max_num_queries(9):
        assert client.get(reverse("manage_whatif")).status_code == 200


# --- a run --------------------------------------------------------------------------------------------------


def test_a_queued_run_shows_a_progress_bar_that_polls_itself(world, client_for, begin, history):
    run = whatif_services.whatif_run_start(
        job_queue=world.queue, source="HISTORY", start=begin, days=1.0, actor=world.admin, proposal=LENDING
    )
    page = client_for(world.admin).get(reverse("manage_whatif_run", args=[run.pk])).content.decode()
    assert "Waiting for a worker" in page
    assert '<progress id="whatif-progress" max="100" value="0"' in page
    assert f'hx-get="{reverse("manage_whatif_run", args=[run.pk])}" hx-trigger="every 1s, poll-now"' in page
    assert "data-poll" in page


def test_the_progress_fragment_follows_the_run_and_stops_polling_once_done(world, client_for, begin, history):
    client = client_for(world.admin)
    run = whatif_services.whatif_run_start(
        job_queue=world.queue, source="HISTORY", start=begin, days=1.0, actor=world.admin, proposal=LENDING
    )
    WhatIfRun.objects.filter(pk=run.pk).update(status=WhatIfRun.Status.RUNNING, progress=0.62)
    url = reverse("manage_whatif_run", args=[run.pk])
    fragment = client.get(url, headers=htmx_headers("whatif-live")).content.decode()
    assert fragment.lstrip().startswith('<div id="whatif-live"')
    assert "Replaying the proposal" in fragment and 'value="62"' in fragment and "62%" in fragment
    assert "What-if #" not in fragment  # just the region

    WhatIfRun.objects.filter(pk=run.pk).update(status=WhatIfRun.Status.QUEUED, progress=0)
    whatif_services.whatif_run_execute(run_id=run.pk)
    fragment = client.get(url, headers=htmx_headers("whatif-live")).content.decode()
    assert "hx-get" not in fragment and "Current and proposed, per team" in fragment


def test_a_run_no_worker_took_or_whose_worker_went_silent_says_so(world, client_for, begin, history):
    client = client_for(world.admin)
    run = whatif_services.whatif_run_start(
        job_queue=world.queue, source="HISTORY", start=begin, days=1.0, actor=world.admin, proposal=LENDING
    )
    url = reverse("manage_whatif_run", args=[run.pk])
    assert "No worker has taken this run" not in client.get(url).content.decode()
    WhatIfRun.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(minutes=1))
    assert "is a Celery worker running" in client.get(url).content.decode()
    WhatIfRun.objects.filter(pk=run.pk).update(
        status=WhatIfRun.Status.RUNNING, progress=0.3, heartbeat_at=timezone.now() - timedelta(minutes=6)
    )
    page = client.get(url).content.decode()
    assert "its worker has probably stopped" in page and f"?from_run={run.pk}" in page


def test_a_finished_run_shows_current_and_proposed_side_by_side_with_the_charts(
    world, client_for, begin, history
):
    run = done_run(world, begin)
    page = client_for(world.admin).get(reverse("manage_whatif_run", args=[run.pk])).content.decode()
    assert '<span class="was">RESERVE</span> → <strong>LEND</strong>' in page
    vision = page.index("<h3>vision <small")
    card = page[vision : page.index("</section>", vision)]
    # Vision runs three of its 5-P4 jobs at once instead of two: its median wait falls from half an hour to
    # nothing, and the change is marked better.
    assert re.search(
        r'<tr class="verdict-better">\s*<th scope="row">Wait p50</th>\s*<td class="num"[^>]*>29m</td>'
        r'\s*<td class="num"[^>]*>0s</td>\s*<td class="num change"[^>]*>−29m',
        card,
    )
    policy = '<span class="was">LEND_AND_BORROW (100%)</span> → <strong>LEND_AND_BORROW (unlimited)</strong>'
    assert policy in card
    assert page.count("<svg") >= 3 and "GPUs in use per share - proposed" in page
    assert "<script" not in page.split("</head>")[1]
    assert "Apply this proposal" in page and 'name="confirm"' in page


def test_a_failed_run_says_why_and_offers_to_run_it_again(world, client_for, begin, history):
    run = done_run(world, begin)
    WhatIfRun.objects.filter(pk=run.pk).update(
        status=WhatIfRun.Status.FAILED, error="the trace is unreadable"
    )
    page = client_for(world.admin).get(reverse("manage_whatif_run", args=[run.pk])).content.decode()
    assert "the trace is unreadable" in page and f"?from_run={run.pk}" in page
    assert "Apply this proposal" not in page


def test_the_run_page_keeps_its_query_budget(
    world, client_for, begin, history, django_assert_max_num_queries
):
    run = done_run(world, begin)
    client = client_for(world.admin)
    # session + user, the run, teams, and the queue as it is now, to tell whether the run is stale (shares,
    # their limits, capacity, plans and the shares open to them, GPUs per type)
    with django_assert_max_num_queries(10):
        assert client.get(reverse("manage_whatif_run", args=[run.pk])).status_code == 200
    with django_assert_max_num_queries(10):
        client.get(reverse("manage_whatif_run", args=[run.pk]), headers=htmx_headers("whatif-live"))


# --- applying -----------------------------------------------------------------------------------------------


def test_applying_needs_the_confirmation_then_changes_the_shares(world, client_for, begin, history):
    run = done_run(world, begin)
    client = client_for(world.admin)
    url = reverse("manage_whatif_apply", args=[run.pk])

    refused = client.post(url, {})
    assert refused.status_code == 400 and "Tick the box to confirm" in refused.content.decode()
    assert QuotaShare.objects.get(name="nlp").strategy == "RESERVE"

    applied = client.post(url, {"confirm": "on"}, follow=True)
    assert QuotaShare.objects.get(name="nlp").strategy == "LEND"
    page = applied.content.decode()
    assert f"Applied what-if #{run.pk} to queue training: changed shares nlp, vision." in page
    assert "Applied by admin on" in page


def test_applying_a_stale_run_is_refused_with_what_changed(world, client_for, begin, history):
    run = done_run(world, begin)
    config_services.quota_share_update(
        share=world.speech, changes={"strategy": "RESERVE"}, limits=None, actor=world.admin
    )
    client = client_for(world.admin)
    page = client.get(reverse("manage_whatif_run", args=[run.pk])).content.decode()
    assert "has changed since this run started (share speech: strategy)" in page
    assert 'name="confirm"' not in page

    response = client.post(reverse("manage_whatif_apply", args=[run.pk]), {"confirm": "on"})
    assert response.status_code == 409
    assert QuotaShare.objects.get(name="nlp").strategy == "RESERVE"


def test_the_what_if_pages_are_for_staff(world, client_for, begin, history):
    run = done_run(world, begin)
    member = client_for(world.ana)
    assert member.get(reverse("manage_whatif")).status_code == 403
    assert member.post(reverse("manage_whatif_apply", args=[run.pk]), {"confirm": "on"}).status_code == 403
    assert QuotaShare.objects.get(name="nlp").strategy == "RESERVE"


# --- the default window and the Philly trace ----------------------------------------------------------------


def test_on_a_fresh_install_the_default_window_holds_todays_jobs_and_runs(world, client_for):
    at = timezone.now() - timedelta(minutes=20)
    job_in(world.vision, [(P4, 5)], name="today", created_at=at, runnable_since=at, duration_seconds=600)
    client = client_for(world.admin)
    page = client.get(reverse("manage_whatif")).content.decode()
    start = re.search(r'name="start" value="([^"]+)"', page).group(1)
    hours = re.search(r'name="hours" value="([^"]+)"', page).group(1)
    assert start == at.replace(minute=0, second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M")
    assert hours in ("2", "3")  # whole hours: from the hour of the first job, one more than needed

    response = client.post(
        reverse("manage_whatif"), editor_data(world, at, start=start, hours=hours, **lend_nlp(world))
    )

    assert response.status_code == 302, response.content.decode()


def test_without_the_philly_trace_the_editor_says_so_and_how_to_point_at_it(
    world, client_for, settings, tmp_path
):
    settings.REPLAY_TRACE = str(tmp_path / "philly.csv")
    page = client_for(world.admin).get(reverse("manage_whatif")).content.decode()
    assert "The Philly trace is not installed here" in page
    # how to point at it, without naming a path of this machine
    assert "REPLAY_TRACE" in page and str(tmp_path) not in page


def test_the_editor_opens_on_the_queue_with_recent_jobs_and_a_window_in_whole_hours(world, client_for):
    idle_env = ServiceEnvironmentFactory(name="aaa-idle-env")
    JobQueueFactory(name="aaa-idle", service_environment=idle_env)  # first by name, and without jobs
    at = timezone.now() - timedelta(minutes=20)
    job_in(world.vision, [(P4, 1)], name="recent", created_at=at, runnable_since=at, duration_seconds=600)
    page = client_for(world.admin).get(reverse("manage_whatif")).content.decode()
    assert f'name="job_queue" value="{world.queue.pk}"' in page
    assert re.search(r'name="hours" value="\d+"', page) and 'name="days"' not in page


def test_choosing_the_philly_trace_sets_a_window_inside_it(world, client_for, settings, tmp_path):
    trace = tmp_path / "philly.csv"
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    rows += [f"2017-10-0{n} 10:00:00,3600.0,1,3600.0,vc1" for n in range(1, 4)]
    trace.write_text("\n".join(rows) + "\n")
    (tmp_path / "philly_vc.csv").write_text("vc,node num\nvc1,8\n")
    settings.REPLAY_TRACE = str(trace)

    window = (
        client_for(world.admin)
        .get(
            reverse("manage_whatif"),
            {"job_queue": world.queue.pk, "source": "PHILLY"},
            headers=htmx_headers("whatif-window"),
        )
        .content.decode()
    )

    assert window.lstrip().startswith('<fieldset class="window" id="whatif-window">')
    assert 'value="2017-10-01T00:00"' in window
    assert "The trace covers 2017-10-01 .. 2017-10-03" in window


# --- issue 17's settings in the editor and on the result ---------------------------------------------------


def test_the_editor_proposes_fair_borrowing_protection_lending_limits_and_weights(
    world, client_for, begin, history
):
    client = client_for(world.admin)
    page = client.get(reverse("manage_whatif")).content.decode()
    for name in (
        "idle_capacity_assignment",
        "preemption_min_runtime_seconds",
        f"s{world.speech.pk}-fair_share_weight",
        f"s{world.speech.pk}-lending_{ids(P4)}",
    ):
        assert f'name="{name}"' in page
    data = editor_data(
        world,
        begin,
        idle_capacity_assignment="FAIR_SHARE",
        preemption_min_runtime_seconds="600",
        **{f"s{world.speech.pk}-lending_{ids(G5)}": "2", f"s{world.vision.pk}-fair_share_weight": "2"},
    )

    response = client.post(reverse("manage_whatif"), data)

    assert response.status_code == 302
    run = WhatIfRun.objects.get()
    assert run.queue_proposal == {
        "idle_capacity_assignment": "FAIR_SHARE",
        "preemption_min_runtime_seconds": 600,
    }
    proposed = {item["name"]: item for item in run.proposal}
    assert proposed["speech"]["lending_limits"] == {G5: 2}
    assert (proposed["vision"]["fair_share_weight"], proposed["nlp"]["fair_share_weight"]) == ("2", "1")


def test_a_lending_limit_on_a_reserve_share_is_shown_on_its_row(world, client_for, begin, history):
    data = editor_data(world, begin, **{f"s{world.nlp.pk}-lending_{ids(P5)}": "1"})
    response = client_for(world.admin).post(reverse("manage_whatif"), data)
    assert response.status_code == 400
    page = response.content.decode()
    row = page.index(f'id="errors-share-{world.nlp.pk}"')
    assert "share nlp: ml.p5.48xlarge: a RESERVE share lends nothing" in page[row : row + 400]
    assert not WhatIfRun.objects.exists()


def test_the_result_says_what_the_proposal_changes_in_the_queue_and_in_lending(
    world, client_for, begin, history
):
    shares = [
        whatif_services.ShareProposal("speech", {P4: 4, G5: 8}, "LEND", lending_limits={G5: 2}),
        *LENDING,
    ]
    run = whatif_services.whatif_run_start(
        job_queue=world.queue,
        source="HISTORY",
        start=begin,
        days=1.0,
        actor=world.admin,
        proposal=shares,
        queue_proposal=whatif_services.QueueProposal("FAIR_SHARE", 600),
    )
    run = whatif_services.whatif_run_execute(run_id=run.pk)
    page = client_for(world.admin).get(reverse("manage_whatif_run", args=[run.pk])).content.decode()
    assert '<span class="was">FIFO</span> → <strong>FAIR_SHARE</strong>' in page
    assert '<span class="was">none</span> → <strong>600 s (10m)</strong>' in page
    assert f'<span class="was">all</span> → <strong>{G5} × 2</strong>' in page
    again = client_for(world.admin).get(reverse("manage_whatif"), {"from_run": run.pk}).content.decode()
    assert f'name="s{world.speech.pk}-lending_{ids(G5)}" value="2"' in again
    assert re.search(r'<option value="FAIR_SHARE" selected>', again)


def test_applying_a_proposal_for_the_queue_alone_says_so(world, client_for, begin, history):
    run = whatif_services.whatif_run_start(
        job_queue=world.queue,
        source="HISTORY",
        start=begin,
        days=1.0,
        actor=world.admin,
        proposal=[],  # every share keeps its values
        queue_proposal=whatif_services.QueueProposal("FAIR_SHARE", 0),
    )
    run = whatif_services.whatif_run_execute(run_id=run.pk)
    url = reverse("manage_whatif_apply", args=[run.pk])
    page = client_for(world.admin).post(url, {"confirm": "on"}, follow=True).content.decode()
    assert f"Applied what-if #{run.pk} to queue training: changed queue training." in page
    world.queue.refresh_from_db()
    assert world.queue.idle_capacity_assignment == "FAIR_SHARE"


def test_a_budget_proposed_in_the_editor_is_replayed_and_applied(world, client_for, begin, history):
    client = client_for(world.admin)
    page = client.get(reverse("manage_whatif")).content.decode()
    assert f'name="s{world.vision.pk}-budget_gpu_hours"' in page
    # Vision's four 5-P4 jobs want 160 GPU-hours in the hour; 60 a day holds all but the first back.
    data = editor_data(
        world,
        begin,
        **{f"s{world.vision.pk}-budget_gpu_hours": "60", f"s{world.vision.pk}-budget_period": "DAY"},
    )

    response = client.post(reverse("manage_whatif"), data)

    assert response.status_code == 302
    run = WhatIfRun.objects.get()
    proposed = {item["name"]: item for item in run.proposal}
    assert proposed["vision"]["budget"] == {"gpu_hours": "60", "period": "DAY", "scope": "ALL"}
    assert proposed["nlp"]["budget"] is None
    run = whatif_services.whatif_run_execute(run_id=run.pk)
    assert run.status == WhatIfRun.Status.DONE, run.error
    page = client.get(reverse("manage_whatif_run", args=[run.pk])).content.decode()
    assert '<span class="was">none</span> → <strong>60 a DAY</strong>' in page
    vision_current, vision_proposed = (
        next(share for share in run.result[side]["shares"] if share["share"] == "vision")
        for side in ("current", "proposed")
    )
    assert vision_current["jobs"]["never_started"] == 0
    assert vision_proposed["jobs"]["never_started"] == 2  # held back once 60 GPU-hours were spent
    client.post(reverse("manage_whatif_apply", args=[run.pk]), {"confirm": "on"})
    vision = QuotaShare.objects.get(name="vision")
    assert (vision.budget_gpu_hours, vision.budget_period, vision.budget_scope) == (60, "DAY", "ALL")
