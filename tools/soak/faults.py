"""The faults a soak injects into its own services while the load runs (`--fault`): Redis stopped and started
again, PostgreSQL connections terminated, Celery pool processes killed; each notes what it did and saw, and
what must have held through it."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

from django.db import connection
from django.utils import timezone

from scheduling.models import SchedulingPass
from tools.processes import Processes, children, port_open
from tools.soak.report import Stats

FAULT_GRACE_SECONDS = 5  # after a postgres fault, in-flight requests may fail for this long


class Faults:
    """The faults `names` of one run, injected one after the other `at` seconds into the load (default: a third
    of it), each for `fault_seconds`. The load lasts `load_seconds` up to `load_deadline` (a `time.monotonic()`
    instant); `processes` are the run's own, `app_name` the one its processes connect to PostgreSQL with, and
    `redis_argv` and `redis_port` say how to start again the Redis server the run started itself."""

    def __init__(
        self,
        names: list[str],
        *,
        at: float | None,
        fault_seconds: int,
        load_seconds: int,
        load_deadline: float,
        processes: Processes,
        stats: Stats,
        app_name: str,
        redis_argv: list[str] | None = None,
        redis_port: int | None = None,
    ):
        self.names, self.at, self.fault_seconds = names, at, fault_seconds
        self.load_seconds, self.load_deadline = load_seconds, load_deadline
        self.processes, self.stats, self.app_name = processes, stats, app_name
        self.redis_argv, self.redis_port = redis_argv, redis_port

    def run(self, load_over: threading.Event) -> None:
        """Wait until the faults are due (unless the load is over first), then inject each in turn."""
        if not self.names:
            return
        at = self.load_seconds / 3 if self.at is None else self.at
        try:
            if load_over.wait(max(0.0, self.load_deadline - self.load_seconds + at - time.monotonic())):
                return
            for fault in self.names:
                getattr(self, f"_fault_{fault}")()
        finally:
            connection.close()

    def _fault_redis(self) -> None:
        began = time.monotonic()
        before = self._submissions_ok()
        self.processes.stop("redis", timeout=5)
        load_started = self.load_deadline - self.load_seconds
        self.stats.fault_notes.append(f"redis: stopped {began - load_started:.0f} s into the load")
        outage_passes_before = SchedulingPass.objects.count()
        time.sleep(self.fault_seconds)
        during = self._submissions_ok() - before
        passes_during = SchedulingPass.objects.count() - outage_passes_before
        self.processes.start("redis", self.redis_argv, os.environ.copy())
        self.processes.wait(lambda: port_open(self.redis_port), 10, "Redis again")
        back = timezone.now()
        back_clock = time.monotonic()
        resumed = None
        while time.monotonic() - back_clock < 60:
            if SchedulingPass.objects.filter(started_at__gt=back).exists():
                resumed = time.monotonic() - back_clock
                break
            time.sleep(0.2)
        note = (
            f"redis down {self.fault_seconds} s: {during} submissions accepted (201) meanwhile, "
            f"{passes_during} passes meanwhile; "
        )
        if resumed is None:
            self.stats.violation("redis: no scheduling pass within 60 s of Redis coming back")
            note += "passes did NOT resume within 60 s"
        else:
            note += f"first pass {resumed:.1f} s after Redis came back"
        if during == 0:
            self.stats.violation("redis: no submission succeeded while Redis was down")
        self.stats.fault_notes.append(note)

    def _fault_postgres(self) -> None:
        began = time.monotonic()
        self.stats.fault_windows.append((began - 1, began + FAULT_GRACE_SECONDS))
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s AND pid <> pg_backend_pid()",
                [self.app_name],
            )
            killed = cursor.fetchone()[0]
        after = timezone.now()
        resumed = None
        while time.monotonic() - began < 60:
            if SchedulingPass.objects.filter(started_at__gt=after).exists():
                resumed = time.monotonic() - began
                break
            time.sleep(0.2)
        submitted_after = self._wait_for_submission_after(began)
        note = f"postgres: terminated {killed} connections of the soak's processes; "
        note += f"first pass {resumed:.1f} s later" if resumed is not None else "no pass within 60 s"
        note += (
            f", first submission accepted {submitted_after:.1f} s later"
            if submitted_after is not None
            else ", no submission accepted within 30 s"
        )
        if resumed is None:
            self.stats.violation(
                "postgres: no scheduling pass within 60 s of the connections being terminated"
            )
        self.stats.fault_notes.append(note)
        time.sleep(max(0.0, began + self.fault_seconds - time.monotonic()))

    def _fault_worker(self) -> None:
        began = time.monotonic()
        killed = 0
        workers = [name for name in self.processes.started if name.startswith("worker")]
        while time.monotonic() - began < self.fault_seconds and time.monotonic() < self.load_deadline:
            process = self.processes.started[random.choice(workers)]
            for child in children(process.pid):
                os.kill(child, signal.SIGKILL)  # the pool process of a worker this soak started
                killed += 1
            time.sleep(3)
        self.stats.fault_notes.append(
            f"worker: SIGKILLed {killed} Celery pool processes over {time.monotonic() - began:.0f} s"
        )

    def _submissions_ok(self) -> int:
        with self.stats.lock:
            return self.stats.requests[("submit", 201)]

    def _wait_for_submission_after(self, began: float) -> float | None:
        before = self._submissions_ok()
        while time.monotonic() - began < 30:
            if self._submissions_ok() > before:
                return time.monotonic() - began
            time.sleep(0.1)
        return None
