"""The agent: one loop that owns the jobs, a thread that long-polls for work, a thread that delivers reports.

The main loop (`Agent.run`) is the only place that changes jobs and processes. It takes events from a queue
(work the poller fetched, reports the server refused) and, every tick, reaps exited processes, SIGKILLs those
past their stop deadline and queues heartbeats. Reports go into the state file's outbox, which the reporter
thread delivers in order, retrying with backoff while the server is down; so nothing the loop does waits on
the network.
"""

from __future__ import annotations

import logging
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from quotaportal_agent import gang, runner
from quotaportal_agent.client import Backoff, Client, Delivery, ReportOutcome
from quotaportal_agent.state import Report, RunningJob, State, attempt_key

log = logging.getLogger(__name__)

FINAL = ("SUCCEEDED", "FAILED", "STOPPED")
# What the server stores: a report with a longer reason, a NUL or an exit code outside these is refused (400),
# and a refused final report would leave the job to be found lost when its lease runs out.
REASON_CHARS = 2000
OUTPUT_TAIL_CHARS = 65536
EXIT_CODES = range(-(2**31), 2**31)
REFUSED_PREFIX = "the server refused this attempt's report"
GO_PAUSE_SECONDS = 0.1


@dataclass(frozen=True)
class Config:
    url: str
    token: str
    environment_id: int
    instance_type: str
    slots: int
    work_dir: Path
    state_file: Path
    heartbeat_seconds: float = 30.0
    wait_seconds: int = 20  # the long-poll; the server holds it at most 30 s
    min_poll_seconds: float = 1.0  # between polls that brought nothing to start (stops repeat until done)
    max_backoff_seconds: float = 30.0
    default_stop_grace_seconds: float = 30.0
    hold_seconds: float = 10.0  # how long a start waits for the slots of jobs still stopping
    shutdown_flush_seconds: float = 5.0
    tick_seconds: float = 0.1
    # On shutdown, stop the jobs' processes too (SIGTERM, SIGKILL after exit_grace_seconds) instead of leaving
    # them for the next agent to adopt: for a demo whose processes should end with it. The next agent reports
    # them as ended while it was away.
    stop_jobs_on_exit: bool = False
    exit_grace_seconds: float = 3.0
    # Ask for tasks (jobs on several hosts, multi-host.md): claim part of a job, start it once the roster comes.
    tasks: bool = True
    advertise_address: str = ""  # where peers reach this host ("" the address it reaches the server from)
    ports: str = "29400-29499"  # a job's main port, when its rank 0 runs here, is one of these
    gpus_per_instance: int | None = None  # None: the instance type's gpu_count, as the server says
    network_interface: str = ""  # the interface tasks reach each other on (NCCL/GLOO_SOCKET_IFNAME)


@dataclass
class HeldStart:
    entry: dict[str, Any]
    until: float  # monotonic


