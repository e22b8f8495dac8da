"""The agent's memory across restarts: a small JSON file, rewritten atomically after every change.

It holds the attempts this agent has taken and is running (with their processes), the attempts it has finished
(so a start offered again is never run twice), and the reports not yet delivered, in order. An attempt is
written here before its process is spawned: after a crash, an attempt found without a process is reported
failed, never started again.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORMAT = 1
FINISHED_REMEMBERED = 1000


def attempt_key(job_id: int, attempt: int, task: int = 0) -> str:
    """`job:attempt`, and `job:attempt:task` for a task other than 0 of a job run as tasks."""
    return f"{job_id}:{attempt}" if not task else f"{job_id}:{attempt}:{task}"


@dataclass
class RunningJob:
    """One attempt this agent has taken and not finished."""

    id: int
    attempt: int
    name: str
    instance_type: str
    instance_count: int
    slots: list[int]
    work_dir: str
    log_path: str
    exit_file: str
    stop_grace_seconds: float
    pid: int | None = None  # None until spawned: found so after a restart, the spawn never happened
    pid_started: str | None = None  # the process's start time, so a reused pid is not mistaken for it
    stopping: bool = False
    stop_reason: str = ""
    # Stopped by the agent's own shutdown (--stop-jobs-on-exit), not asked by the server: whatever its exit
    # code, the run did not finish (a job that checkpoints on SIGTERM exits 0), so it is reported FAILED.
    interrupted: bool = False
    kill_at: float | None = None  # epoch seconds: SIGKILL then
    killed: bool = False
    refused: bool = False  # the server refused a report (409): no more heartbeats, only the final report
    gone: bool = False  # the server forgot the job (404), or a newer attempt replaced it: nothing is reported
    # A task of a job run as tasks (the server handed it out with a rank): its reports name `task`.
    tasked: bool = False
    task: int = 0
    waiting: bool = False  # claimed, its slots held, nothing started: the roster has not come yet
    gpus_per_instance: int | None = None
    job_instance_count: int = 0  # the whole job's (this task holds `instance_count` of them)
    command: list[str] | None = None  # kept while waiting: the process starts when the roster comes
    payload_env: dict[str, str] | None = None

    @property
    def key(self) -> str:
        return attempt_key(self.id, self.attempt, self.task)


@dataclass
class Report:
    seq: int
    job_id: int
    body: dict[str, Any]


@dataclass
class State:
    path: Path
    jobs: dict[str, RunningJob] = field(default_factory=dict)
    finished: deque[str] = field(default_factory=lambda: deque(maxlen=FINISHED_REMEMBERED))
    outbox: list[Report] = field(default_factory=list)
    next_seq: int = 1
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    @classmethod
    def load(cls, path: Path) -> State:
        state = cls(path=path)
        if not path.exists():
            return state
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT:
            raise ValueError(f"{path}: state file format {data.get('format')!r}, expected {FORMAT}")
        jobs = [RunningJob(**job) for job in data["jobs"]]
        state.jobs = {job.key: job for job in jobs}
        state.finished.extend(data["finished"])
        state.outbox = [Report(**report) for report in data["outbox"]]
        state.next_seq = data["next_seq"]
        return state

    def save(self) -> None:
        with self.lock:
            data = {
                "format": FORMAT,
                "jobs": [asdict(job) for job in self.jobs.values()],
                "finished": list(self.finished),
                "outbox": [asdict(report) for report in self.outbox],
                "next_seq": self.next_seq,
            }
            partial = self.path.with_name(self.path.name + ".partial")
            with open(partial, "w") as out:
                json.dump(data, out, indent=1)
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, self.path)

    def has_seen(self, job_id: int, attempt: int, task: int = 0) -> bool:
        key = attempt_key(job_id, attempt, task)
        return key in self.jobs or key in self.finished

    def enqueue(self, job_id: int, body: dict[str, Any]) -> None:
        with self.lock:
            self.outbox.append(Report(self.next_seq, job_id, body))
            self.next_seq += 1
            self.save()

    def head(self) -> Report | None:
        with self.lock:
            return self.outbox[0] if self.outbox else None

    def delivered(self, report: Report) -> None:
        with self.lock:
            self.outbox = [queued for queued in self.outbox if queued.seq != report.seq]
            self.save()

    def pending_for(self, job_id: int, attempt: int, task: int = 0) -> bool:
        with self.lock:
            return any(_about(r, job_id, attempt, task) for r in self.outbox)

    def forget_reports(self, job_id: int, attempt: int, task: int = 0) -> None:
        with self.lock:
            self.outbox = [r for r in self.outbox if not _about(r, job_id, attempt, task)]
            self.save()


def _about(report: Report, job_id: int, attempt: int, task: int) -> bool:
    body = report.body
    return report.job_id == job_id and body["attempt"] == attempt and body.get("task", 0) == task


class StateFileLock:
    """One agent per state file: two agents sharing one would each run what the other took."""

    def __init__(self, path: Path):
        self.path = path.with_name(path.name + ".lock")
        self._file = None

    def acquire(self) -> bool:
        self._file = open(self.path, "a")  # held for the agent's whole life
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.close()
            self._file = None
            return False
        return True

    def release(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
