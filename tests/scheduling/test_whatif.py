"""What-if runs: a proposal is checked whole as a share change would be, replayed against the queue as it is,
and applied through the share services (audited) only while the queue is still as it was."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from unittest import mock

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from engine import Entry
from scheduling.errors import Conflict
from scheduling.models import Event, EventKind, InstanceType, QuotaShare
from scheduling.services import configuration as config_services
from tests.engine.test_purity import imported_modules
from tests.factories import JobQueueFactory, UserFactory, environment_with, job_in, share_with
from whatif import charts as whatif_charts
from whatif import services as whatif_services
from whatif import sources as replay_sources
from whatif import tasks as whatif_tasks
from whatif.models import WhatIfRun
from whatif.services import ShareProposal

pytestmark = pytest.mark.django_db

P5, P4 = "ml.p5.48xlarge", "ml.p4d.24xlarge"
HOUR = 3600


@pytest.fixture
def queue():
    """Queue `training`: 4 P5 and 4 P4, shares nlp and vision with 2 of each, both RESERVE."""
    queue = JobQueueFactory(name="training")
    environment_with(queue, {P5: 4, P4: 4})
    share_with(queue, "nlp", {P5: 2, P4: 2})
    share_with(queue, "vision", {P5: 2, P4: 2})
    return queue


@pytest.fixture
def admin():
    return UserFactory(username="admin", is_staff=True)


@pytest.fixture
def begin():
    return (timezone.now() - timedelta(days=2)).replace(microsecond=0)


@pytest.fixture
def history(queue, begin):
    """Vision sends four 1-hour jobs of 2 P5 at once while nlp is idle: RESERVE runs them one by one."""
    vision = QuotaShare.objects.get(name="vision")
    for n in range(4):
        at = begin + timedelta(seconds=n)
        job_in(vision, [(P5, 2)], name=f"vision-{n}", created_at=at, runnable_since=at, duration_seconds=HOUR)
    return vision


def proposal(**changes) -> list[ShareProposal]:
    """Both shares as they are in the fixture, with `changes` (share name -> fields) on top."""
    shares = {
        "nlp": dict(limits={P5: 2, P4: 2}, strategy="RESERVE", borrow_limit=-1, in_share_preemption=False),
        "vision": dict(limits={P5: 2, P4: 2}, strategy="RESERVE", borrow_limit=-1, in_share_preemption=False),
    }
    for name, fields in changes.items():
        shares[name].update(fields)
    return [ShareProposal(name=name, **fields) for name, fields in shares.items()]


BORROWING = {"nlp": {"strategy": "LEND"}, "vision": {"strategy": "LEND_AND_BORROW", "borrow_limit": 100}}


def start(queue, admin, begin, shares=None, **fields):
    arguments = dict(
        job_queue=queue,
        proposal=shares if shares is not None else proposal(**BORROWING),
        source=WhatIfRun.Source.HISTORY,
        start=begin,
        days=1.0,
        actor=admin,
    )
    arguments.update(fields)
    return whatif_services.whatif_run_start(**arguments)


def errors_of(call) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as raised:
        call()
    return raised.value.message_dict


# --- starting: every bad input is refused up front, naming the share and field ------------------------------


def test_a_valid_proposal_is_queued_with_the_queue_as_it_is_and_enqueued_after_commit(
    queue, admin, begin, history, django_capture_on_commit_callbacks
):
    with mock.patch.object(whatif_tasks.run_whatif, "delay") as delay:
        with django_capture_on_commit_callbacks(execute=True):
            run = start(queue, admin, begin)
            assert delay.call_count == 0
    delay.assert_called_once_with(run.pk)
    assert run.status == WhatIfRun.Status.QUEUED and run.created_by == admin
    assert [s["strategy"] for s in run.baseline["shares"]] == ["RESERVE", "RESERVE"]
    assert {p["name"]: p["strategy"] for p in run.proposal} == {"nlp": "LEND", "vision": "LEND_AND_BORROW"}
    assert run.window_end == begin + timedelta(days=1)


def test_a_share_left_out_of_the_proposal_keeps_its_values(queue, admin, begin, history):
    run = start(queue, admin, begin, shares=[ShareProposal("vision", {P5: 2, P4: 2}, "LEND")])
    assert {p["name"]: p["strategy"] for p in run.proposal} == {"nlp": "RESERVE", "vision": "LEND"}


def test_borrow_limit_on_a_share_that_never_borrows_names_the_share_and_field(queue, admin, begin, history):
    errors = errors_of(lambda: start(queue, admin, begin, shares=proposal(nlp={"borrow_limit": 50})))
    assert list(errors) == ["shares[nlp].borrow_limit"]
    [message] = errors["shares[nlp].borrow_limit"]
    assert message.startswith("share nlp: borrow_limit applies only to LEND_AND_BORROW shares")


def test_limits_beyond_the_capacity_are_refused_for_every_share_holding_the_type(
    queue, admin, begin, history
):
    errors = errors_of(lambda: start(queue, admin, begin, shares=proposal(vision={"limits": {P5: 3, P4: 2}})))
    assert set(errors) == {"shares[nlp].capacity_limits", "shares[vision].capacity_limits"}
    assert errors["shares[vision].capacity_limits"] == [
        "share vision: ml.p5.48xlarge: limits would total 5 but the environment has 4 (other shares hold 2, "
        "so at most 2 is left)"
    ]


def test_moving_capacity_between_shares_in_one_proposal_is_accepted(queue, admin, begin, history):
    shares = proposal(nlp={"limits": {P5: 1, P4: 2}}, vision={"limits": {P5: 3, P4: 2}})
    run = start(queue, admin, begin, shares=shares)
    assert {p["name"]: p["limits"][P5] for p in run.proposal} == {"nlp": 1, "vision": 3}


def test_unknown_strategy_type_and_share_and_missing_limits_are_named(queue, admin, begin, history):
    shares = [
        ShareProposal("nlp", {}, "RESERVE"),
        ShareProposal("vision", {"ml.x9.huge": 1}, "GREEDY"),
        ShareProposal("audio", {P5: 1}, "RESERVE"),
    ]
    errors = errors_of(lambda: start(queue, admin, begin, shares=shares))
    assert errors["shares[nlp].capacity_limits"] == [
        "share nlp: a quota share needs 1 to 5 capacity limits, got 0"
    ]
    assert errors["shares[vision].strategy"] == [
        "share vision: strategy must be one of RESERVE, LEND, LEND_AND_BORROW"
    ]
    assert errors["shares[vision].capacity_limits"] == ["share vision: no instance type named ml.x9.huge"]
    assert errors["__all__"] == ["queue training has no quota share named audio"]


def test_a_proposal_equal_to_the_queue_is_refused(queue, admin, begin, history):
    errors = errors_of(lambda: start(queue, admin, begin, shares=proposal()))
    assert errors == {
        "__all__": [
            "the proposal is the queue's configuration as it is: change at least one setting of a share "
            "or of the queue"
        ]
    }


def test_the_window_must_hold_recorded_jobs_and_have_a_sane_length(queue, admin, begin, history):
    assert "days" in errors_of(lambda: start(queue, admin, begin, days=0))
    assert "days" in errors_of(lambda: start(queue, admin, begin, days=90))
    future = errors_of(lambda: start(queue, admin, timezone.now() + timedelta(hours=1)))
    assert future == {"start": ["the window starts in the future; recorded history ends now"]}
    empty = errors_of(lambda: start(queue, admin, begin - timedelta(days=10), days=2))
    assert "queue training has no jobs submitted between" in empty["start"][0]
    assert errors_of(lambda: start(queue, admin, begin, source="GUESS"))["source"] == [
        "source must be one of HISTORY, PHILLY"
    ]


def test_a_window_reaching_past_now_ends_now(queue, admin, history):
    recent = timezone.now() - timedelta(hours=1)
    vision = QuotaShare.objects.get(name="vision")
    job_in(vision, [(P5, 1)], created_at=recent, runnable_since=recent)
    run = start(queue, admin, recent - timedelta(minutes=1), days=1.0)
    assert run.window_end <= timezone.now()
    assert run.window_days == 1.0


def test_the_philly_source_needs_the_trace_installed(queue, admin, settings, tmp_path):
    settings.REPLAY_TRACE = str(tmp_path / "philly.csv")
    errors = errors_of(lambda: start(queue, admin, timezone.now() - timedelta(days=3), source="PHILLY"))
    assert errors["source"][0].startswith("the Philly trace is not installed: set REPLAY_TRACE")
    assert str(tmp_path) not in errors["source"][0]


# --- running: both configurations replayed on the same jobs -------------------------------------------------


def test_borrowing_lowers_the_waits_of_a_busy_share_next_to_an_idle_one(queue, admin, begin, history):
    run = whatif_services.whatif_run_execute(run_id=start(queue, admin, begin).pk)

    assert run.status == WhatIfRun.Status.DONE and run.progress == 1.0 and run.error == ""
    current = {s["share"]: s for s in run.result["current"]["shares"]}
    proposed = {s["share"]: s for s in run.result["proposed"]["shares"]}
    # RESERVE: one 2-instance job at a time, waits 0, 1, 2 and 3 hours. Borrowing nlp's idle P5: two at once.
    assert current["vision"]["wait_seconds"]["p95"] > 2 * HOUR
    assert proposed["vision"]["wait_seconds"]["p95"] < 1.5 * HOUR
    assert proposed["vision"]["wait_seconds"]["p50"] < current["vision"]["wait_seconds"]["p50"]
    assert current["vision"]["gpu_hours"]["borrowed"] == 0 and proposed["vision"]["gpu_hours"]["borrowed"] > 0
    assert proposed["nlp"]["gpu_hours"]["lent"] == pytest.approx(proposed["vision"]["gpu_hours"]["borrowed"])
    assert current["vision"]["jobs"]["completed"] == proposed["vision"]["jobs"]["completed"] == 4
    assert "series" not in run.result["current"]
    charts = {"utilization_current", "utilization_proposed", "waits"}
    assert set(run.charts) == charts | {f"{name}_narrow" for name in charts}  # for a desktop and a phone
    assert all(whatif_charts.svg_problem(svg) is None for svg in run.charts.values())
    assert "GPUs in use per share - proposed" in run.charts["utilization_proposed"]


def test_a_run_is_executed_once_even_when_its_task_is_delivered_twice(queue, admin, begin, history):
    run = start(queue, admin, begin)
    assert whatif_services.whatif_run_execute(run_id=run.pk).status == WhatIfRun.Status.DONE
    assert whatif_services.whatif_run_execute(run_id=run.pk) is None


def test_a_run_whose_worker_went_silent_is_taken_over(queue, admin, begin, history):
    run = start(queue, admin, begin)
    WhatIfRun.objects.filter(pk=run.pk).update(
        status=WhatIfRun.Status.RUNNING, progress=0.3, heartbeat_at=timezone.now() - timedelta(minutes=6)
    )
    assert whatif_services.whatif_run_execute(run_id=run.pk).status == WhatIfRun.Status.DONE


def test_a_failing_replay_stores_failed_with_the_reason_and_no_result(queue, admin, begin, history):
    run = start(queue, admin, begin)
    broken = {**run.baseline, "capacity": {P5: 1, P4: 4}}  # the shares hold 4 P5 between them
    WhatIfRun.objects.filter(pk=run.pk).update(baseline=broken)

    run = whatif_services.whatif_run_execute(run_id=run.pk)

    assert run.status == WhatIfRun.Status.FAILED
    assert "ml.p5.48xlarge: the share limits total 4 but the capacity is 1" in run.error
    assert run.result == {} and run.charts == {} and run.finished_at is not None


def test_a_replay_past_its_time_limit_is_stopped_and_says_why(queue, admin, begin, history, settings):
    run = start(queue, admin, begin)
    settings.WHATIF_TIME_LIMIT_SECONDS = 0
    run = whatif_services.whatif_run_execute(run_id=run.pk)
    assert run.status == WhatIfRun.Status.FAILED
    assert run.error.startswith("the replay took longer than 0 s (WHATIF_TIME_LIMIT_SECONDS) and was stopped")


def test_progress_is_written_at_most_twice_a_second_and_never_reads_done(queue, admin, begin, history):
    run = start(queue, admin, begin)
    WhatIfRun.objects.filter(pk=run.pk).update(status=WhatIfRun.Status.RUNNING)
    progress = whatif_services._WhatIfProgress(run.pk)
    progress.part(0.5, 1.0)(0.5)
    progress.part(0.5, 1.0)(1.0)  # within half a second of the first: not written
    run.refresh_from_db()
    assert run.progress == 0.75 and run.heartbeat_at is not None
    progress.written -= 1
    progress.report(1.0)
    run.refresh_from_db()
    assert run.progress == 0.99


def test_the_task_runs_the_service(queue, admin, begin, history):
    run = start(queue, admin, begin)
    whatif_tasks.run_whatif.apply(args=(run.pk,))
    run.refresh_from_db()
    assert run.status == WhatIfRun.Status.DONE


def test_a_chart_with_active_content_is_never_inlined():
    assert whatif_charts.svg_problem('<svg xmlns="http://www.w3.org/2000/svg"><text>ok</text></svg>') is None
    script = whatif_charts.svg_problem("<svg><script>alert(1)</script></svg>")
    assert script == "it holds active content (<script)"
    assert whatif_charts.svg_problem('<svg><rect onload="x()"/></svg>').startswith("it holds active content")
    assert whatif_charts.svg_problem("<div></div>") == "it is not a single <svg> element"


# --- applying -----------------------------------------------------------------------------------------------


def done_run(queue, admin, begin, shares=None):
    return whatif_services.whatif_run_execute(run_id=start(queue, admin, begin, shares=shares).pk)


def test_applying_changes_the_shares_through_the_share_service_and_audits_it(queue, admin, begin, history):
    run = done_run(queue, admin, begin)

    changed = whatif_services.whatif_apply(run=run, actor=admin)

    assert changed == ["nlp", "vision"]
    vision = QuotaShare.objects.get(name="vision")
    assert (vision.strategy, vision.borrow_limit) == ("LEND_AND_BORROW", 100)
    assert QuotaShare.objects.get(name="nlp").strategy == "LEND"
    audits = Event.objects.filter(kind=EventKind.CONFIG_CHANGED, actor=admin)
    per_share = {
        e.data["id"]: e.data["after"]["strategy"]
        for e in audits
        if e.data["object"] == "scheduling.QuotaShare"
    }
    assert per_share == {QuotaShare.objects.get(name="nlp").pk: "LEND", vision.pk: "LEND_AND_BORROW"}
    summary = audits.get(data__object="whatif.WhatIfRun")
    assert summary.message == f"admin applied what-if #{run.pk} to queue training: changed nlp, vision"
    run.refresh_from_db()
    assert run.applied_by == admin and run.applied_at is not None


def test_applying_moves_capacity_between_shares_in_an_order_that_always_fits(queue, admin, begin, history):
    shares = proposal(nlp={"limits": {P5: 1, P4: 3}}, vision={"limits": {P5: 3, P4: 1}})
    run = done_run(queue, admin, begin, shares=shares)
    whatif_services.whatif_apply(run=run, actor=admin)
    limits = {
        (share.name, limit.instance_type.name): limit.max_capacity
        for share in QuotaShare.objects.prefetch_related("capacity_limits__instance_type")
        for limit in share.capacity_limits.all()
    }
    assert limits == {("nlp", P5): 1, ("nlp", P4): 3, ("vision", P5): 3, ("vision", P4): 1}


def test_a_run_of_a_queue_changed_since_is_stale_and_refused(queue, admin, begin, history):
    run = done_run(queue, admin, begin)
    nlp = QuotaShare.objects.get(name="nlp")
    config_services.quota_share_update(
        share=nlp, changes={"in_share_preemption": True}, limits=None, actor=admin
    )

    with pytest.raises(Conflict) as refused:
        whatif_services.whatif_apply(run=run, actor=admin)

    assert refused.value.message == (
        f"queue training has changed since what-if #{run.pk} ran (share nlp: in_share_preemption), so its "
        f"result no longer describes the queue: run the what-if again"
    )
    assert QuotaShare.objects.get(name="vision").strategy == "RESERVE"
    assert WhatIfRun.objects.get(pk=run.pk).applied_at is None


def test_a_run_is_applied_once_and_only_when_done(queue, admin, begin, history):
    queued = start(queue, admin, begin)
    with pytest.raises(Conflict, match="is queued: only a finished run can be applied"):
        whatif_services.whatif_apply(run=queued, actor=admin)
    run = whatif_services.whatif_run_execute(run_id=queued.pk)
    whatif_services.whatif_apply(run=run, actor=admin)
    with pytest.raises(Conflict, match="was already applied by admin"):
        whatif_services.whatif_apply(run=run, actor=admin)


def test_shares_that_only_fit_after_each_other_are_lowered_first_then_raised():
    steps = whatif_services.whatif_apply_steps(
        current={"a": {P5: 3, P4: 1}, "b": {P5: 1, P4: 3}},
        proposed={"a": {P5: 1, P4: 3}, "b": {P5: 3, P4: 1}},
        capacity={P5: 4, P4: 4},
        changed=["a", "b"],
    )
    assert steps == [
        ("a", {P5: 1, P4: 1}, False),
        ("b", {P5: 1, P4: 1}, False),
        ("a", {P5: 1, P4: 3}, True),
        ("b", {P5: 3, P4: 1}, True),
    ]


def test_a_share_giving_capacity_up_goes_before_the_share_taking_it():
    steps = whatif_services.whatif_apply_steps(
        current={"a": {P5: 2}, "b": {P5: 2}},
        proposed={"a": {P5: 3}, "b": {P5: 1}},
        capacity={P5: 4},
        changed=["a", "b"],
    )
    assert steps == [("b", {P5: 1}, True), ("a", {P5: 3}, True)]


# --- the Philly trace on the queue's own shares -------------------------------------------------------------

TRACE = Path(__file__).resolve().parent.parent / "simulator" / "data" / "philly-day.csv"


def test_the_philly_trace_replays_on_the_queues_shares_and_types(queue, admin, settings):
    settings.REPLAY_TRACE = str(TRACE)
    run = start(queue, admin, datetime(2017, 10, 17, tzinfo=UTC), source="PHILLY", days=0.25)

    run = whatif_services.whatif_run_execute(run_id=run.pk)

    assert run.status == WhatIfRun.Status.DONE, run.error
    current, proposed = run.result["current"], run.result["proposed"]
    assert [s["share"] for s in current["shares"]] == ["nlp", "vision"]
    arrived = current["overall"]["jobs"]["arrived"]
    # 64 GPUs here against Philly's 704 at the scale of the study in docs/replay.md: about 9% of the half day's
    # 1,715 jobs are kept.
    assert 60 < arrived < 250 and proposed["overall"]["jobs"]["arrived"] == arrived
    assert current["overall"]["jobs_of_unknown_shares"] == {}
    assert "Microsoft Philly" in run.result["credit"] and "Microsoft Philly" in run.charts["waits"]


def test_a_philly_window_outside_the_trace_is_refused(queue, admin, settings):
    settings.REPLAY_TRACE = str(TRACE)
    errors = errors_of(lambda: start(queue, admin, datetime(2018, 3, 1, tzinfo=UTC), source="PHILLY"))
    assert errors == {
        "start": ["the Philly trace covers 2017-10-17 .. 2017-10-17: choose a window inside it"]
    }


def test_a_trace_job_asks_for_the_types_that_hold_its_gpus_with_the_least_waste():
    types = {"ml.g5.xlarge": 1, "ml.g5.12xlarge": 4, P5: 8, "ml.m5.xlarge": 0}
    assert replay_sources.entries_for(1, types) == [
        Entry("ml.g5.xlarge", 1),
        Entry("ml.g5.12xlarge", 1),
        Entry(P5, 1),
    ]
    assert replay_sources.entries_for(16, types) == [
        Entry(P5, 2),
        Entry("ml.g5.12xlarge", 4),
        Entry("ml.g5.xlarge", 16),
    ]
    assert replay_sources.entries_for(3, {"ml.m5.xlarge": 0}) == []


# --- the charts ---------------------------------------------------------------------------------------------


def test_gpus_in_use_are_averaged_per_slice_without_spikes_at_slice_edges():
    times, used = whatif_charts.mean_gpus_per_slice(
        [(0.0, [2], [0]), (10.0, [4], [0]), (35.0, [0], [0])], start=0.0, end=40.0, slices=4
    )
    assert times == [5.0, 15.0, 25.0, 35.0] and used == [[2.0, 4.0, 4.0, 2.0]]
    # An hour of a real window: many changes, slice edges that floating point cannot hit exactly.
    start = 1_764_633_600.123
    series = [(start + 7.3 * k, [k % 5 * 8, 8], [0, 0]) for k in range(500)]
    _, used = whatif_charts.mean_gpus_per_slice(series, start=start, end=start + 3_601.7, slices=336)
    assert max(max(row) for row in used) <= 32 + 1e-6
    width = 3_601.7 / 336
    integral = sum(value * width for value in used[1])
    assert integral == pytest.approx(8 * 3_601.7)


def test_the_charts_module_is_pure_python():
    source = Path(whatif_charts.__file__).read_text()
    assert "django" not in imported_modules(source)


# --- windows in which nothing changes -----------------------------------------------------------------------


def assert_done_with_zero_usage(run: WhatIfRun) -> None:
    assert run.status == WhatIfRun.Status.DONE, run.error
    assert run.progress == 1.0 and run.error == ""
    for side in ("current", "proposed"):
        overall = run.result[side]["overall"]
        assert overall["gpu_hours"]["used"] == overall["gpu_hours"]["borrowed"] == 0
        assert all(item["gpu_hours"]["used"] == 0 for item in run.result[side]["shares"])
    charts = {"utilization_current", "utilization_proposed", "waits"}
    assert set(run.charts) == charts | {f"{name}_narrow" for name in charts}  # for a desktop and a phone
    assert all(whatif_charts.svg_problem(svg) is None for svg in run.charts.values())


def test_a_history_window_in_which_no_job_is_ever_placed_finishes_done_with_zero_usage(queue, admin, begin):
    vision = QuotaShare.objects.get(name="vision")
    job_in(vision, [(P5, 5)], name="too-big", created_at=begin, runnable_since=begin, duration_seconds=HOUR)

    run = whatif_services.whatif_run_execute(run_id=start(queue, admin, begin).pk)

    assert_done_with_zero_usage(run)
    assert run.result["current"]["overall"]["jobs"]["arrived"] == 1


def test_a_philly_window_with_no_job_for_the_queue_finishes_done_with_zero_usage(settings, admin):
    """A queue of CPU instances: no trace job asks for what it has, so the replay has no job at all."""
    settings.REPLAY_TRACE = str(TRACE)
    queue = JobQueueFactory(name="cpu")
    cpu = "ml.m5.xlarge"
    environment_with(queue, {cpu: 4})
    InstanceType.objects.filter(name=cpu).update(gpu_count=0)
    share_with(queue, "etl", {cpu: 2})
    share_with(queue, "batch", {cpu: 2})
    lend = [
        ShareProposal(
            name="etl", limits={cpu: 2}, strategy="LEND", borrow_limit=-1, in_share_preemption=False
        ),
        ShareProposal(
            name="batch",
            limits={cpu: 2},
            strategy="LEND_AND_BORROW",
            borrow_limit=100,
            in_share_preemption=False,
        ),
    ]
    run = start(queue, admin, datetime(2017, 10, 17, tzinfo=UTC), shares=lend, source="PHILLY", days=0.25)

    run = whatif_services.whatif_run_execute(run_id=run.pk)

    assert_done_with_zero_usage(run)
    assert run.result["current"]["overall"]["jobs"]["arrived"] == 0
    assert run.result["proposed"]["overall"]["jobs"]["arrived"] == 0


# --- issue 17's settings: lending limits, fair borrowing, protection ----------------------------------------


def test_lending_limits_weights_and_queue_settings_are_checked_by_the_rules_naming_the_field(
    queue, admin, begin, history
):
    shares = proposal(
        nlp={"strategy": "LEND", "lending_limits": {P5: 3}, "fair_share_weight": Decimal(0)},
        vision={"lending_limits": {P4: 1}},
    )
    queue_settings = whatif_services.QueueProposal(
        idle_capacity_assignment="RANDOM", preemption_min_runtime_seconds=-5
    )

    errors = errors_of(lambda: start(queue, admin, begin, shares=shares, queue_proposal=queue_settings))

    assert set(errors) == {
        "shares[nlp].lending_limits",
        "shares[nlp].fair_share_weight",
        "shares[vision].lending_limits",
        "idle_capacity_assignment",
        "preemption_min_runtime_seconds",
    }
    assert "lending_limit 3 must be between 0 and max_capacity" in errors["shares[nlp].lending_limits"][0]
    assert "a RESERVE share lends nothing" in errors["shares[vision].lending_limits"][0]
    assert errors["shares[nlp].fair_share_weight"][0].startswith("share nlp: fair_share_weight: ")
    assert "RANDOM" in errors["idle_capacity_assignment"][0]
    assert errors["preemption_min_runtime_seconds"][0].startswith("preemption_min_runtime_seconds: ")


def test_a_lending_limit_of_a_type_without_a_limit_is_refused(queue, admin, begin, history):
    shares = proposal(nlp={"strategy": "LEND", "limits": {P5: 2}, "lending_limits": {P4: 1}})
    errors = errors_of(lambda: start(queue, admin, begin, shares=shares))
    assert errors == {
        "shares[nlp].lending_limits": [
            f"share nlp: a lending limit of {P4} needs a capacity limit of that type"
        ]
    }


def test_a_proposal_changing_only_the_queue_is_accepted_and_stored(queue, admin, begin, history):
    run = start(
        queue,
        admin,
        begin,
        shares=proposal(),
        queue_proposal=whatif_services.QueueProposal("FAIR_SHARE", 600),
    )
    assert run.queue_proposal == {
        "idle_capacity_assignment": "FAIR_SHARE",
        "preemption_min_runtime_seconds": 600,
    }
    proposed = whatif_services.whatif_proposed_configuration(run)
    assert (proposed["idle_capacity_assignment"], proposed["preemption_min_runtime_seconds"]) == (
        "FAIR_SHARE",
        600,
    )
    assert "idle_capacity_assignment" not in run.baseline


def test_a_lending_limit_in_the_proposal_keeps_the_lenders_capacity_from_the_borrower(
    queue, admin, begin, history
):
    lending_nothing = proposal(
        nlp={"strategy": "LEND", "lending_limits": {P5: 0}},
        vision={"strategy": "LEND_AND_BORROW", "borrow_limit": 100},
    )
    run = done_run(queue, admin, begin, shares=lending_nothing)

    assert run.status == WhatIfRun.Status.DONE, run.error
    proposed = {s["share"]: s for s in run.result["proposed"]["shares"]}
    # Without the lending limit vision borrows nlp's idle P5 (test_borrowing_lowers_the_waits_...).
    assert proposed["vision"]["gpu_hours"]["borrowed"] == 0
    assert proposed["nlp"]["gpu_hours"]["lent"] == 0


def test_applying_sets_lending_limits_weights_and_the_queues_settings_through_the_services(
    queue, admin, begin, history
):
    shares = proposal(
        nlp={"strategy": "LEND", "lending_limits": {P5: 1}, "fair_share_weight": Decimal("2.5")},
        vision={"strategy": "LEND_AND_BORROW", "borrow_limit": 100},
    )
    run = whatif_services.whatif_run_execute(
        run_id=start(
            queue,
            admin,
            begin,
            shares=shares,
            queue_proposal=whatif_services.QueueProposal("FAIR_SHARE", 600),
        ).pk
    )

    changed = whatif_services.whatif_apply(run=run, actor=admin)

    assert changed == ["queue training", "nlp", "vision"]
    queue.refresh_from_db()
    assert (queue.idle_capacity_assignment, queue.preemption_min_runtime_seconds) == ("FAIR_SHARE", 600)
    nlp = QuotaShare.objects.get(name="nlp")
    assert nlp.fair_share_weight == Decimal("2.5")
    assert {limit.instance_type.name: limit.lending_limit for limit in nlp.capacity_limits.all()} == {
        P5: 1,
        P4: None,
    }
    assert replay_sources.changes_since(queue, run.baseline) != []  # the run now describes the past
    assert Event.objects.filter(
        kind=EventKind.CONFIG_CHANGED, data__object="scheduling.JobQueue", data__id=queue.pk
    ).exists()
    summary = Event.objects.get(kind=EventKind.CONFIG_CHANGED, data__object="whatif.WhatIfRun")
    assert (summary.data["shares"], summary.data["queue"]) == (["nlp", "vision"], True)
    assert summary.message.endswith("changed queue training, nlp, vision")


def test_a_run_whose_queue_settings_changed_since_is_stale(queue, admin, begin, history):
    run = done_run(queue, admin, begin)
    config_services.job_queue_update(
        job_queue=queue, changes={"preemption_min_runtime_seconds": 60}, actor=admin
    )
    with pytest.raises(Conflict) as refused:
        whatif_services.whatif_apply(run=run, actor=admin)
    assert "(preemption min runtime seconds)" in refused.value.message


# --- the stop time of the queue's environment (issue 15) ----------------------------------------------------


def test_the_replay_stops_jobs_as_the_queues_environment_does(queue, settings):
    settings.SIMULATED_STOP_SECONDS = 3
    environment = queue.service_environment
    environment.executor = environment.Executor.SIMULATED
    environment.stop_grace_seconds = 120
    environment.save()
    assert replay_sources.live_configuration(queue).stop_seconds == 3  # the simulated executor stops it then
    environment.stop_grace_seconds = 1
    environment.save()
    assert replay_sources.live_configuration(queue).stop_seconds == 1  # never after the grace period
    environment.executor = environment.Executor.EXTERNAL
    environment.stop_grace_seconds = 90
    environment.save()
    config = replay_sources.live_configuration(queue)
    assert config.stop_seconds == 90  # an external executor may take all of it
    assert replay_sources.configuration_mapping(config)["stop_seconds"] == 90


def test_the_history_replays_relocation_as_the_queue_runs_it(queue, begin):
    """Jobs keep their `relocate` in the replay of the history, and the queue its minimum runtime."""
    vision = QuotaShare.objects.get(name="vision")
    moving = job_in(vision, [(P5, 2), (P4, 2)], name="moving", created_at=begin, relocate=True)
    staying = job_in(vision, [(P5, 2), (P4, 2)], name="staying", created_at=begin)
    queue.relocation_min_runtime_seconds = 1800
    queue.save(update_fields=["relocation_min_runtime_seconds"])

    jobs = {job.id: job for job in replay_sources.history_jobs(queue=queue, start=None, end=None)}
    config = replay_sources.live_configuration(queue)

    assert (jobs[moving.pk].relocate, jobs[staying.pk].relocate) == (True, False)
    assert config.relocation_min_runtime_seconds == 1800 and not config.relocate
    assert replay_sources.configuration_mapping(config)["relocation_min_runtime_seconds"] == 1800
