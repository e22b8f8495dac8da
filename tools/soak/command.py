"""Soak quotaportal end to end on PostgreSQL and Redis, and check behaviour.md#capacity-what-a-share-may-hold the whole
time.

`python -m tools.soak --seconds 120 --clients 8 --workers 3` sets up its own `soak-` queues, shares, teams,
users and tokens, starts gunicorn on a free loopback port, `--workers` Celery workers (one process each,
`--concurrency 1`) and beat, all on the command's DATABASE_URL and CELERY_BROKER_URL, then runs API clients
(threads, token auth) that submit, cancel, reprioritise and read jobs, and an executor that reports on the
`external` queue. Every 0.5 s it reads the database in one REPEATABLE READ transaction and checks the
invariants. At the end it waits for every job to finish (bounded), stops every process it started and checks:
every job accounted for, each history consistent, no invariant broken in any sample nor in a replay of the
attempts, no duplicate placement. It prints the figures and exits non-zero on any violation.

Faults (`--fault`, at `--fault-at` seconds, for `--fault-seconds`):
- `redis`: stops the Redis server the soak started itself (`--own-redis PORT`; never a shared one) and starts
  it again: submissions must still succeed, and passes must resume by themselves.
- `postgres`: terminates every database connection of the soak's processes (they connect with their own
  application_name) with pg_terminate_backend: web and workers must reconnect.
- `worker`: SIGKILLs a Celery worker's pool process every 3 s, mid-pass or not: a killed pass rolls back and
  its message is redelivered (acks_late, task_reject_on_worker_lost).
`--agents N` runs the `external` queue's jobs with N reference agents (`agent/quotaportal_agent`, real
processes, long-polling the work endpoint through gunicorn's gthread workers) instead of the soak's own
reporting thread: each job's `payload.command` is a short Python process that sleeps for its duration and
sometimes exits 3. The agents share the environment's instance types round-robin; each offers as many slots as
its type's capacity, or with `--mixed-agents` the first agent of a type all but one slot per other agent of the
type and the others one slot, so jobs of several instances run as tasks across agents. The samples check the
server's accounting (STOPPING jobs hold their capacity until their agent reports them STOPPED); the jobs'
processes note when they held which slots, and at the end the soak checks that no slot was held by two live
processes at once and that no attempt held capacity past the external environment's start deadline without a
process of it having started.
Everything is bounded in time and count, talks to loopback only, and stops by itself.

This module holds the options and the run; the package's other modules hold the soak's world (`world`), its
load (`load`), its faults (`faults`), its checks (`invariants`) and its report (`report`).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, InterfaceError, OperationalError, connection
from django.utils import timezone

from scheduling.models import (
    UNFINISHED_STATUSES,
    Event,
    Executor,
    Job,
    JobAttempt,
    JobTask,
    SchedulingPass,
)
from tools.guard import require_scratch_database
from tools.processes import Processes, free_port, port_open, service_env, signal_group
from tools.soak.faults import Faults
from tools.soak.invariants import (
    SAMPLE_SECONDS,
    config_load,
    history_violations,
    replay_violations,
    sample_violations,
    slot_violations,
    unstarted_hold_violations,
)
from tools.soak.load import REQUEST_TIMEOUT, Load
from tools.soak.report import Stats, logs_excerpt, percentile, report_write
from tools.soak.world import (
    AGENT_PORTS,
    EXT_CAPACITY,
    EXT_QUEUE,
    PREFIX,
    TYPES,
    agent_slots,
    soak_clean,
    soak_setup,
)


class Command(BaseCommand):
    help = (
        "Soak the web server, Celery workers and beat on PostgreSQL and Redis, checking the capacity rules."
    )

    def add_arguments(self, parser):
        parser.add_argument("--seconds", type=int, default=60, help="load phase length (default 60)")
        parser.add_argument("--clients", type=int, default=6, help="API client threads (default 6)")
        parser.add_argument("--workers", type=int, default=3, help="Celery worker processes (default 3)")
        parser.add_argument(
            "--jobs", type=int, default=5000, help="at most this many submissions (default 5000)"
        )
        parser.add_argument(
            "--web-workers", type=int, default=2, help="gunicorn worker processes (default 2)"
        )
        parser.add_argument(
            "--drain-seconds",
            type=int,
            default=300,
            help="at most this long to wait for every job to finish after the load (default 300)",
        )
        parser.add_argument(
            "--stall-seconds",
            type=int,
            default=45,
            help="the drain fails as soon as no job has finished for this long (default 45)",
        )
        parser.add_argument(
            "--own-redis",
            type=int,
            metavar="PORT",
            help="start a Redis server on this loopback port for the soak (needed for --fault redis)",
        )
        parser.add_argument("--fault", action="append", choices=["redis", "postgres", "worker"], default=[])
        parser.add_argument("--fault-at", type=float, help="seconds into the load (default: a third of it)")
        parser.add_argument(
            "--fault-seconds", type=int, default=30, help="how long a fault lasts (default 30)"
        )
        parser.add_argument(
            "--agents",
            type=int,
            default=0,
            help="run the external queue with this many reference agents (at least 2: one per instance type) "
            "instead of the soak's reporting thread",
        )
        parser.add_argument(
            "--mixed-agents",
            action="store_true",
            help="with --agents: per instance type one agent with several slots and the others with one, so "
            "jobs of several instances run as tasks across agents (default: each agent holds its type's "
            "whole capacity)",
        )
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--json", help="also write the results to this file")

    def handle(self, *args, **options):
        self.options = options
        seconds, clients, workers = options["seconds"], options["clients"], options["workers"]
        if not (1 <= seconds <= 3600 and 1 <= clients <= 64 and 1 <= workers <= 16 and options["jobs"] >= 1):
            raise CommandError("--seconds 1..3600, --clients 1..64, --workers 1..16, --jobs >= 1")
        if options["agents"] and not len(EXT_CAPACITY) <= options["agents"] <= 64:
            raise CommandError(f"--agents: from {len(EXT_CAPACITY)} (one per instance type) to 64")
        if options["mixed_agents"] and not options["agents"]:
            raise CommandError("--mixed-agents: give --agents too")
        if options["mixed_agents"] and options["agents"] > sum(EXT_CAPACITY.values()):
            raise CommandError(f"--mixed-agents: at most {sum(EXT_CAPACITY.values())} agents (one slot each)")
        if not 1 <= options["stall_seconds"] <= options["drain_seconds"]:
            raise CommandError("--stall-seconds must be at least 1 and at most --drain-seconds")
        if connection.vendor != "postgresql":
            raise CommandError(
                "the soak needs PostgreSQL: set DATABASE_URL=postgres://... (SQLite serializes "
                "every writer, so it would measure nothing the production set-up does)"
            )
        require_scratch_database()
        broker = settings.CELERY_BROKER_URL
        if options["own_redis"] is None and not broker.startswith(("redis://", "rediss://")):
            raise CommandError(
                f"the soak needs Redis: set CELERY_BROKER_URL=redis://... (it is {broker}), "
                "or pass --own-redis PORT"
            )
        if "redis" in options["fault"] and options["own_redis"] is None:
            raise CommandError(
                "--fault redis stops the Redis server: pass --own-redis PORT so it is one the soak "
                "started itself, never one that others use"
            )
        random.seed(options["seed"])
        run = f"{PREFIX}{timezone.now():%Y%m%d-%H%M%S}"
        self.log_dir = Path(settings.VAR_DIR) / "soak" / run
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.app_name = run
        self.stats = Stats()
        self.processes = Processes(self.log_dir)
        try:
            result = self._run(broker)
        finally:
            self.processes.stop_all()
        report_write(result, self.stdout, self.style, options["json"])
        if result["violations"]:
            self.stderr.write(logs_excerpt(self.log_dir))
            raise CommandError(f"{len(result['violations'])} violation(s); logs in {self.log_dir}")

    # --- set-up ---------------------------------------------------------------------------------------------

    def _run(self, broker: str) -> dict:
        options = self.options
        call_command("migrate", verbosity=0, interactive=False)
        soak_clean()
        world = soak_setup(clients=options["clients"])
        if options["own_redis"] is not None:
            broker = self._start_redis(options["own_redis"])
        port = free_port()
        env = service_env(broker=broker, log_dir=self.log_dir, app_name=self.app_name)
        self._start_services(env, port)
        base = f"http://127.0.0.1:{port}"
        self.processes.wait_ready(
            base, broker=env["CELERY_BROKER_URL"], queue_ids=world["queue_ids"], trigger="soak"
        )
        started_at = timezone.now()

        stop = threading.Event()
        load_over = threading.Event()
        load_started = time.monotonic()
        load_deadline = load_started + options["seconds"]
        self.load = Load(
            base, world, self.stats, seed=options["seed"], jobs=options["jobs"], deadline=load_deadline
        )
        injected = Faults(
            options["fault"],
            at=options["fault_at"],
            fault_seconds=options["fault_seconds"],
            load_seconds=options["seconds"],
            load_deadline=load_deadline,
            processes=self.processes,
            stats=self.stats,
            app_name=self.app_name,
            redis_argv=getattr(self, "redis_argv", None),
            redis_port=getattr(self, "redis_port", None),
        )
        sampler = threading.Thread(target=self._sampler, args=(world, stop), name="sampler", daemon=True)
        executor = threading.Thread(target=self.load.external_executor, args=(stop,), daemon=True)
        clients = [
            threading.Thread(target=self.load.client, args=(i, load_over), daemon=True)
            for i in range(options["clients"])
        ]
        faults = threading.Thread(target=injected.run, args=(load_over,), daemon=True)
        if options["agents"]:
            self._start_agents(base, world)
            threads = (sampler, faults, *clients)
        else:
            threads = (sampler, executor, faults, *clients)
        for thread in threads:
            thread.start()
        for thread in clients:
            thread.join(timeout=options["seconds"] + REQUEST_TIMEOUT + 60)
        load_over.set()
        load_seconds = time.monotonic() - load_started
        faults.join(timeout=options["fault_seconds"] + 60)
        undrained, drain_seconds = self._drain(world)
        stop.set()
        backlog = self._broker_backlog(broker)
        if executor.is_alive():
            executor.join(timeout=REQUEST_TIMEOUT + 5)
        sampler.join(timeout=30)
        self.processes.stop_all()
        self._end_agents_jobs()
        if undrained:
            left = [
                (job.pk, job.job_queue_name, job.status, job.current_reason)
                for job in Job.objects.filter(
                    job_queue_id__in=world["queue_ids"], status__in=UNFINISHED_STATUSES
                ).select_related("pending")[:20]
            ]
            self.stats.violation(
                f"{undrained} ({self._external_progress(world)}); unfinished: "
                + "; ".join(f"job {i} on {q} {s}: {r[:160]}" for i, q, s, r in left)
            )
        return self._final_checks(world, started_at, load_seconds, drain_seconds, backlog)

    def _external_progress(self, world: dict) -> str:
        """Who runs the external queue and when they were last heard from: the soak's own executor, or the
        agents as the server saw their polls."""
        if not self.options["agents"]:
            silent = time.monotonic() - self.load.executor_heartbeat
            return f"the external executor's last round began {silent:.1f} s ago"
        now = timezone.now()
        seen = Executor.objects.filter(service_environment_id=world["ext_environment_id"]).order_by("name")
        return "agents as the server last saw them: " + (
            ", ".join(
                f"{e.name} {(now - e.last_seen_at).total_seconds():.1f} s ago offering {e.offered_slots} "
                f"of {e.total_slots} {e.offered_instance_type}"
                for e in seen
            )
            or "none has polled"
        )

    def _start_redis(self, port: int) -> str:
        if shutil.which("redis-server") is None:
            raise CommandError(
                "--own-redis needs redis-server on PATH (Debian: apt-get install redis-server)"
            )
        if port_open(port):
            raise CommandError(
                f"something already listens on 127.0.0.1:{port}: --own-redis needs a free port"
            )
        self.redis_argv = [
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.log_dir),
        ]
        self.processes.start("redis", self.redis_argv, os.environ.copy())
        self.processes.wait(lambda: port_open(port), 10, f"Redis on port {port}")
        self.redis_port = port
        return f"redis://127.0.0.1:{port}/0"

    def _start_services(self, env: dict, port: int) -> None:
        # Each agent's long-poll holds a thread for up to its wait: threads, not sync workers.
        threads = self.options["agents"] + 8 if self.options["agents"] else 0
        self.processes.start_web(env, port=port, workers=self.options["web_workers"], threads=threads)
        self.processes.start_workers(env, count=self.options["workers"], prefix="soak")
        self.processes.start_beat(env)

    def _start_agents(self, base: str, world: dict) -> None:
        """N agents round-robin over the external environment's types; each offers its type's capacity, or
        (--mixed-agents) the first of a type all but one slot per other agent of the type, the others one."""
        self.agent_dirs: list[Path] = []
        slots = agent_slots(self.options["agents"], mixed=self.options["mixed_agents"])
        # The jobs' processes (children of the agents) say when they held which slots: one GPU per slot.
        self.slots_log = self.log_dir / "slots.log"
        env = {
            **os.environ,
            "PYTHONPATH": str(Path(settings.BASE_DIR) / "agent"),
            "PYTHONUNBUFFERED": "1",
            "SOAK_SLOTS_LOG": str(self.slots_log),
        }
        for i, (key, count) in enumerate(slots):
            work_dir = self.log_dir / f"agent{i}"
            self.agent_dirs.append(work_dir)
            argv = [sys.executable, "-m", "quotaportal_agent", "--url", base]
            argv += ["--token", world["executor_token"], "--environment", str(world["ext_environment_id"])]
            argv += ["--instance-type", TYPES[key], "--slots", str(count), "--gpus-per-instance", "1"]
            argv += ["--work-dir", str(work_dir), "--name", f"{PREFIX}agent{i}", "--heartbeat-seconds", "5"]
            argv += ["--wait-seconds", "10", "--log-level", "WARNING", "--advertise-address", "127.0.0.1"]
            argv += ["--port-range", AGENT_PORTS]
            self.processes.start(f"agent{i}", argv, env)

    def _end_agents_jobs(self) -> None:
        """Stopped agents leave their jobs running (a restarted agent adopts them): end what is left."""
        for work_dir in getattr(self, "agent_dirs", []):
            try:
                state = json.loads((work_dir / "state.json").read_text())
            except (OSError, ValueError):
                continue
            for job in state.get("jobs", []):
                if job.get("pid"):
                    signal_group(job["pid"], signal.SIGKILL)

    # --- sampling -------------------------------------------------------------------------------------------

    def _sampler(self, world: dict, stop: threading.Event) -> None:
        config = config_load(world["queue_ids"])
        next_at = time.monotonic()
        try:
            while not stop.is_set():
                began = time.monotonic()
                try:
                    found = sample_violations(config, world["queue_ids"], self.stats.stopping)
                except (
                    OperationalError,
                    InterfaceError,
                    DatabaseError,
                ) as exc:  # its connection was terminated
                    connection.close()
                    with self.stats.lock:
                        self.stats.sample_errors += 1
                    self.stats.unexpected(began, f"sample failed: {exc}")
                    found = []
                else:
                    with self.stats.lock:
                        self.stats.samples += 1
                        self.stats.sample_ms.append((time.monotonic() - began) * 1000)
                for message in found:
                    self.stats.violation(f"sample at {timezone.now():%H:%M:%S.%f}: {message}")
                next_at += SAMPLE_SECONDS
                stop.wait(max(0.0, next_at - time.monotonic()))
        finally:
            connection.close()

    # --- the end --------------------------------------------------------------------------------------------

    def _drain(self, world: dict) -> tuple[str | None, float]:
        """Wait for every job to finish: None once they have, else why the wait ended.

        How long a backlog takes depends on how fast the clients submitted, which depends on the machine; a
        stuck job does not. So the wait goes on while jobs keep finishing, and ends as soon as none has for
        --stall-seconds (a job that should run and does not), or at --drain-seconds in any case.
        """
        began = progressed = time.monotonic()
        unfinished = Job.objects.filter(job_queue_id__in=world["queue_ids"], status__in=UNFINISHED_STATUSES)
        left = None
        while True:
            now = time.monotonic()
            if now - began >= self.options["drain_seconds"]:
                return f"the queues did not drain within {self.options['drain_seconds']} s", now - began
            if now - progressed >= self.options["stall_seconds"]:
                return (
                    f"the drain stalled: no job finished for {self.options['stall_seconds']} s "
                    f"({now - began:.0f} s into the drain)"
                ), now - began
            try:
                count = unfinished.count()
            except (OperationalError, InterfaceError):
                connection.close()
            else:
                if count == 0:
                    return None, now - began
                if left is None or count < left:
                    progressed = now
                left = count
            time.sleep(1)

    def _broker_backlog(self, broker: str) -> int | None:
        import redis

        try:
            return redis.Redis.from_url(broker, socket_connect_timeout=2, socket_timeout=2).llen(
                settings.CELERY_TASK_DEFAULT_QUEUE
            )
        except redis.RedisError:
            return None

    def _agent_checks(self, world: dict) -> None:
        """With agents: from the jobs' own notes, no slot held by two live processes at once, and no capacity
        held past the start deadline by an attempt nobody started."""
        slots_log = getattr(self, "slots_log", None)
        lines = slots_log.read_text().splitlines() if slots_log is not None and slots_log.exists() else []
        external = list(
            JobAttempt.objects.filter(job__job_queue__name=EXT_QUEUE)
            .order_by("id")
            .values("job_id", "attempt", "scheduled_at", "stopped_at")
        )
        ends = {(a["job_id"], a["attempt"]): a["stopped_at"] for a in external}
        found = slot_violations(lines, ends, time.time()) + unstarted_hold_violations(
            external, lines, timezone.now()
        )
        for message in found[:50]:
            self.stats.violation(message)
        self.stats.agent_notes = {
            "processes": sum(1 for line in lines if " start " in line),
            "tasks": JobTask.objects.filter(job__job_queue__name=EXT_QUEUE).count(),
            "start_timeouts": Event.objects.filter(
                job__job_queue__name=EXT_QUEUE, kind="START_TIMEOUT"
            ).count(),
            "tasks_lost": Event.objects.filter(job__job_queue__name=EXT_QUEUE, kind="TASK_LOST").count(),
            "violations": len(found),
        }

    def _final_checks(
        self, world: dict, started_at, load_seconds: float, drain_seconds: float, backlog: int | None
    ) -> dict:
        stats = self.stats
        queue_ids = world["queue_ids"]
        config = config_load(queue_ids)
        jobs = {
            row["id"]: row
            for row in Job.objects.filter(job_queue_id__in=queue_ids).values("id", "status", "quota_share_id")
        }
        unknown = set(stats.submitted) - set(jobs)
        if unknown:
            stats.violation(
                f"{len(unknown)} jobs the API accepted are not in the database: {sorted(unknown)[:10]}"
            )
        unacknowledged = len(set(jobs) - set(stats.submitted))
        if unacknowledged > stats.failed_submissions:
            stats.violation(
                f"{unacknowledged} jobs in the database that no client was told about "
                f"(only {stats.failed_submissions} submissions failed client-side)"
            )
        events: dict[int, list[str]] = defaultdict(list)
        kinds: Counter = Counter()
        for job_id, kind in (
            Event.objects.filter(job_id__in=jobs).order_by("id").values_list("job_id", "kind")
        ):
            events[job_id].append(kind)
            kinds[kind] += 1
        attempts: dict[int, list[dict]] = defaultdict(list)
        all_attempts = list(
            JobAttempt.objects.filter(job_id__in=jobs)
            .order_by("id")
            .values(
                "job_id",
                "instance_type_id",
                "instance_count",
                "training_plan_id",
                "scheduled_at",
                "stopped_at",
            )
        )
        for attempt in all_attempts:
            attempts[attempt["job_id"]].append(attempt)
        histories_broken = 0
        for job_id, job in jobs.items():
            found = history_violations(job, events[job_id], attempts[job_id])
            histories_broken += bool(found)
            for message in found:
                stats.violation(message)
        replay, change_points = replay_violations(
            config, all_attempts, {job_id: job["quota_share_id"] for job_id, job in jobs.items()}
        )
        if self.options["agents"]:
            self._agent_checks(world)
        for message in replay[:50]:
            stats.violation(message)
        if len(replay) > 50:
            stats.violation(f"... and {len(replay) - 50} more replay violations")
        passes = list(
            SchedulingPass.objects.filter(job_queue_id__in=queue_ids, started_at__gte=started_at).values_list(
                "duration_ms", "trigger"
            )
        )
        durations = [duration for duration, _ in passes]
        requests_total = sum(stats.requests.values())
        submits = [n for (op, code), n in stats.requests.items() if op == "submit" and code == 201]
        statuses = Counter()
        for (_, code), n in stats.requests.items():
            statuses[str(code)] += n
        return {
            "options": {
                k: self.options[k]
                for k in (
                    "seconds",
                    "clients",
                    "workers",
                    "jobs",
                    "web_workers",
                    "fault",
                    "agents",
                    "mixed_agents",
                )
            },
            "load_seconds": round(load_seconds, 1),
            "requests": requests_total,
            "requests_per_second": round(requests_total / load_seconds, 1) if load_seconds else 0,
            "submissions": sum(submits),
            "submissions_per_second": round(sum(submits) / load_seconds, 1) if load_seconds else 0,
            "by_operation": dict(
                sorted(sum((Counter({op: n}) for (op, _), n in stats.requests.items()), Counter()).items())
            ),
            "operations": {f"{op} {code}": n for (op, code), n in sorted(stats.requests.items(), key=str)},
            "statuses": dict(sorted(statuses.items())),
            "submit_latency_ms": {
                "p50": round(percentile(stats.submit_latency_ms, 0.5), 1),
                "p99": round(percentile(stats.submit_latency_ms, 0.99), 1),
                "max": round(max(stats.submit_latency_ms, default=0), 1),
            },
            "jobs": dict(sorted(Counter(job["status"] for job in jobs.values()).items())),
            "jobs_total": len(jobs),
            "passes": len(passes),
            "passes_by_trigger": dict(sorted(Counter(trigger for _, trigger in passes).items())),
            "pass_ms": {
                "p50": round(percentile(durations, 0.5), 1),
                "p99": round(percentile(durations, 0.99), 1),
                "max": round(max(durations, default=0), 1),
            },
            "events": dict(sorted(kinds.items())),
            "samples_with_stopping_jobs": self.stats.stopping["stopping_samples"],
            "stopping_jobs_sampled": self.stats.stopping["stopping_jobs"],
            "attempts": len(all_attempts),
            "samples": stats.samples,
            "sample_ms": {
                "p50": round(percentile(stats.sample_ms, 0.5), 1),
                "max": round(max(stats.sample_ms, default=0), 1),
            },
            "sample_errors": stats.sample_errors,
            "replay_change_points": change_points,
            "histories_checked": len(jobs),
            "histories_broken": histories_broken,
            "drain_seconds": round(drain_seconds, 1),
            "broker_backlog_at_end": backlog,
            "faults": stats.fault_notes,
            "tolerated_in_fault_windows": len(stats.tolerated),
            "violations": stats.violations,
            "agents": stats.agent_notes,
            "log_dir": str(self.log_dir),
        }
