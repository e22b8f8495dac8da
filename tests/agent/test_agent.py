"""The reference agent against a fake server, running real processes (small Python programs).

Each test starts the agent in a thread of the test process with short intervals (heartbeat 0.3 s, long-poll
1 s, grace periods of 1 to 3 s); times asserted come from the processes' own files, not from the agent.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from quotaportal_agent.agent import Agent
from tests.agent.conftest import python, quick_config
from tests.agent.fake_server import INSTANCE_TYPE


def wait_until(condition, timeout: float = 10.0, what: str = "condition"):
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if value := condition():
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def stamped(path: Path, word: str) -> float:
    """The time a job wrote next to `word` in its own file."""
    return next(float(line.split()[1]) for line in lines(path) if line.split()[0] == word)


WAIT_FOR_GO = """
    import os, sys, time
    with open(os.environ["OUT"], "a") as out:
        out.write(f"run {time.time()} {os.environ['CUDA_VISIBLE_DEVICES']}\\n")
    while not os.path.exists(os.environ["GO"]):
        time.sleep(0.02)
    sys.exit(int(os.environ.get("EXIT", "0")))
"""


def test_a_job_runs_to_succeeded_with_its_environment(server, start_agent, tmp_path):
    out = tmp_path / "seen.json"
    job = server.add_job(
        {
            "command": python("""
                import json, os
                names = ["QUOTAPORTAL_JOB_ID", "QUOTAPORTAL_ATTEMPT", "QUOTAPORTAL_INSTANCE_TYPE",
                         "QUOTAPORTAL_INSTANCE_COUNT", "CUDA_VISIBLE_DEVICES", "EXTRA"]
                seen = {name: os.environ.get(name) for name in names}
                seen["cwd"] = os.getcwd()
                with open(os.environ["OUT"], "w") as f:
                    json.dump(seen, f)
                print("all done")
            """),
            "env": {"OUT": str(out), "EXTRA": "from the payload"},
        },
        instance_count=2,
    )
    start_agent()

    final = server.wait_final(job)

    assert final.body["status"] == "SUCCEEDED" and final.body["exit_code"] == 0
    assert server.accepted(job)[:2] == ["STARTING", "RUNNING"]
    assert "all done" in final.body["output_tail"]
    seen = json.loads(out.read_text())
    assert seen.pop("cwd") == str(tmp_path / "work" / "jobs" / str(job))
    assert seen == {
        "QUOTAPORTAL_JOB_ID": str(job),
        "QUOTAPORTAL_ATTEMPT": "1",
        "QUOTAPORTAL_INSTANCE_TYPE": INSTANCE_TYPE,
        "QUOTAPORTAL_INSTANCE_COUNT": "2",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "EXTRA": "from the payload",
    }


def test_a_whole_job_sees_every_gpu_of_its_instances_as_the_server_counts_them(server, start_agent, tmp_path):
    out = tmp_path / "gpus.txt"
    job = server.add_job(
        {
            "command": python("""
                import os
                with open(os.environ["OUT"], "w") as f:
                    f.write(os.environ["CUDA_VISIBLE_DEVICES"])
            """),
            "env": {"OUT": str(out)},
        },
        instance_count=2,
        gpus_per_instance=4,
    )
    start_agent()

    assert server.wait_final(job).body["status"] == "SUCCEEDED"
    assert out.read_text() == "0,1,2,3,4,5,6,7"  # slots 0 and 1, four GPUs each


def test_a_failing_job_reports_its_exit_code_and_the_tail_of_its_output(server, start_agent):
    job = server.add_job(
        {
            "command": python("""
                import sys
                for n in range(1, 201):
                    print(f"line {n} " + "x" * 30)
                print("the end", file=sys.stderr)
                sys.exit(3)
            """)
        }
    )
    start_agent()

    final = server.wait_final(job)

    assert final.body["status"] == "FAILED" and final.body["exit_code"] == 3
    assert final.body["reason"] == "exited with code 3"
    tail = final.body["output_tail"]
    assert len(tail.encode()) <= 4096 and len(tail.splitlines()) <= 50
    assert tail.splitlines()[-1] == "the end" and "line 200 " in tail and "line 100 " not in tail


def test_a_stop_lets_the_job_checkpoint_and_exit_within_its_grace(server, start_agent, tmp_path):
    out = tmp_path / "times"
    job = server.add_job(
        {
            "command": python("""
                import os, signal, sys, time
                out = os.environ["OUT"]
                def checkpoint(*_):
                    with open(out, "a") as f:
                        f.write(f"term {time.time()}\\n")
                    time.sleep(0.3)
                    with open("checkpoint", "w") as f:
                        f.write("step 7")
                    with open(out, "a") as f:
                        f.write(f"exit {time.time()}\\n")
                    sys.exit(0)
                signal.signal(signal.SIGTERM, checkpoint)
                with open(out, "a") as f:
                    f.write(f"ready {time.time()}\\n")
                while True:
                    time.sleep(0.02)
            """),
            "env": {"OUT": str(out)},
        },
        grace=3,
    )
    start_agent()
    wait_until(lambda: lines(out), what="the job to start")

    asked = time.time()
    deadline = server.request_stop(job, grace=3)
    final = server.wait_final(job)

    assert final.body["status"] == "STOPPED" and final.body["exit_code"] == 0
    assert asked <= stamped(out, "term") < stamped(out, "exit") < deadline
    assert final.at < deadline
    assert (tmp_path / "work" / "jobs" / str(job) / "checkpoint").read_text() == "step 7"
    assert final.body["reason"].startswith("stopped by the server")


def test_a_job_that_ignores_sigterm_is_killed_at_the_deadline(server, start_agent, tmp_path):
    out = tmp_path / "times"
    job = server.add_job(
        {
            "command": python("""
                import os, signal, time
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                while True:
                    with open(os.environ["OUT"], "a") as f:
                        f.write(f"alive {time.time()}\\n")
                    time.sleep(0.02)
            """),
            "env": {"OUT": str(out)},
        },
    )
    start_agent()
    wait_until(lambda: lines(out), what="the job to start")

    deadline = server.request_stop(job, grace=1)
    final = server.wait_final(job)

    last_alive = float(lines(out)[-1].split()[1])
    assert deadline - 0.1 <= last_alive <= deadline + 0.5
    assert final.body["status"] == "STOPPED" and final.body["exit_code"] == 137
    assert "SIGKILL" in final.body["reason"] and final.at >= deadline


def test_a_shutdown_while_the_server_is_down_keeps_the_reports_instead_of_waiting(
    server, start_agent, tmp_path
):
    out, go = tmp_path / "runs", tmp_path / "go"
    job = server.add_job({"command": python(WAIT_FOR_GO), "env": {"OUT": str(out), "GO": str(go)}})
    running = start_agent(shutdown_flush_seconds=30.0)
    wait_until(lambda: "RUNNING" in server.accepted(job), what="RUNNING")
    server.go_down()  # as under `make run`, whose Ctrl-C stops the web server with the agent
    go.touch()
    wait_until(
        lambda: running.agent.reports_wait.is_set(), what="the SUCCEEDED report to wait for the server"
    )

    started = time.monotonic()
    running.stop()

    # Not the 30 s flush: the report stays in the state file, delivered by the next start.
    assert time.monotonic() - started < 5
    saved = json.loads((tmp_path / "work" / "state.json").read_text())
    assert [(r["job_id"], r["body"]["status"]) for r in saved["outbox"]][-1] == (job, "SUCCEEDED")


def test_a_stale_attempt_is_refused_and_its_process_stopped(server, start_agent, tmp_path):
    out = tmp_path / "times"
    job = server.add_job(
        {"command": python(WAIT_FOR_GO), "env": {"OUT": str(out), "GO": str(tmp_path / "never")}}, grace=1
    )
    running = start_agent()
    wait_until(lambda: "RUNNING" in server.accepted(job), what="RUNNING")

    server.lose(job)  # the attempt's lease ran out: the next heartbeat is about a stale attempt

    wait_until(lambda: not running.agent.state.jobs, timeout=5, what="the stale process to end")
    refused = [r for r in server.reports if r.job_id == job and r.code == 409]
    assert refused and refused[0].body["status"] == "RUNNING" and refused[0].body["attempt"] == 1
    assert server.jobs[job].status == "RUNNABLE"
    assert all(r.code == 409 for r in server.reports if r.job_id == job and r.at > refused[0].at)


def test_reports_wait_out_an_outage_in_order_and_no_job_runs_twice(server, start_agent, tmp_path):
    out, go = tmp_path / "runs", tmp_path / "go"
    server.resend_claimed = True  # the start is offered again until STARTING arrives
    server.down_after_claim = True
    job = server.add_job({"command": python(WAIT_FOR_GO), "env": {"OUT": str(out), "GO": str(go)}})
    running = start_agent()
    wait_until(lambda: lines(out), what="the job to start")
    assert server.down

    go.touch()  # the job ends while the server is down
    wait_until(lambda: not running.agent.state.jobs, what="the job to end")
    time.sleep(0.5)
    assert [r.body["status"] for r in running.agent.state.outbox][-1] == "SUCCEEDED"
    server.come_up()
    final = server.wait_final(job)

    assert final.body["status"] == "SUCCEEDED"
    assert len(lines(out)) == 1
    statuses = [s for n, s in enumerate(server.accepted(job)) if n == 0 or server.accepted(job)[n - 1] != s]
    assert statuses in (["STARTING", "RUNNING", "SUCCEEDED"],)
    assert server.jobs[job].claimed >= 1


def test_bad_payloads_fail_their_jobs_and_the_agent_goes_on(server, start_agent):
    bad = {
        "no payload": None,
        "no command": {"env": {"A": "b"}},
        "a string": {"command": "echo hello"},
        "empty": {"command": []},
        "not strings": {"command": ["echo", 1]},
        "bad env": {"command": ["true"], "env": {"A": 1}},
        "env a list": {"command": ["true"], "env": ["A=1"]},
    }
    jobs = {name: server.add_job(payload) for name, payload in bad.items()}
    odd_grace = server.add_job({"command": ["true"]}, grace="soon")
    missing = server.add_job({"command": ["/nonexistent/program", "--flag"]})
    good = server.add_job({"command": python("print('fine')")})
    start_agent()

    for name, job in jobs.items():
        final = server.wait_final(job)
        assert final.body["status"] == "FAILED" and final.body["exit_code"] is None, name
        assert final.body["reason"].startswith("bad payload: "), name
        assert server.accepted(job) == ["FAILED"], name
    assert "`env`" in server.final(jobs["bad env"]).body["reason"]
    assert "no `command`" in server.final(jobs["no command"]).body["reason"]
    odd = server.wait_final(odd_grace)
    assert odd.body["status"] == "FAILED" and odd.body["reason"].startswith("bad start entry: ")
    not_found = server.wait_final(missing)
    assert not_found.body["status"] == "FAILED" and not_found.body["exit_code"] == 127
    assert "cannot run '/nonexistent/program'" in not_found.body["output_tail"]
    assert server.wait_final(good).body["status"] == "SUCCEEDED"


def test_output_with_nul_bytes_is_reported_with_the_job_and_not_refused(server, start_agent):
    job = server.add_job(
        {
            "command": python("""
        import sys
        sys.stdout.buffer.write(b"header\\x00\\x00binary\\xff\\n")
        print("done")
    """)
        }
    )
    start_agent()

    final = server.wait_final(job)

    assert final.body["status"] == "SUCCEEDED" and final.body["exit_code"] == 0
    assert final.body["output_tail"] == "header\ufffd\ufffdbinary\ufffd\ndone"
    assert all(report.code == 200 for report in server.reports)


def test_a_start_entry_whose_error_is_long_fails_with_a_reason_the_server_takes(server, start_agent):
    job = server.add_job({"command": ["true"]}, grace="x" * 10_000)
    start_agent()

    final = server.wait_final(job)

    assert final.body["status"] == "FAILED" and final.body["reason"].startswith("bad start entry: ")
    assert len(final.body["reason"]) == 2000
    assert all(report.code == 200 for report in server.reports)


def test_a_final_report_the_server_refuses_is_sent_again_without_what_it_refused(server, start_agent):
    server.refuse_output = True
    job = server.add_job({"command": python("print('some output'); raise SystemExit(4)")})
    start_agent()

    final = server.wait_final(job)

    assert final.body["status"] == "FAILED" and final.body["output_tail"] == ""
    assert final.body["reason"].startswith("the server refused this attempt's report (400: ")
    assert server.accepted(job)[-1] == "FAILED"
    assert [report.code for report in server.reports if report.job_id == job][-2:] == [400, 200]


def test_an_exit_code_the_server_cannot_store_is_reported_as_unknown_with_why(server, tmp_path):
    agent = Agent(quick_config(server, tmp_path))

    agent.enqueue(5, 1, "FAILED", "exited", exit_code=2**40, output_tail="a\x00b")

    (report,) = agent.state.outbox
    assert report.body == {
        "attempt": 1,
        "status": "FAILED",
        "reason": f"exited (exit code {2**40} out of range)",
        "exit_code": None,
        "output_tail": "a\ufffdb",
    }


def test_a_server_answering_garbage_to_polls_is_waited_out_and_polling_goes_on(server, start_agent):
    server.garbage = b"[" * 100_000  # JSON nested past any parser's depth
    start_agent()
    wait_until(lambda: server.garbage_answers >= 2, what="two polls answered with garbage")
    server.garbage = None
    job = server.add_job({"command": python("print('fine')")})

    assert server.wait_final(job).body["status"] == "SUCCEEDED"


def test_concurrent_jobs_get_disjoint_slots_and_a_job_waits_for_free_ones(server, start_agent, tmp_path):
    go = tmp_path / "go"
    outs = [tmp_path / "a", tmp_path / "b"]
    pair = [
        server.add_job(
            {"command": python(WAIT_FOR_GO), "env": {"OUT": str(out), "GO": str(go)}}, instance_count=2
        )
        for out in outs
    ]
    too_big = server.add_job({"command": ["true"]}, instance_count=5)
    start_agent(slots=4)
    for out in outs:
        wait_until(lambda out=out: lines(out), what="both jobs to start")

    no_room = server.add_job({"command": ["true"]}, instance_count=1)

    # The agent offers the slots it has free: a full agent takes nothing, and a job larger than it is left to
    # an agent with room (it never fails for being offered to one without).
    wait_until(lambda: server.offers[-3:] == [0, 0, 0], what="polls offering no free slot")
    assert server.jobs[no_room].claimed == 0 and server.jobs[too_big].claimed == 0
    devices = [set(lines(out)[0].split()[2].split(",")) for out in outs]
    assert devices[0].isdisjoint(devices[1]) and devices[0] | devices[1] == {"0", "1", "2", "3"}
    go.touch()
    assert [server.wait_final(job).body["status"] for job in pair] == ["SUCCEEDED", "SUCCEEDED"]
    assert server.wait_final(no_room).body["status"] == "SUCCEEDED"
    assert server.jobs[too_big].claimed == 0 and server.final(too_big) is None
    assert max(offer for offer in server.offers if offer is not None) == 4


def test_a_start_waits_for_the_slots_of_a_job_still_stopping(server, start_agent, tmp_path):
    victim_out, preemptor_out = tmp_path / "victim", tmp_path / "preemptor"
    victim = server.add_job(
        {
            "command": python("""
                import os, signal, sys, time
                def leave(*_):
                    time.sleep(0.4)
                    with open(os.environ["OUT"], "a") as f:
                        f.write(f"exit {time.time()}\\n")
                    sys.exit(0)
                signal.signal(signal.SIGTERM, leave)
                with open(os.environ["OUT"], "a") as f:
                    f.write(f"ready {time.time()}\\n")
                while True:
                    time.sleep(0.02)
            """),
            "env": {"OUT": str(victim_out)},
        }
    )
    start_agent(slots=1, hold_seconds=3)
    wait_until(lambda: lines(victim_out), what="the victim to start")

    server.request_stop(victim, grace=2)
    preemptor = server.add_job(
        {"command": python(WAIT_FOR_GO), "env": {"OUT": str(preemptor_out), "GO": str(tmp_path)}}
    )

    assert server.wait_final(victim).body["status"] == "STOPPED"
    assert server.wait_final(preemptor).body["status"] == "SUCCEEDED"
    assert float(lines(preemptor_out)[0].split()[1]) > stamped(victim_out, "exit")


def test_a_stop_for_an_attempt_it_never_ran_is_answered_at_once(server, start_agent):
    job = server.add_job({"command": ["true"]})
    server.jobs[job].claimed = 1  # handed out before, but the answer never reached this agent
    server.request_stop(job, grace=30)
    start_agent()

    final = server.wait_final(job, timeout=5)

    assert final.body["status"] == "STOPPED" and final.body["exit_code"] is None
    assert final.body["reason"] == "not running on this agent"


def test_the_agent_leaves_jobs_running_when_it_shuts_down(server, start_agent, tmp_path):
    out, go = tmp_path / "runs", tmp_path / "go"
    job = server.add_job({"command": python(WAIT_FOR_GO), "env": {"OUT": str(out), "GO": str(go)}})
    running = start_agent()
    wait_until(lambda: "RUNNING" in server.accepted(job), what="RUNNING")

    running.stop()

    (pid,) = [j.pid for j in running.agent.state.jobs.values()]
    os.kill(pid, 0)  # still there
    saved = json.loads((tmp_path / "work" / "state.json").read_text())
    assert [(j["id"], j["attempt"], j["pid"]) for j in saved["jobs"]] == [(job, 1, pid)]


def test_with_stop_jobs_on_exit_the_agent_stops_its_jobs_when_it_shuts_down(server, start_agent, tmp_path):
    out, go = tmp_path / "runs", tmp_path / "go"
    job = server.add_job({"command": python(WAIT_FOR_GO), "env": {"OUT": str(out), "GO": str(go)}})
    running = start_agent(stop_jobs_on_exit=True, exit_grace_seconds=2.0)
    wait_until(lambda: "RUNNING" in server.accepted(job), what="RUNNING")
    (pid,) = [j.pid for j in running.agent.state.jobs.values()]

    running.stop()

    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # the job's whole process group is gone
    # how it ended is reported, now or (kept in the state file) by the next agent
    saved = json.loads((tmp_path / "work" / "state.json").read_text())
    kept = [j["id"] for j in saved["jobs"]] + [r["job_id"] for r in saved["outbox"]]
    assert server.accepted(job)[-1] == "FAILED" or job in kept


def test_a_job_the_agent_stops_on_its_way_out_is_failed_even_if_it_exits_0(server, start_agent, tmp_path):
    """A job that checkpoints on SIGTERM and exits 0 did not finish: stopped by its agent's shutdown (not by
    the server), it is reported FAILED, so it goes back to the queue if it has retries left."""
    ready = tmp_path / "ready"
    job = server.add_job(
        {
            "command": python("""
                import os, pathlib, signal, sys, time
                signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # checkpoint and leave, as train.py does
                pathlib.Path(os.environ["READY"]).touch()
                time.sleep(60)
            """),
            "env": {"READY": str(ready)},
        }
    )
    running = start_agent(stop_jobs_on_exit=True, exit_grace_seconds=2.0)
    wait_until(lambda: "RUNNING" in server.accepted(job) and ready.exists(), what="RUNNING")

    running.stop()

    final = server.final(job)
    assert final is not None and final.body["status"] == "FAILED", server.accepted(job)
    assert final.body["exit_code"] == 0
    assert final.body["reason"] == "stopped when its agent shut down; exited with code 0"
