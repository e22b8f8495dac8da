"""Job processes: checking a payload, spawning the command in its own process group, watching it, signalling it.

Each job runs as `python -I supervise.py EXIT_FILE -- COMMAND...`, the leader of a new session (so its process
group id is its pid and a signal to the group reaches everything the command started). Output (stdout and
stderr together) goes to a log file in the job's work dir; reports carry its tail.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from quotaportal_agent.gang import gpus_of
from quotaportal_agent.state import RunningJob
from quotaportal_agent.supervise import exit_code_of

__all__ = ["BadPayload", "command_of", "exit_code_of", "spawn", "is_alive", "signal_group", "output_tail"]

SUPERVISE = Path(__file__).with_name("supervise.py")
TAIL_BYTES = 4096
TAIL_LINES = 50


class BadPayload(ValueError):
    """The job's payload cannot be run; the message says which field and why."""


def command_of(payload: Any) -> tuple[list[str], dict[str, str]]:
    """The argv and the extra environment of a payload, or BadPayload naming what is wrong."""
    if not isinstance(payload, dict):
        raise BadPayload("bad payload: it must be an object with a `command`")
    command = payload.get("command")
    if command is None:
        raise BadPayload("bad payload: no `command` (an argv list of strings)")
    if not isinstance(command, list) or not command or not all(isinstance(arg, str) for arg in command):
        raise BadPayload("bad payload: `command` must be a non-empty list of strings (an argv)")
    env = payload.get("env") or {}
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise BadPayload("bad payload: `env` must be an object of strings to strings")
    if any("\0" in arg for arg in [*command, *env, *env.values()]):
        raise BadPayload("bad payload: a NUL character in `command` or `env`")
    return command, env


def spawn(
    job: RunningJob, command: list[str], extra_env: dict[str, str], task_env: dict[str, str] | None = None
) -> subprocess.Popen:
    """Start the job's process group; raises OSError if even the supervisor cannot start. `task_env`: the
    variables of a task of a job run as tasks (`quotaportal_agent.gang`), instead of a whole job's."""
    Path(job.work_dir).mkdir(parents=True, exist_ok=True)
    gpus = job.slots if job.gpus_per_instance is None else gpus_of(job.slots, job.gpus_per_instance)
    env = {
        **os.environ,
        **extra_env,
        **(
            task_env
            if task_env is not None
            else {
                "QUOTAPORTAL_JOB_ID": str(job.id),
                "QUOTAPORTAL_ATTEMPT": str(job.attempt),
                "QUOTAPORTAL_INSTANCE_TYPE": job.instance_type,
                "QUOTAPORTAL_INSTANCE_COUNT": str(job.instance_count),
                "CUDA_VISIBLE_DEVICES": ",".join(str(gpu) for gpu in gpus),
            }
        ),
    }
    with open(job.log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-I", str(SUPERVISE), job.exit_file, "--", *command],
            cwd=job.work_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


def start_time(pid: int) -> str | None:
    """When the process started (clock ticks since boot, from /proc), to tell it from a later one with its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def is_alive(pid: int, started: str | None) -> bool:
    """Whether the process we started as `pid` still runs (not exited, not a zombie, not a newer namesake)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process now holds the pid; the start time below tells
    stat_path = Path(f"/proc/{pid}/stat")
    if not stat_path.parent.exists():
        return not Path("/proc/self").exists()  # no /proc at all: the signal check is all there is
    try:
        stat = stat_path.read_text()
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return False
    return started is None or fields[19] == started


def signal_group(pid: int, number: int) -> None:
    try:
        os.killpg(pid, number)
    except (ProcessLookupError, PermissionError):
        pass  # already gone; PermissionError: the group id now belongs to someone else


def recorded_exit(exit_file: str) -> int | None:
    """The command's exit code as the supervisor wrote it, or None if it never did (killed with it)."""
    try:
        return int(json.loads(Path(exit_file).read_text())["exit_code"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def output_tail(log_path: str) -> str:
    """The last lines of the job's output: at most TAIL_LINES lines and about TAIL_BYTES bytes."""
    try:
        with open(log_path, "rb") as log:
            log.seek(0, os.SEEK_END)
            size = log.tell()
            log.seek(max(0, size - TAIL_BYTES))
            data = log.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    if size > TAIL_BYTES and "\n" in text:
        text = text.split("\n", 1)[1]  # the first line read is cut short
    return "\n".join(text.splitlines()[-TAIL_LINES:])


def describe_exit(exit_code: int) -> str:
    if exit_code > 128 and exit_code - 128 in signal.valid_signals():
        try:
            return f"killed by {signal.Signals(exit_code - 128).name} (exit code {exit_code})"
        except ValueError:
            pass
    return f"exited with code {exit_code}"
