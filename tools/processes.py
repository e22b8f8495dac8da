"""The product's processes, started for a tool: gunicorn, Celery workers and the beat as real processes.

Each runs in its own session (so it is stopped with its own children and nothing else), logs to a file of the
tool's log folder, and is stopped when the tool ends: `with Processes(log_dir) as processes:` stops them all on
leaving the block, also on Ctrl-C and on SIGTERM (turned into SystemExit while the block runs).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests
from celery import Celery
from django.conf import settings
from django.core.management.base import CommandError
from django.utils import timezone

from scheduling.models import SchedulingPass


class Processes:
    """The processes a tool started, by name."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.started: dict[str, subprocess.Popen] = {}
        self._previous_sigterm = None

    def __enter__(self) -> Processes:
        self._previous_sigterm = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        return self

    def __exit__(self, *exc_info) -> None:
        try:
            self.stop_all()
        finally:
            signal.signal(signal.SIGTERM, self._previous_sigterm)

    def start(self, name: str, argv: list[str], env: dict) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 (closed when the process is reaped)
        process = subprocess.Popen(
            argv,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=settings.BASE_DIR,
        )
        process.log = log
        self.started[name] = process
        return process

    def stop(self, name: str, timeout: float = 15) -> None:
        process = self.started.pop(name, None)
        if process is None:
            return
        if process.poll() is None:
            signal_group(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                signal_group(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        signal_group(process.pid, signal.SIGKILL)  # a pool child left behind by its parent
        process.log.close()

    def stop_all(self) -> None:
        # Agents first: they would only log the web server's absence.
        for name in sorted(self.started, key=lambda name: not name.startswith("agent")):
            self.stop(name)

    def wait(self, ready, seconds: float, what: str) -> None:
        """Until `ready()` is true; a CommandError naming the log when a started process exits meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if ready():
                return
            for name, process in self.started.items():
                if process.poll() is not None:
                    raise CommandError(
                        f"{name} exited with {process.returncode} while waiting for {what}; "
                        f"see {self.log_dir / (name + '.log')}"
                    )
            time.sleep(0.25)
        raise CommandError(f"{what} not ready within {seconds} s; logs in {self.log_dir}")

    def start_web(self, env: dict, *, port: int, workers: int, threads: int = 0) -> None:
        """gunicorn on 127.0.0.1:port: `workers` processes, each with `threads` threads (gthread) if any."""
        argv = [sys.executable, "-m", "gunicorn", "quotaportal.wsgi:application"]
        argv += ["--bind", f"127.0.0.1:{port}", "--workers", str(workers)]
        if threads:
            argv += ["--worker-class", "gthread", "--threads", str(threads)]
        argv += ["--timeout", "60", "--graceful-timeout", "5", "--log-level", "warning"]
        self.start("web", argv, env)

    def start_workers(self, env: dict, *, count: int, prefix: str, options: tuple[str, ...] = ()) -> None:
        """`count` Celery workers, one process each (`--concurrency 1`), named `<prefix><i>@host`, with any
        further worker `options` (a pool, say)."""
        for i in range(count):
            argv = [sys.executable, "-m", "celery", "-A", "quotaportal", "worker", "--concurrency", "1"]
            argv += ["-n", f"{prefix}{i}@%h", "--loglevel", "WARNING", "--without-gossip", "--without-mingle"]
            self.start(f"worker{i}", argv + list(options), env)

    def pids(self, prefix: str) -> list[int]:
        """The process ids of the started processes whose names begin with `prefix` ("worker", say)."""
        return [process.pid for name, process in self.started.items() if name.startswith(prefix)]

    def start_beat(self, env: dict) -> None:
        argv = [sys.executable, "-m", "celery", "-A", "quotaportal", "beat", "--loglevel", "WARNING"]
        argv += ["--schedule", str(self.log_dir / "beat-schedule")]
        self.start("beat", argv, env)

    def wait_web(self, base: str) -> None:
        """Until gunicorn at `base` answers /healthz."""

        def web_ready():
            try:
                return requests.get(f"{base}/healthz", timeout=2).status_code == 200
            except requests.RequestException:
                return False

        self.wait(web_ready, 60, "gunicorn")

    def wait_ready(self, base: str, *, broker: str, queue_ids: list[int], trigger: str) -> None:
        """gunicorn answers /healthz, and a worker has run a pass asked for through the broker."""
        self.wait_web(base)
        since = timezone.now()
        # The beat passes only queues that changed or have something due, and the set-up's own passes may
        # have settled them: ask the workers for one pass per queue through the broker, as a change would.
        with Celery(broker=broker) as app:
            for queue_id in queue_ids:
                app.send_task(
                    "scheduling.tasks.run_queue_pass",
                    args=[queue_id, trigger],
                    queue=settings.CELERY_TASK_DEFAULT_QUEUE,
                )
        self.wait(
            lambda: SchedulingPass.objects.filter(started_at__gte=since).exists(),
            60,
            "the first scheduling pass (beat and workers)",
        )


def service_env(*, broker: str, log_dir: Path, app_name: str) -> dict:
    """The environment of the processes a tool starts: its database and broker, passes every 2 s."""
    env = os.environ.copy()
    env.update(
        {
            "DATABASE_URL": settings.DATABASE_URL,
            "CELERY_BROKER_URL": broker,
            "CACHE_URL": broker,
            "SECRET_KEY": settings.SECRET_KEY,
            "DEBUG": "0",
            "HTTPS": "0",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "QUOTAPORTAL_AUTOPASS": "1",
            "PASS_INTERVAL_SECONDS": "2",
            "SIMULATED_STARTUP_SECONDS": "1",
            # The throttle stays on (its cache is on the path), far above the load.
            "API_SUBMIT_RATE": "1000000/min",
            "LOG_LEVEL": "WARNING",
            "QUOTAPORTAL_VAR_DIR": str(log_dir),
            "PGAPPNAME": app_name,  # libpq: pg_stat_activity finds exactly the tool's connections
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def cpu_seconds(pids) -> float:
    """utime + stime of these processes and of their living children (Linux /proc), in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in {pid for parent in pids for pid in (parent, *children(parent))}:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        total += int(fields[11]) + int(fields[12])
    return total / tick


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # the group of a process a tool started (start_new_session: pgid == pid)
    except (ProcessLookupError, PermissionError):
        pass


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0