class Agent:
    def __init__(self, config: Config, client: Client | None = None):
        self.config = config
        self.client = client or Client(config.url, config.token)
        self.state = State.load(config.state_file)
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.shutdown = threading.Event()  # stop taking work
        self.halt = threading.Event()  # stop delivering reports (after the shutdown flush)
        # Set while the report at the head of the outbox waits for the server (down, or answering 5xx): a
        # shutdown then keeps the outbox for the next start instead of waiting for a server that may be going
        # down with the agent (`make run` stops both at once, and kills what still runs 5 s later).
        self.reports_wait = threading.Event()
        self.outbox_changed = threading.Event()
        self.processes: dict[str, subprocess.Popen] = {}  # our own children; adopted jobs are watched by pid
        self.last_report: dict[str, float] = {}
        self.held: list[HeldStart] = []
        # The slots a poll offers the server (kept by the main thread), and a signal that the starts the last
        # poll brought have been placed, so the next poll offers only what they left.
        self.offered = config.slots
        self.work_handled = threading.Event()
        # Slots freed while a poll waits are offered at once (POST .../offer/), not when the poll returns.
        self.poll_offered: int | None = None  # what the poll in flight offered (None: none in flight)
        self.offer_wanted = threading.Event()
        self.offer_value = 0

    # -- the loop ---------------------------------------------------------------------------------------

    def run(self) -> None:
        self.reconcile()
        self.offered = self.free_count()
        poller = threading.Thread(target=self.poll_loop, name="poller", daemon=True)
        reporter = threading.Thread(target=self.report_loop, name="reporter", daemon=True)
        poller.start()
        reporter.start()
        if self.config.tasks:
            threading.Thread(target=self.offer_loop, name="offerer", daemon=True).start()
        log.info(
            "agent up: environment %s, %s x %d slots, state %s",
            self.config.environment_id,
            self.config.instance_type,
            self.config.slots,
            self.config.state_file,
        )
        while not self.shutdown.is_set():
            self.tick(self.config.tick_seconds)
        if self.config.stop_jobs_on_exit:
            # At once, not after the long-poll in flight returns: whoever stops the agent may not wait that long
            # (honcho kills it 5 s after Ctrl-C); the state is saved now for the same reason.
            self.stop_every_job()
            self.state.save()
        # A poll already in flight may bring claimed work: take it, as if it had come before the signal.
        while poller.is_alive():
            self.tick(self.config.tick_seconds)
        self.tick(0)
        for held in self.held:
            self.fail_untaken(held.entry, "the agent shut down before slots were free")
        self.held.clear()
        flush_until = time.monotonic() + self.config.shutdown_flush_seconds
        while (
            self.state.head() is not None
            and time.monotonic() < flush_until
            and not self.reports_wait.is_set()
        ):
            time.sleep(0.05)
        self.halt.set()
        reporter.join(timeout=self.config.max_backoff_seconds + 15)
        if self.config.stop_jobs_on_exit:
            self.stop_every_job()
        self.state.save()
        log.info(
            "agent down: %d job(s) %s, %d report(s) kept for later",
            len(self.state.jobs),
            "stopped (reported on restart)"
            if self.config.stop_jobs_on_exit
            else "left running (adopted on restart)",
            len(self.state.outbox),
        )

    def stop_every_job(self) -> None:
        """SIGTERM every job's process group, and SIGKILL the groups still there after exit_grace_seconds."""
        running = [job for job in self.state.jobs.values() if job.pid is not None]
        for job in running:
            job.interrupted = job.interrupted or not job.stopping
        self.state.save()  # before the signal: a process that ends after the agent is reported so on restart
        for job in running:
            runner.signal_group(job.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.config.exit_grace_seconds
        while time.monotonic() < deadline and any(runner.is_alive(j.pid, j.pid_started) for j in running):
            time.sleep(0.05)
        for job in running:
            if runner.is_alive(job.pid, job.pid_started):
                runner.signal_group(job.pid, signal.SIGKILL)
        for process in self.processes.values():  # reap our own children: no zombie outlives the agent's wait
            try:
                process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass

    def request_shutdown(self) -> None:
        self.shutdown.set()

    def tick(self, timeout: float) -> None:
        try:
            self.handle(*self.events.get(timeout=timeout))
            while True:
                self.handle(*self.events.get_nowait())
        except queue.Empty:
            pass
        self.watch_processes()
        self.retry_held()
        self.heartbeat()
        self.offered = self.free_count()
        in_flight = self.poll_offered
        if self.config.tasks and in_flight is not None and self.offered > max(in_flight, self.offer_value):
            self.offer_value = self.offered
            self.offer_wanted.set()

    def handle(self, kind: str, payload: Any) -> None:
        if kind == "work":
            for entry in payload["stop"]:
                self.handle_stop(entry)
            self.watch_processes()  # a victim killed just now frees its slots before the starts are placed
            for entry in payload["start"]:
                self.handle_start(entry)
            for entry in payload.get("go", []):
                self.handle_go(entry)
            self.offered = self.free_count()
            self.offer_value = 0
            self.work_handled.set()
        elif kind == "refused":
            self.handle_refused(*payload)

    # -- threads ------------------------------------------------------------------------------------

    def poll_loop(self) -> None:
        """Long-poll for work until shutdown; always, even with every slot busy, since stops come this way."""
        backoff = Backoff(maximum=self.config.max_backoff_seconds)
        while not self.shutdown.is_set():
            began = time.monotonic()
            offered = self.offered
            self.poll_offered = offered
            try:
                work = self.client.work(
                    self.config.environment_id,
                    self.config.instance_type,
                    self.config.wait_seconds,
                    free_slots=offered,
                    tasks=self.tasks_query(),
                )
            except Exception:  # a bug or an answer nobody foresaw must not end the polling, and with it stops
                log.exception("work poll")
                work = None
            finally:
                self.poll_offered = None
            if work is None:
                backoff.wait(self.shutdown)
                continue
            backoff.reset()
            if work["start"] or work["stop"] or work.get("go"):
                self.work_handled.clear()
                self.events.put(("work", work))
                if work["start"] or work.get("go"):
                    # The next poll offers the slots these starts leave: wait until they are placed.
                    self.work_handled.wait(timeout=5.0)
            if not work["start"]:
                # A stop is repeated on every poll until it is reported, a go until the task's RUNNING is: do
                # not spin on them. A go is answered within moments (the process is started at once), so the
                # pause after one is short: a stop arriving meanwhile must not wait a whole poll interval.
                pause = (
                    GO_PAUSE_SECONDS if work.get("go") and not work["stop"] else self.config.min_poll_seconds
                )
                self.shutdown.wait(max(0.0, pause - (time.monotonic() - began)))

    def tasks_query(self) -> dict[str, Any] | None:
        """What a poll that asks for tasks says of this host (None: the agent takes only whole jobs)."""
        if not self.config.tasks:
            return None
        return {
            "slots": self.config.slots,
            "address": self.config.advertise_address,
            "ports": self.config.ports,
        }

    def offer_loop(self) -> None:
        """Tell the server at once when slots free while a poll waits, so its poll claims with them."""
        while not self.shutdown.is_set():
            if not self.offer_wanted.wait(0.5):
                continue
            self.offer_wanted.clear()
            try:
                self.client.offer(self.config.environment_id, self.offer_value)
            except Exception:
                log.exception("offering free slots")

    def report_loop(self) -> None:
        """Deliver the outbox in order; a report the server cannot take now blocks those after it."""
        backoff = Backoff(maximum=self.config.max_backoff_seconds)
        while not self.halt.is_set():
            report = self.state.head()
            if report is None:
                self.outbox_changed.wait(0.2)
                self.outbox_changed.clear()
                continue
            try:
                outcome = self.client.report(report.job_id, report.body)
            except Exception as error:  # a bug or a full disk must not silence every later report
                log.exception("delivering report %s", report.seq)
                outcome = ReportOutcome(Delivery.RETRY, repr(error))
            if outcome.delivery is Delivery.RETRY:
                log.warning("report on job %s waits for the server: %s", report.job_id, outcome.detail)
                self.reports_wait.set()
                backoff.wait(self.halt)
                continue
            self.reports_wait.clear()
            backoff.reset()
            self.state.delivered(report)
            if outcome.delivery is not Delivery.DELIVERED:
                self.events.put(("refused", (report, outcome)))

    # -- work ---------------------------------------------------------------------------------------

    def handle_start(self, entry: dict[str, Any]) -> None:
        try:
            job_id, attempt = int(entry["id"]), int(entry["attempt"])
        except (KeyError, TypeError, ValueError):
            log.error("ignoring a start entry without a job id and attempt: %.300r", entry)
            return
        task = entry.get("task", 0)
        if not isinstance(task, int) or isinstance(task, bool) or task < 0:
            log.error("ignoring a start entry with a bad task: %.300r", entry)
            return
        if self.state.has_seen(job_id, attempt, task) or any(
            _key(h.entry) == attempt_key(job_id, attempt, task) for h in self.held
        ):
            return  # offered again (a repeat, or our STARTING not yet delivered): never run twice
        for older in [j for j in self.state.jobs.values() if j.id == job_id and j.attempt < attempt]:
            self.drop_stale(older)
        entry = {**entry, "id": job_id, "attempt": attempt}
        try:
            self.try_start(entry, hold_until=time.monotonic() + self.config.hold_seconds)
        except Exception as error:  # one odd entry must not take the agent, and every job, down
            log.exception("job %s attempt %s: cannot take %.300r", job_id, attempt, entry)
            if not self.state.has_seen(job_id, attempt, task):
                self.fail_untaken(entry, f"bad start entry: {error}")

    def try_start(self, entry: dict[str, Any], *, hold_until: float | None) -> None:
        """Start the entry's process, fail it, or (until `hold_until`) hold it for slots still being freed."""
        count, total = _count(entry), self.config.slots
        instance_type = entry.get("instance_type", self.config.instance_type)
        try:
            command, extra_env = runner.command_of(entry.get("payload"))
        except runner.BadPayload as error:
            return self.fail_untaken(entry, str(error))
        if instance_type != self.config.instance_type:
            return self.fail_untaken(
                entry, f"this agent runs {self.config.instance_type}, not {instance_type}"
            )
        if not isinstance(count, int) or count < 1:
            return self.fail_untaken(entry, f"bad instance_count {count!r}: a whole number of at least 1")
        if count > total:
            return self.fail_untaken(entry, f"needs {count} slots but this agent has {total} in all")
        free = self.free_slots()
        if count > len(free):
            # The server frees a victim's capacity at its deadline, when we SIGKILL it: a start may come a moment
            # before the process is gone. Wait for slots that are being freed; fail what could only wait on luck.
            stopping = sum(len(j.slots) for j in self.state.jobs.values() if j.stopping)
            if hold_until is not None and count <= len(free) + stopping:
                self.held.append(HeldStart(entry, hold_until))
                return None
            return self.fail_untaken(
                entry, f"needs {count} slots but only {len(free)} of this agent's {total} are free"
            )
        self.start(entry, command, extra_env, free[:count])
        return None

    def retry_held(self) -> None:
        held, self.held = self.held, []
        for item in held:
            self.try_start(item.entry, hold_until=item.until if time.monotonic() < item.until else None)

    def start(self, entry: dict[str, Any], command: list[str], extra_env: dict[str, str], slots: list[int]):
        job_dir = self.config.work_dir / "jobs" / str(entry["id"])
        tasked = "task" in entry
        task = entry.get("task", 0)
        stem = f"attempt-{entry['attempt']}" + (f"-task-{task}" if task else "")
        gpus_per_instance = self.config.gpus_per_instance
        if gpus_per_instance is None and isinstance(entry.get("gpus_per_instance"), int):
            gpus_per_instance = entry["gpus_per_instance"]
        job = RunningJob(
            id=entry["id"],
            attempt=entry["attempt"],
            name=str(entry.get("name", "")),
            instance_type=self.config.instance_type,
            instance_count=len(slots),
            slots=slots,
            work_dir=str(job_dir),
            log_path=str(job_dir / f"{stem}.log"),
            exit_file=str(job_dir / f"{stem}.exit"),
            stop_grace_seconds=float(
                entry.get("stop_grace_seconds") or self.config.default_stop_grace_seconds
            ),
            tasked=tasked,
            task=task,
            waiting=tasked,
            gpus_per_instance=gpus_per_instance,
            job_instance_count=int(entry.get("instance_count") or len(slots)),
            command=command,
            payload_env=extra_env,
        )
        with self.state.lock:  # the reporter thread saves the state too
            self.state.jobs[job.key] = job
        if tasked and entry.get("roster") is None:
            log.info(
                "job %s attempt %s: rank %s claimed on slots %s; waiting for the roster",
                job.id,
                job.attempt,
                task,
                slots,
            )
            self.report(
                job, "STARTING", f"rank {task} holds slots {_slots(slots)}; waiting for the other instances"
            )
            return
        self.report(job, "STARTING", f"starting on slots {_slots(slots)}")  # also saves the state
        self.spawn(job, entry.get("roster"))

    def spawn(self, job: RunningJob, roster: dict[str, Any] | None) -> None:
        """Start the process of a whole job, or of a task whose roster came."""
        task_env = None
        if job.tasked:
            try:
                roster = gang.check_roster(roster, job.task)
                task_env = gang.task_environment(
                    job_id=job.id,
                    attempt=job.attempt,
                    rank=job.task,
                    roster=roster,
                    instance_type=job.instance_type,
                    instance_count=job.job_instance_count,
                    gpus=gang.gpus_of(job.slots, job.gpus_per_instance or 0),
                    task_dir=Path(job.work_dir) / f"attempt-{job.attempt}-task-{job.task}",
                    payload_env=job.payload_env or {},
                    interface=self.config.network_interface,
                )
            except (ValueError, OSError) as error:
                job.waiting = False
                self.finish(job, None, f"could not start the task: {error}")
                return
        job.waiting = False
        try:
            process = runner.spawn(job, job.command or [], job.payload_env or {}, task_env)
        except OSError as error:
            self.finish(job, None, f"could not start the process: {error}")
            return
        job.pid, job.pid_started = process.pid, runner.start_time(process.pid)
        job.command = job.payload_env = None
        self.processes[job.key] = process
        log.info(
            "job %s attempt %s task %s started: pid %s, slots %s",
            job.id,
            job.attempt,
            job.task,
            job.pid,
            job.slots,
        )
        self.report(job, "RUNNING", f"running as pid {job.pid}")

    def handle_go(self, entry: dict[str, Any]) -> None:
        """The roster of a task claimed here came: start it (a repeat for a started task changes nothing)."""
        try:
            job_id, attempt, task = int(entry["id"]), int(entry["attempt"]), int(entry["task"])
        except (KeyError, TypeError, ValueError):
            log.error("ignoring a go entry without a job id, attempt and task: %.300r", entry)
            return
        key = attempt_key(job_id, attempt, task)
        job = self.state.jobs.get(key)
        if job is None:
            if key not in self.state.finished:
                # Claimed for us as far as the server knows (an answer we never saw): say nothing runs here.
                with self.state.lock:
                    self.state.finished.append(key)
                    self.enqueue(job_id, attempt, "STOPPED", "not running on this agent", task=task)
            return
        if job.waiting and not job.stopping:
            self.spawn(job, entry.get("roster"))

    def fail_untaken(self, entry: dict[str, Any], reason: str) -> None:
        """Fail an attempt that never got a process (exit code null), so its job does not wait for a lease. A
        task claimed here but not startable is given back instead (STOPPED): another host may take it."""
        log.warning("job %s attempt %s failed without running: %.500s", entry["id"], entry["attempt"], reason)
        task = entry.get("task") if isinstance(entry.get("task"), int) else None
        with self.state.lock:
            self.state.finished.append(attempt_key(entry["id"], entry["attempt"], task or 0))
            self.enqueue(
                entry["id"], entry["attempt"], "STOPPED" if task is not None else "FAILED", reason, task=task
            )

    def handle_stop(self, entry: dict[str, Any]) -> None:
        try:
            job_id, attempt = int(entry["id"]), int(entry["attempt"])
        except (KeyError, TypeError, ValueError):
            log.error("ignoring a stop entry without a job id and attempt: %.300r", entry)
            return
        task = entry.get("task", 0) if isinstance(entry.get("task", 0), int) else 0
        key = attempt_key(job_id, attempt, task)
        job = self.state.jobs.get(key)
        self.held = [h for h in self.held if _key(h.entry) != key]
        if job is not None and job.waiting:
            self.release(job, "released before it started: the server gave the claim up")
        elif job is not None:
            grace = job.stop_grace_seconds
            self.stop(job, deadline_of(entry.get("deadline"), grace), "stopped by the server")
        elif key not in self.state.finished:
            # Taken by us as far as the server knows (a claim whose answer we never saw, or one still held):
            # say at once that nothing runs, so its capacity need not wait for the deadline.
            with self.state.lock:
                self.state.finished.append(key)
                self.enqueue(
                    job_id,
                    attempt,
                    "STOPPED",
                    "not running on this agent",
                    task=task if "task" in entry else None,
                )

    def release(self, job: RunningJob, reason: str, *, report: bool = True) -> None:
        """A task that never started gives its slots back (reported STOPPED unless the server knows)."""
        log.info("job %s attempt %s rank %s: %s", job.id, job.attempt, job.task, reason)
        with self.state.lock:
            del self.state.jobs[job.key]
            self.state.finished.append(job.key)
            self.last_report.pop(job.key, None)
            if report:
                self.enqueue(job.id, job.attempt, "STOPPED", reason, task=job.task)
            else:
                self.state.forget_reports(job.id, job.attempt, job.task)
                self.state.save()

    def stop(self, job: RunningJob, kill_at: float, reason: str) -> None:
        """SIGTERM the job's process group now and SIGKILL it at `kill_at` (epoch seconds) if still there."""
        if job.stopping:
            job.kill_at = min(job.kill_at or kill_at, kill_at)
        else:
            log.info(
                "job %s attempt %s: %s; SIGTERM, SIGKILL in %.1fs",
                job.id,
                job.attempt,
                reason,
                kill_at - time.time(),
            )
            job.stopping, job.stop_reason, job.kill_at = True, reason, kill_at
            if job.pid is not None:
                runner.signal_group(job.pid, signal.SIGTERM)
        self.state.save()

    def drop_stale(self, job: RunningJob) -> None:
        """A newer attempt of the job came to us, so the server has given this one up: kill it at once."""
        log.warning("job %s attempt %s replaced by a newer attempt: killing it", job.id, job.attempt)
        job.gone = True
        self.state.forget_reports(job.id, job.attempt, job.task)
        if job.pid is None:
            self.release(job, "replaced by a newer attempt", report=False)
            return
        if job.pid is not None:
            runner.signal_group(job.pid, signal.SIGKILL)
        until = time.monotonic() + 5
        while self.state.jobs.get(job.key) is job and time.monotonic() < until:
            self.watch_processes()
            time.sleep(0.02)

    def handle_refused(self, report: Report, outcome: ReportOutcome) -> None:
        attempt, status, task = report.body["attempt"], report.body["status"], report.body.get("task", 0)
        job = self.state.jobs.get(attempt_key(report.job_id, attempt, task))
        if outcome.delivery is Delivery.REFUSED:
            log.error("job %s: the server refused report %s: %s", report.job_id, status, outcome.detail)
            if status in FINAL and not str(report.body.get("reason", "")).startswith(REFUSED_PREFIX):
                # The attempt still ended: say so with nothing in the report the server could refuse.
                with self.state.lock:
                    self.enqueue(
                        report.job_id,
                        attempt,
                        status,
                        f"{REFUSED_PREFIX} ({outcome.detail})",
                        task=report.body.get("task"),
                    )
            return
        log.warning(
            "job %s attempt %s: report %s answered %s: %s",
            report.job_id,
            attempt,
            status,
            outcome.delivery.value,
            outcome.detail,
        )
        self.state.forget_reports(report.job_id, attempt, task)
        if job is None or status in FINAL:
            return
        if job.waiting:  # the server ended a claim that never started: give its slots back
            self.release(job, f"the server refused the claim ({outcome.detail})", report=False)
            return
        if outcome.delivery is Delivery.GONE:
            job.gone = True
        job.refused = True
        why = "the job is gone" if job.gone else f"the server refused attempt {attempt} ({outcome.detail})"
        self.stop(job, time.time() + job.stop_grace_seconds, why)

    # -- processes ----------------------------------------------------------------------------------

    def reconcile(self) -> None:
        """After a restart: adopt the processes still running, report those that ended while we were away."""
        for job in list(self.state.jobs.values()):
            if job.pid is None and job.waiting:
                self.release(job, "released: the agent restarted before the roster came")
            elif job.pid is None:
                self.finish(job, None, "agent restarted before the process was started")
            elif runner.is_alive(job.pid, job.pid_started):
                log.info("job %s attempt %s: adopted pid %s", job.id, job.attempt, job.pid)
            else:
                self.finish(job, runner.recorded_exit(job.exit_file), "agent restarted; process exit unknown")
        if self.state.outbox:
            log.info("%d report(s) from before the restart to deliver", len(self.state.outbox))

    def watch_processes(self) -> None:
        for job in list(self.state.jobs.values()):
            if job.pid is None:
                continue
            ended, exit_code = self.exit_of(job)
            if ended:
                self.finish(job, exit_code, "agent restarted; process exit unknown")
            elif job.stopping and not job.killed and job.kill_at is not None and time.time() >= job.kill_at:
                log.warning("job %s attempt %s: still running at the deadline, SIGKILL", job.id, job.attempt)
                runner.signal_group(job.pid, signal.SIGKILL)
                job.killed = True
                self.state.save()

    def exit_of(self, job: RunningJob) -> tuple[bool, int | None]:
        process = self.processes.get(job.key)
        if process is not None:
            returncode = process.poll()
            if returncode is None:
                return False, None
            # Whatever the command left behind in its group goes with it: its slots are about to be reused.
            runner.signal_group(job.pid, signal.SIGKILL)
            recorded = runner.recorded_exit(job.exit_file)
            return True, recorded if recorded is not None else runner.exit_code_of(returncode)
        if runner.is_alive(job.pid, job.pid_started):
            return False, None
        return True, runner.recorded_exit(job.exit_file)

    def finish(self, job: RunningJob, exit_code: int | None, unknown_reason: str) -> None:
        if exit_code is None and job.killed:
            exit_code = 128 + signal.SIGKILL  # ours, at the deadline: the supervisor died with the command
        outcome = runner.describe_exit(exit_code) if exit_code is not None else unknown_reason
        if job.stopping:
            status, reason = "STOPPED", f"{job.stop_reason}; {outcome}"
            if job.killed:
                reason += " after SIGKILL at the deadline"
        elif job.interrupted:
            status, reason = "FAILED", f"stopped when its agent shut down; {outcome}"
        elif exit_code == 0:
            status, reason = "SUCCEEDED", outcome
        else:
            status, reason = "FAILED", outcome
        log.info("job %s attempt %s: %s (%s)", job.id, job.attempt, status, reason)
        with self.state.lock:
            del self.state.jobs[job.key]
            self.state.finished.append(job.key)
            self.processes.pop(job.key, None)
            self.last_report.pop(job.key, None)
            if job.gone:
                self.state.save()
            else:
                tail = runner.output_tail(job.log_path)
                self.enqueue(
                    job.id,
                    job.attempt,
                    status,
                    reason,
                    exit_code,
                    tail,
                    task=job.task if job.tasked else None,
                )

    def heartbeat(self) -> None:
        now = time.monotonic()
        for job in list(self.state.jobs.values()):
            if (job.pid is None and not job.waiting) or job.refused or job.gone:
                continue
            if now - self.last_report.get(job.key, 0.0) < self.config.heartbeat_seconds:
                continue
            if self.state.pending_for(job.id, job.attempt, job.task):
                continue  # the server has not taken the last one yet: one in the outbox renews as well
            if job.waiting:
                self.report(job, "STARTING", f"rank {job.task} waiting for the other instances")
            else:
                self.report(job, "RUNNING", "stopping" if job.stopping else "running")

    # -- reports --------------------------------------------------------------------------------------

    def free_count(self) -> int:
        """Slots a new start could have now: free ones, less those that starts waiting for slots will take."""
        waiting = sum(
            c for held in self.held if isinstance(c := _count(held.entry), int) and not isinstance(c, bool)
        )
        return max(0, len(self.free_slots()) - waiting)

    def free_slots(self) -> list[int]:
        taken = {slot for job in self.state.jobs.values() for slot in job.slots}
        return [slot for slot in range(self.config.slots) if slot not in taken]

    def report(self, job: RunningJob, status: str, reason: str) -> None:
        tail = runner.output_tail(job.log_path) if status == "RUNNING" else ""
        self.enqueue(job.id, job.attempt, status, reason, None, tail, task=job.task if job.tasked else None)

    def enqueue(
        self,
        job_id: int,
        attempt: int,
        status: str,
        reason: str,
        exit_code: int | None = None,
        output_tail: str = "",
        task: int | None = None,
    ) -> None:
        """Queue a report; `task` (a task of a job run as tasks) goes in its body only when given, so a whole
        job's report is what a server without tasks takes."""
        if exit_code is not None and exit_code not in EXIT_CODES:
            reason, exit_code = f"{reason} (exit code {exit_code} out of range)", None
        body = {
            "attempt": attempt,
            "status": status,
            "reason": storable(reason)[:REASON_CHARS],
            "exit_code": exit_code,
            "output_tail": storable(output_tail)[-OUTPUT_TAIL_CHARS:],
        }
        if task is not None:
            body["task"] = task
        self.state.enqueue(job_id, body)
        self.last_report[attempt_key(job_id, attempt, task or 0)] = time.monotonic()
        self.outbox_changed.set()


def storable(text: str) -> str:
    """Text the server stores: NUL (a binary program's output) becomes U+FFFD, as undecodable bytes do."""
    return text.replace("\0", "\ufffd")


def deadline_of(value: Any, grace: float) -> float:
    """A stop's deadline (ISO 8601 from the server) in epoch seconds; `grace` from now if there is none."""
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
            if moment.tzinfo is not None:
                return moment.timestamp()
        except ValueError:
            pass
    if isinstance(value, int | float):
        return float(value)
    log.warning("stop without a usable deadline (%r): %ss of grace", value, grace)
    return time.time() + grace


def _count(entry: dict[str, Any]) -> Any:
    """The slots a start entry needs: a task's instances, or the whole job's (checked to be a number later)."""
    return entry.get("task_instances", 1) if "task" in entry else entry.get("instance_count", 1)


def _key(entry: dict[str, Any]) -> str:
    task = entry.get("task", 0)
    return attempt_key(entry["id"], entry["attempt"], task if isinstance(task, int) else 0)


def _slots(slots: list[int]) -> str:
    return ",".join(map(str, slots))
