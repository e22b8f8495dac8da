"""`manage.py replay` end to end: a Philly slice, configuration files, --scaling, a live queue's history."""

import hashlib
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from xml.etree import ElementTree

import pytest
from django.core.management import CommandError, call_command

from scheduling.models import JobAttempt, JobStatus, QuotaShare
from tests.factories import InstanceTypeFactory, JobQueueFactory, environment_with, job_in, share_with

DATA = Path(__file__).parent / "data"
P5 = "ml.p5.48xlarge"


def replay(*args) -> str:
    out = StringIO()
    call_command("replay", *args, "--no-progress", stdout=out)
    return out.getvalue()


def test_the_philly_comparison_on_a_slice_prints_tables_and_writes_json_and_charts(tmp_path):
    output = replay(
        "--trace",
        str(DATA / "philly-day.csv"),
        "--start",
        "2017-10-17",
        "--days",
        "0.25",
        "--philly-comparison",
        "--check",
        "--json",
        str(tmp_path / "out.json"),
        "--charts",
        str(tmp_path / "charts"),
    )

    assert "Microsoft Philly" in output and "CC-BY-4.0" in output
    for name in ("all-RESERVE", "all-LEND", "all-LEND_AND_BORROW"):
        assert f"{name}: " in output
    assert "jobs/s" in output and "--check: the capacity rules held" in output
    document = json.loads((tmp_path / "out.json").read_text())
    assert [c["configuration"]["name"] for c in document["configurations"]] == [
        "all-RESERVE",
        "all-LEND",
        "all-LEND_AND_BORROW",
    ]
    borrowing = document["configurations"][2]
    assert len(borrowing["shares"]) == 11
    assert borrowing["overall"]["jobs"]["arrived"] > 500
    assert borrowing["overall"]["gpu_hours"]["borrowed"] > 0
    assert document["credit"].startswith("Trace: Microsoft Philly")
    charts = sorted(path.name for path in (tmp_path / "charts").iterdir())
    assert charts == [
        "utilization-all-LEND.svg",
        "utilization-all-LEND_AND_BORROW.svg",
        "utilization-all-RESERVE.svg",
        "waits.svg",
    ]
    for chart in charts:
        ElementTree.parse(tmp_path / "charts" / chart)  # well-formed SVG


def test_the_json_names_the_trace_by_name_and_checksum_and_holds_no_absolute_path(tmp_path, monkeypatch):
    # Run from tmp_path as `manage.py` would be: the JSON below it is named relatively, the trace elsewhere by
    # its name alone.
    monkeypatch.chdir(tmp_path)
    args = [
        "--trace",
        str(DATA / "philly-day.csv"),
        "--start",
        "2017-10-17",
        "--days",
        "0.02",
        "--philly-comparison",
        "--plans",
        "0",
        f"--json={tmp_path / 'out' / 'comparison.json'}",
    ]
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "manage.py"), "replay", *args])

    replay(*args)

    text = (tmp_path / "out" / "comparison.json").read_text()
    document = json.loads(text)
    assert document["trace"] == {
        "name": "philly-day.csv",
        "sha256": hashlib.sha256((DATA / "philly-day.csv").read_bytes()).hexdigest(),
    }
    assert document["vc_file"]["name"] == "philly_vc.csv" and len(document["vc_file"]["sha256"]) == 64
    assert document["command"] == (
        "python manage.py replay --trace philly-day.csv --start 2017-10-17 --days 0.02 --philly-comparison "
        "--plans 0 --json=out/comparison.json"
    )
    assert str(tmp_path) not in text and str(DATA) not in text

    def strings(value):
        if isinstance(value, dict):
            yield from (s for item in value.items() for s in strings(item))
        elif isinstance(value, list | tuple):
            yield from (s for item in value for s in strings(item))
        elif isinstance(value, str):
            yield value

    assert not [
        word for s in strings(document) for word in s.split() if os.path.isabs(word.partition("=")[2] or word)
    ]


def test_configuration_files_are_compared_in_one_run(tmp_path):
    path = tmp_path / "what-if.yaml"
    path.write_text("""
configurations:
  - {name: generous, base: philly, strategy: LEND_AND_BORROW, capacity_scale: 1}
  - {name: tight, base: philly, strategy: LEND_AND_BORROW, borrow_limit: 50, capacity_scale: 0.05,
     shares: [{name: 6214e9, strategy: RESERVE, borrow_limit: -1}]}
""")

    output = replay(
        "--trace",
        str(DATA / "philly-day.csv"),
        "--start",
        "2017-10-17",
        "--days",
        "0.1",
        "--config",
        str(path),
        "--markdown",
    )

    assert "| generous |" in output and "| tight |" in output
    assert "| 6214e9 | RESERVE |" in output


