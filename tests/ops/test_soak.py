"""The soak (`python -m tools.soak`): its checks catch what they must; a short run passes on PostgreSQL, Redis."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.factories import JobQueueFactory, environment_with, job_in, share_with
from tests.ops.support import BASE_DIR, PYTHON, child_env, ops_broker_url, require_redis
from tools.soak.command import Command
from tools.soak.invariants import (
    Config,
    capacity_violations,
    history_violations,
    replay_violations,
    slot_violations,
    unstarted_hold_violations,
)
from tools.soak.report import answer_text, logs_excerpt
from tools.soak.world import EXT_CAPACITY, agent_slots

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
P5, P4 = 1, 2
RESERVE, LEND, BORROW = 10, 11, 12


def config() -> Config:
    """One queue, 8 P5 and 4 P4: RESERVE 3 P5, LEND 2 P5, LEND_AND_BORROW (50%) 2 P5 and 4 P4; a plan of 2."""
    return Config(
        capacity={(1, P5): 8, (1, P4): 4},
        shares={
            RESERVE: {"queue": 1, "name": "r", "strategy": "RESERVE", "borrow_limit": -1},
            LEND: {"queue": 1, "name": "l", "strategy": "LEND", "borrow_limit": -1},
            BORROW: {"queue": 1, "name": "b", "strategy": "LEND_AND_BORROW", "borrow_limit": 50},
        },
        limits={(RESERVE, P5): 3, (LEND, P5): 2, (BORROW, P5): 2, (BORROW, P4): 4},
        plans={
            7: {"name": "plan", "instance_count": 2, "start_time": T0, "end_time": T0 + timedelta(hours=1)}
        },
        type_names={P5: "p5", P4: "p4"},
    )


def test_legal_usage_breaks_nothing():
    assert (
        capacity_violations(
            config(), {(RESERVE, P5): 3, (LEND, P5): 2, (BORROW, P5): 3, (BORROW, P4): 4}, {7: 2}, T0
        )
        == []
    )


@pytest.mark.parametrize(
    ("usage", "plans", "found"),
    [
        ({(RESERVE, P5): 4}, {}, "r p5: usage 4 over its limit 3"),
        ({(LEND, P5): 3}, {}, "l p5: usage 3 over its limit 2"),
        ({(BORROW, P5): 4}, {}, "b p5: usage 4 over its borrow ceiling 3"),
        # RESERVE's idle 3 are held back: 6 in use by others + 3 reserved > 8, though only 6 are in use.
        ({(LEND, P5): 2, (BORROW, P5): 3, (RESERVE, P5): 0}, {}, None),
        ({(LEND, P5): 3, (BORROW, P5): 3}, {}, "sum of max(usage, reserved) 9 over capacity 8"),
        ({(BORROW, P4): 5}, {}, "on-demand usage 5 over capacity 4"),
        ({}, {7: 3}, "plan plan: 3 in use over its 2 instances"),
    ],
)
def test_each_rule_of_spec_2_is_caught(usage, plans, found):
    broken = capacity_violations(config(), usage, plans, T0)

    if found is None:
        assert broken == []
    else:
        assert any(found in message for message in broken), broken


def test_a_plan_in_use_outside_its_window_is_caught():
    assert "while not ACTIVE" in capacity_violations(config(), {}, {7: 1}, T0 + timedelta(hours=2))[0]


def attempt(job, type_id, count, start, stop=None, plan=None):
    return {
        "job_id": job,
        "instance_type_id": type_id,
        "instance_count": count,
        "training_plan_id": plan,
        "scheduled_at": T0 + timedelta(seconds=start),
        "stopped_at": None if stop is None else T0 + timedelta(seconds=stop),
    }


def test_the_replay_allows_back_to_back_placements_and_catches_an_overlap():
    share_of = {1: BORROW, 2: BORROW, 3: BORROW}
    back_to_back = [attempt(1, P4, 4, 0, 10), attempt(2, P4, 4, 10)]  # a pass frees and admits at once
    overlap = [attempt(1, P4, 4, 0, 10), attempt(3, P4, 1, 9)]

    assert replay_violations(config(), back_to_back, share_of) == ([], 2)
    broken, points = replay_violations(config(), overlap, share_of)
    assert points == 3
    assert broken and all(message.startswith("replay at 2026-12-01T12:00:09") for message in broken)
    assert any("on-demand usage 5 over capacity 4" in message for message in broken)


def test_histories_that_follow_the_lifecycle_pass():
    closed, open_ = attempt(1, P5, 1, 0, 5), attempt(1, P5, 1, 6)
    assert (
        history_violations(
            {"id": 1, "status": "SUCCEEDED"},
            ["SUBMITTED", "ADMITTED", "BORROWED", "STARTED", "SUCCEEDED"],
            [closed],
        )
        == []
    )
    assert (
        history_violations(
            {"id": 1, "status": "RUNNING"},
            ["SUBMITTED", "ADMITTED", "PREEMPTED_RECLAIM", "CONFIG_CHANGED", "ADMITTED", "STARTED"],
            [closed, open_],
        )
        == []
    )
    assert (
        history_violations({"id": 1, "status": "RUNNABLE"}, ["SUBMITTED", "ADMITTED", "FAILED"], [closed])
        == []
    )
    assert history_violations({"id": 1, "status": "CANCELLED"}, ["SUBMITTED", "CANCELLED"], []) == []


@pytest.mark.parametrize(
    ("status", "kinds", "attempts", "found"),
    [
        ("SCHEDULED", ["ADMITTED"], [attempt(1, P5, 1, 0)], "does not start with one SUBMITTED"),
        (
            "SCHEDULED",
            ["SUBMITTED", "ADMITTED", "ADMITTED"],
            [attempt(1, P5, 1, 0, 1), attempt(1, P5, 1, 1)],
            "duplicate placement",
        ),
        (
            "SCHEDULED",
            ["SUBMITTED", "ADMITTED"],
            [attempt(1, P5, 1, 0), attempt(1, P5, 1, 0)],
            "1 ADMITTED events but 2 attempts",
        ),
        (
            "RUNNING",
            ["SUBMITTED", "ADMITTED", "STARTED"],
            [attempt(1, P5, 1, 0, 3)],
            "placed with 0 open attempts",
        ),
        (
            "SUCCEEDED",
            ["SUBMITTED", "ADMITTED", "SUCCEEDED"],
            [attempt(1, P5, 1, 0)],
            "open attempts while not placed",
        ),
        ("FAILED", ["SUBMITTED", "ADMITTED", "SUCCEEDED"], [attempt(1, P5, 1, 0, 3)], "last event SUCCEEDED"),
        ("RUNNABLE", ["SUBMITTED", "STARTED"], [], "STARTED while not placed"),
    ],
)
def test_broken_histories_are_caught(status, kinds, attempts, found):
    broken = history_violations({"id": 1, "status": status}, kinds, attempts)

    assert any(found in message for message in broken), broken


def drain(queue_ids: list[int], *, stall: int, limit: int) -> tuple[str | None, float]:
    command = Command()
    command.options = {"drain_seconds": limit, "stall_seconds": stall}
    return command._drain({"queue_ids": queue_ids})


@pytest.mark.django_db
def test_the_drain_ends_as_soon_as_no_job_finishes():
    queue = JobQueueFactory()
    environment_with(queue, {"p5": 4})
    job_in(share_with(queue, "s", {"p5": 4}), [("p5", 1)])

    undrained, _ = drain([queue.pk], stall=1, limit=60)

    assert undrained.startswith("the drain stalled: no job finished for 1 s (")


@pytest.mark.django_db
def test_the_drain_ends_at_once_on_finished_queues():
    queue = JobQueueFactory()

    undrained, _ = drain([queue.pk], stall=1, limit=60)

    assert undrained is None


@pytest.mark.django_db
def test_the_drain_has_a_limit_even_while_jobs_finish():
    queue = JobQueueFactory()
    environment_with(queue, {"p5": 4})
    job_in(share_with(queue, "s", {"p5": 4}), [("p5", 1)])

    undrained, _ = drain([queue.pk], stall=5, limit=1)

    assert undrained == "the queues did not drain within 1 s"


@pytest.mark.django_db
def test_the_soak_refuses_sqlite_or_a_broker_other_than_redis(settings, on_postgres):
    settings.CELERY_BROKER_URL = "filesystem://"
    expected = "needs Redis" if on_postgres else "needs PostgreSQL"

    with pytest.raises(CommandError, match=expected):
        call_command(Command(), "--seconds", "1")


def test_the_soak_needs_an_agent_per_instance_type_of_its_external_queue():
    with pytest.raises(CommandError, match="--agents: from 2"):
        call_command(Command(), "--seconds", "1", "--agents", "1")


@pytest.mark.django_db
def test_the_soak_never_stops_a_redis_it_did_not_start(settings, on_postgres):
    if not on_postgres:
        pytest.skip("the soak refuses SQLite before it looks at faults")
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:6379/1"

    with pytest.raises(CommandError, match="--own-redis"):
        call_command(Command(), "--seconds", "1", "--fault", "redis")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_short_soak_passes_with_three_workers(tmp_path):
    broker = ops_broker_url()
    require_redis(broker)
    report = tmp_path / "soak.json"

    run = subprocess.run(
        [
            PYTHON,
            "-m",
            "tools.soak",
            "--seconds",
            "30",
            "--clients",
            "4",
            "--workers",
            "3",
            "--jobs",
            # Half the submissions the clients would make in 30 s: they go on cancelling, reprioritising and
            # reading while the queues work the backlog off, so the drain after the load stays short.
            "250",
            "--drain-seconds",
            "240",
            "--stall-seconds",
            "45",
            "--json",
            str(report),
        ],
        env=child_env(CELERY_BROKER_URL=broker),
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        timeout=420,
    )

    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-8000:]
    result = json.loads(report.read_text())
    assert result["violations"] == []
    assert result["samples"] >= 40 and result["sample_errors"] == 0
    assert result["jobs_total"] >= 20 and result["histories_broken"] == 0
    assert result["passes"] >= 10 and result["replay_change_points"] >= 20
    assert set(result["jobs"]) <= {"SUCCEEDED", "FAILED", "CANCELLED"}  # drained
    print(run.stdout)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_soak_with_multi_slot_and_one_slot_agents_never_holds_a_slot_twice(tmp_path):
    """Real agents, one with several slots and the others with one per type, so jobs of several instances run
    as tasks across agents: no instant when two live processes hold one slot, and no capacity held past the
    start deadline by an attempt nobody started (both from the processes' own notes)."""
    broker = ops_broker_url()
    require_redis(broker)
    report = tmp_path / "soak.json"
    argv = [
        PYTHON,
        "-m",
        "tools.soak",
        "--seconds",
        "25",
        "--clients",
        "3",
        "--workers",
        "2",
        "--jobs",
        "200",  # fewer than the clients would submit: the agents work part of the backlog off during the load
    ]
    argv += ["--agents", "6", "--mixed-agents", "--drain-seconds", "240", "--json", str(report)]
    run = subprocess.run(
        argv,
        env=child_env(CELERY_BROKER_URL=broker),
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-8000:]
    result = json.loads(report.read_text())
    assert result["violations"] == [] and result["agents"]["violations"] == 0
    assert result["agents"]["processes"] >= 5 and result["agents"]["tasks"] >= 5
    print(run.stdout)


def test_histories_through_a_graceful_stop_pass_and_a_placement_while_stopping_does_not():
    closed, open_ = attempt(1, P5, 1, 0, 5), attempt(1, P5, 1, 6)
    graceful = ["SUBMITTED", "ADMITTED", "STARTED", "PREEMPTED_RECLAIM", "STOPPING"]
    assert history_violations({"id": 1, "status": "STOPPING"}, graceful, [open_]) == []
    assert history_violations({"id": 1, "status": "RUNNABLE"}, [*graceful, "STOPPED"], [closed]) == []
    assert (
        history_violations(
            {"id": 1, "status": "RUNNING"}, [*graceful, "STOPPED", "ADMITTED", "STARTED"], [closed, open_]
        )
        == []
    )
    lost = ["SUBMITTED", "ADMITTED", "STARTED", "EXECUTOR_LOST"]
    assert history_violations({"id": 1, "status": "RUNNABLE"}, lost, [closed]) == []

    broken = history_violations({"id": 1, "status": "SCHEDULED"}, [*graceful, "ADMITTED"], [closed, open_])
    assert any("duplicate placement" in message for message in broken)


def test_mixed_agents_split_each_types_capacity_into_one_large_agent_and_one_slot_agents():
    slots = agent_slots(6, mixed=True)
    for key, capacity in EXT_CAPACITY.items():
        mine = [count for kind, count in slots if kind == key]
        assert sum(mine) == capacity and sorted(mine)[:-1] == [1] * (len(mine) - 1) and max(mine) > 1
    assert agent_slots(2, mixed=False) == [(key, EXT_CAPACITY[key]) for key in sorted(EXT_CAPACITY)]


def test_the_slot_check_catches_two_live_processes_on_one_slot_and_takes_a_killed_one_as_live_until_its_end():
    agent = "/soak/agent0"
    lines = [
        f"10.0 start 1 1 0 {agent} 0,1",
        f"15.0 end 1 1 0 {agent} 0,1",
        f"15.5 start 2 1 0 {agent} 1",  # after job 1 ended: fine
        f"20.0 end 2 1 0 {agent} 1",
        f"19.0 start 3 1 1 {agent} 2",  # never noted its end (SIGKILLed): live until its attempt ended
        f"21.0 start 4 1 0 {agent} 2",
        "21.0 start 5 1 0 /soak/agent1 2",  # another agent's slot 2
    ]
    ends = {(3, 1): datetime.fromtimestamp(22.0, tz=UTC)}
    (found,) = slot_violations(lines, ends, now=100.0)
    assert "slot 2 of agent0" in found and "job 3 attempt 1 task 1 and job 4" in found
    assert slot_violations(lines[:4], {}, now=100.0) == []


def test_the_unstarted_hold_check_catches_capacity_held_past_the_start_deadline_by_an_attempt_nobody_ran():
    attempts = [
        {"job_id": 1, "attempt": 1, "scheduled_at": T0, "stopped_at": T0 + timedelta(seconds=200)},
        {"job_id": 2, "attempt": 1, "scheduled_at": T0, "stopped_at": T0 + timedelta(seconds=200)},
        {"job_id": 3, "attempt": 1, "scheduled_at": T0, "stopped_at": T0 + timedelta(seconds=20)},
    ]
    lines = [f"{(T0 + timedelta(seconds=5)).timestamp():.3f} start 1 1 0 /soak/agent0 0"]
    (found,) = unstarted_hold_violations(attempts, lines, now=T0 + timedelta(seconds=300))
    assert found.startswith("job 2 attempt 1 held its capacity 200 s")  # job 3 ended within its deadline


def test_a_failed_soak_quotes_the_errors_its_services_logged_and_the_agents_last_lines(tmp_path):
    (tmp_path / "web.log").write_text(
        "2026-12-05 04:31:50,001 WARNING django.request Conflict: /api/v1/jobs/7/cancel/\n"
        "2026-12-05 04:31:51,002 ERROR django.request Internal Server Error: /api/v1/jobs/\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in submit\n'
        "django.db.utils.OperationalError: deadlock detected\n"
        "2026-12-05 04:31:52,003 WARNING django.request Bad Request: /api/v1/jobs/\n"
    )
    (tmp_path / "worker0.log").write_text("all quiet\n")
    (tmp_path / "agent3.log").write_text("".join(f"line {i}\n" for i in range(40)))
    text = logs_excerpt(tmp_path)
    assert "Internal Server Error" in text and "deadlock detected" in text
    assert "Conflict" not in text and "Bad Request" not in text and "worker0" not in text
    assert "line 39" in text and "line 25" in text and "line 24" not in text  # an agent's last 15 lines
    assert logs_excerpt(tmp_path, limit=100).startswith(f"what the logs say ({tmp_path}):\n[...]")
    (tmp_path / "web.log").unlink()
    (tmp_path / "agent3.log").unlink()
    assert logs_excerpt(tmp_path).endswith("the services logged no errors")


def test_an_unexpected_error_page_is_named_by_its_title_not_quoted():
    class Answer:
        def __init__(self, content_type, text):
            self.headers, self.text = {"Content-Type": content_type}, text

    page = "<!doctype html><html><head><title>Something went wrong · quotaportal</title></head>" + "x" * 500
    assert (
        answer_text(Answer("text/html; charset=utf-8", page))
        == "(an HTML page: Something went wrong · quotaportal)"
    )
    assert (
        answer_text(Answer("application/json", '{"detail": "' + "y" * 400 + '"}'))
        == ('{"detail": "' + "y" * 400)[:300]
    )
