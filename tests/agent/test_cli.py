"""`python -m quotaportal_agent` as a real process: its arguments, and a restart that reconciles its jobs."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.agent.conftest import AGENT_DIR, python
from tests.agent.fake_server import ENVIRONMENT_NAME, INSTANCE_TYPE, TOKEN
from tests.agent.test_agent import WAIT_FOR_GO, lines, wait_until

PACKAGE = AGENT_DIR / "quotaportal_agent"


def agent_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "quotaportal_agent", *args]


def agent_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "QUOTAPORTAL_TOKEN"}
    return {**env, "PYTHONPATH": str(AGENT_DIR), **extra}


def run_agent(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        agent_command(*args), env=agent_env(**env), capture_output=True, text=True, timeout=30
    )


GOOD = [
    "--url",
    "http://127.0.0.1:9",
    "--token",
    TOKEN,
    "--environment",
    "3",
    "--instance-type",
    "gpu",
    "--slots",
    "2",
]


def replaced(flag: str, value: str | None) -> list[str]:
    args = list(GOOD)
    at = args.index(flag)
    if value is None:
        del args[at : at + 2]
    else:
        args[at + 1] = value
    return args


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (replaced("--slots", None), "--slots"),
        (replaced("--slots", "0"), "--slots"),
        (replaced("--slots", "two"), "--slots"),
        (replaced("--url", "ftp://host"), "--url"),
        (replaced("--token", None), "--token"),
        (replaced("--environment", " "), "--environment"),
        ([*GOOD, "--heartbeat-seconds", "-1"], "--heartbeat-seconds"),
        ([*GOOD, "--wait-seconds", "31"], "--wait-seconds"),
        ([*replaced("--token", None), "--token-file", "/nonexistent/token"], "--token-file"),
        ([*GOOD, "--token-file", "/nonexistent/token"], "--token-file"),
        ([*GOOD, "--port-range", "80-90"], "--port-range"),
        ([*GOOD, "--port-range", "30000-29000"], "--port-range"),
        ([*GOOD, "--gpus-per-instance", "-1"], "--gpus-per-instance"),
        ([*GOOD, "--advertise-address", " "], "--advertise-address"),
    ],
)
def test_a_bad_argument_is_one_line_naming_the_flag_and_exit_2(args, flag):
    result = run_agent(*args)

    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and flag in result.stderr, result.stderr
    assert result.stderr.startswith("quotaportal-agent: error: ")


def test_an_unknown_environment_name_is_refused(server, tmp_path):
    args = [*replaced("--url", server.url), "--work-dir", str(tmp_path)]
    args[args.index("--environment") + 1] = "nowhere"

    result = run_agent(*args)

    assert result.returncode == 2
    assert (
        result.stderr == "quotaportal-agent: error: --environment: no service environment named 'nowhere'\n"
    )


@pytest.mark.parametrize(
    "garbage",
    [b"<html>502 Bad Gateway</html>", b"[1, 2]", b'{"results": "none", "next": 5}', b'{"next": null}'],
)
def test_a_server_answering_garbage_to_the_name_lookup_is_waited_out_not_a_crash(server, tmp_path, garbage):
    server.garbage = garbage
    args = [*replaced("--url", server.url), "--work-dir", str(tmp_path / "work"), "--wait-seconds", "1"]
    args[args.index("--environment") + 1] = ENVIRONMENT_NAME
    agent = subprocess.Popen(agent_command(*args), env=agent_env(), stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)
        assert agent.poll() is None, agent.stderr.read()
        server.garbage = None
        wait_until(lambda: server.polls >= 1, what="a poll once the server makes sense")
    finally:
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=15) == 0
    assert "Traceback" not in agent.stderr.read()


def test_entries_without_an_id_in_the_name_lookup_name_nothing(server, tmp_path):
    server.garbage = (
        b'{"results": [1, "x", {"name": "local"}, {"name": "local", "id": "7; DROP"}], "next": null}'
    )
    args = [*replaced("--url", server.url), "--work-dir", str(tmp_path)]
    args[args.index("--environment") + 1] = ENVIRONMENT_NAME

    result = run_agent(*args)

    assert result.returncode == 2
    assert result.stderr == "quotaportal-agent: error: --environment: no service environment named 'local'\n"


def test_the_token_comes_from_a_file_and_the_agent_names_itself_in_its_polls(server, tmp_path):
    token_file = tmp_path / "agent-token"
    token_file.write_text(TOKEN + "\n")
    args = [*replaced("--url", server.url), "--work-dir", str(tmp_path / "work"), "--wait-seconds", "1"]
    del args[args.index("--token") : args.index("--token") + 2]
    args[args.index("--environment") + 1] = ENVIRONMENT_NAME  # the name lookup needs the token too
    agent = subprocess.Popen(
        agent_command(*args, "--token-file", str(token_file), "--name", "gpu-07"),
        env=agent_env(),
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: server.polls >= 1, what="a poll with the token from the file")
    finally:
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=15) == 0
    assert {executor for executor, _ in server.pollers} == {"gpu-07"}
    assert all(host for _, host in server.pollers)


def test_a_restarted_agent_adopts_what_runs_and_reports_what_ended_meanwhile(server, tmp_path):
    def start(*extra: str) -> subprocess.Popen:
        command = agent_command(
            "--url", server.url, "--environment", ENVIRONMENT_NAME, "--instance-type", INSTANCE_TYPE,
            "--slots", "3", "--work-dir", str(tmp_path / "work"), "--heartbeat-seconds", "0.3",
            "--wait-seconds", "1", *extra,
        )  # fmt: skip
        return subprocess.Popen(command, env=agent_env(QUOTAPORTAL_TOKEN=TOKEN), stderr=subprocess.DEVNULL)

    def job(name: str, exit_code: int) -> int:
        env = {"OUT": str(tmp_path / name), "GO": str(tmp_path / f"go-{name}"), "EXIT": str(exit_code)}
        return server.add_job({"command": python(WAIT_FOR_GO), "env": env}, name=name)

    lives_on, ends_meanwhile, killed_meanwhile = job("lives", 0), job("ends", 5), job("killed", 0)
    first = start()
    try:
        for each, name in ((lives_on, "lives"), (ends_meanwhile, "ends"), (killed_meanwhile, "killed")):
            wait_until(
                lambda each=each: "RUNNING" in server.accepted(each), what="three jobs reported running"
            )
            wait_until(lambda name=name: lines(tmp_path / name), what="three commands running")
        first.send_signal(signal.SIGKILL)  # no shutdown at all: the state file is all the next agent has
        first.wait(timeout=5)
        state = json.loads((tmp_path / "work" / "state.json").read_text())
        pids = {job["id"]: job["pid"] for job in state["jobs"]}
        (tmp_path / "go-ends").touch()
        os.killpg(pids[killed_meanwhile], signal.SIGKILL)  # leaves no exit status behind
        exit_file = tmp_path / "work" / "jobs" / str(ends_meanwhile) / "attempt-1.exit"
        wait_until(exit_file.exists, what="the job to end while the agent is down")
        reports_before = len(server.reports)

        second = start()
        try:
            ended = server.wait_final(ends_meanwhile)
            killed = server.wait_final(killed_meanwhile)
            wait_until(
                lambda: any(r.job_id == lives_on for r in server.reports[reports_before:]),
                what="a heartbeat for the adopted job",
            )
            (tmp_path / "go-lives").touch()
            adopted = server.wait_final(lives_on)
        finally:
            second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=15) == 0
    finally:
        if first.poll() is None:
            first.kill()
        for pid in locals().get("pids", {}).values():
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass

    assert (ended.body["status"], ended.body["exit_code"]) == ("FAILED", 5)
    assert (killed.body["status"], killed.body["exit_code"]) == ("FAILED", None)
    assert killed.body["reason"] == "agent restarted; process exit unknown"
    assert (adopted.body["status"], adopted.body["exit_code"]) == ("SUCCEEDED", 0)
    for name in ("lives", "ends", "killed"):
        assert len(lines(tmp_path / name)) == 1, f"{name} ran more than once"


def test_the_agent_imports_only_the_standard_library_and_requests():
    allowed = set(sys.stdlib_module_names) | {"requests", "quotaportal_agent"}
    for path in sorted(PACKAGE.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"


def test_the_supervisor_imports_nothing_of_the_package():
    """It runs isolated (python -I) in the job's environment, where the package may not be importable."""
    tree = ast.parse((PACKAGE / "supervise.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert imported <= set(sys.stdlib_module_names)
    assert not [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]


def test_the_example_job_resumes_from_its_checkpoint(tmp_path):
    example = AGENT_DIR / "examples" / "train.py"
    env = {**os.environ, "TRAIN_STEPS": "30", "TRAIN_STEP_SECONDS": "0.05"}
    first = subprocess.Popen(
        [sys.executable, str(example)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True
    )
    time.sleep(0.6)
    first.send_signal(signal.SIGTERM)
    out, _ = first.communicate(timeout=10)
    assert first.returncode == 0 and "checkpoint" in out
    saved = json.loads((tmp_path / "checkpoint.json").read_text())["step"]
    assert 0 < saved < 30

    second = subprocess.run(
        [sys.executable, str(example)], cwd=tmp_path, env=env, capture_output=True, text=True
    )

    assert second.returncode == 0
    assert f"resuming at step {saved}" in second.stdout and "finished 30 steps" in second.stdout


def test_the_advertised_address_defaults_to_the_one_the_portal_is_reached_from():
    from quotaportal_agent.gang import advertise_address

    assert advertise_address("http://127.0.0.1:8000") == "127.0.0.1"
    assert advertise_address("http://localhost:8000") in ("127.0.0.1", "::1")