def test_scaling_prints_seconds_per_thousand_jobs_for_one_two_and_four_weeks():
    output = replay(
        "--trace",
        str(DATA / "philly-weeks.csv"),
        "--start",
        "2017-10-09",
        "--scaling",
        "--philly-comparison",
        "--plans",
        "0",
        "--repeat",
        "2",
    )

    assert "fastest of 2 run(s) per window" in output
    rows = output[output.index("CPU ms per pass") :].splitlines()[2:]
    assert [row.split()[:3] for row in rows[:3]] == [
        ["all-LEND", "1", "85"],
        ["all-LEND", "2", "180"],
        ["all-LEND", "4", "257"],
    ]
    assert [row.split()[0] for row in rows[3:9]] == ["all-LEND_AND_BORROW"] * 3 + ["all-RESERVE"] * 3
    split = output[output.index("where the time goes") :].splitlines()
    assert "preempting passes" in split[1]
    cells = {tuple(row.split()[:2]): row.split()[2:] for row in split[3:12]}
    assert len(cells) == 9
    assert all(int(row[0].replace(",", "")) > 0 for row in cells.values())  # reduced passes
    assert cells["all-RESERVE", "4"][3] == "0" and cells["all-RESERVE", "4"][5] == "-"  # none preempts
    assert all(float(row[-1]) > 0 for row in cells.values())  # the rest: events, meter, bookkeeping
    assert split[12].startswith("total wall time")


def test_a_missing_source_or_configuration_is_a_clear_error():
    with pytest.raises(CommandError, match="give --config"):
        replay("--trace", str(DATA / "philly-day.csv"))
    with pytest.raises(CommandError, match="--history replays the job history of a queue"):
        replay("--history")


@pytest.mark.django_db
def test_the_history_of_a_queue_replays_against_its_live_configuration(tmp_path):
    queue = JobQueueFactory(name="training")
    environment_with(queue, {P5: 4})
    InstanceTypeFactory(name=P5)
    nlp = share_with(queue, "nlp", {P5: 2}, strategy=QuotaShare.Strategy.LEND_AND_BORROW)
    vision = share_with(queue, "vision", {P5: 2}, strategy=QuotaShare.Strategy.LEND)
    begin = datetime(2025, 1, 6, tzinfo=UTC)

    def submitted(share, count, after, **fields):
        at = begin + timedelta(seconds=after)
        return job_in(share, [(P5, count)], created_at=at, runnable_since=at, **fields)

    ran = submitted(nlp, 2, 0, status=JobStatus.SUCCEEDED)
    JobAttempt.objects.create(
        job=ran,
        instance_type=InstanceTypeFactory(name=P5),
        instance_count=2,
        scheduled_at=begin,
        stopped_at=begin + timedelta(hours=1),
    )
    submitted(nlp, 2, 10, duration_seconds=1800)  # borrows vision's idle capacity in the replay
    submitted(vision, 2, 600, duration_seconds=600)  # reclaims it
    submitted(vision, 1, 700, status=JobStatus.CANCELLED, stopped_at=begin + timedelta(seconds=800))

    output = replay(
        "--history",
        "--queue",
        "training",
        "--start",
        "2025-01-06",
        "--days",
        "1",
        "--json",
        str(tmp_path / "history.json"),
    )

    assert "4 jobs from the history of queue training" in output
    document = json.loads((tmp_path / "history.json").read_text())
    [live] = document["configurations"]
    assert live["configuration"]["name"] == "live-training"
    shares = {item["share"]: item for item in live["shares"]}
    assert shares["nlp"]["preemptions"] == 1 and shares["nlp"]["gpu_hours"]["borrowed"] > 0
    assert shares["vision"]["jobs"]["cancelled"] == 1
    assert live["overall"]["jobs"]["completed"] == 3


def test_the_budget_study_on_a_slice_sets_median_months_and_compares_with_and_without(tmp_path):
    # The trace: the busy half day of October, and a tenth of it again a month later, a quiet November. Each
    # share's median month is then half way between: in October the budgets are reached.
    lines = (DATA / "philly-day.csv").read_text().splitlines()
    quiet = []
    for line in lines[1:][::10]:
        moment, rest = line.split(",", 1)
        later = datetime.fromisoformat(moment) + timedelta(days=31)
        quiet.append(f"{later:%Y-%m-%d %H:%M:%S},{rest}")
    trace = tmp_path / "philly.csv"
    trace.write_text("\n".join([*lines, *quiet]) + "\n")
    (tmp_path / "philly_vc.csv").write_text((DATA / "philly_vc.csv").read_text())
    output = replay(
        "--trace",
        str(trace),
        "--start",
        "2017-10-17",
        "--days",
        "0.5",
        "--budget-study",
        "--check",
        "--json",
        str(tmp_path / "study.json"),
    )
    assert "budgets from each share's median month of" in output
    assert "the 3 biggest borrowers (" in output and "the other " in output
    study = json.loads((tmp_path / "study.json").read_text())
    reached = [share for share in study["shares"] if share["spent_at"] is not None]
    assert reached
    for share in reached:  # reached: with budgets it used at least its budget, and may end a little over
        assert share["gpu_hours"][1] >= float(share["budget"])
    with pytest.raises(CommandError, match="--budget-study replays the Philly trace"):
        replay("--history", "--queue", "x", "--budget-study")
