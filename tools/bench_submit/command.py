"""The submission path under gunicorn: latency of `POST /api/v1/jobs/` idle and with concurrent clients.

On a scratch PostgreSQL database (tools.guard) it migrates, sets up its own `bench-submit` queue (a simulated
environment with two instance types, one share of the member's team that may borrow, one that lends) and a
member with an API token, then starts gunicorn (`--web-workers` processes x `--threads` threads, gthread, so
the clients' keep-alive connections are kept), `--workers` Celery workers and the beat on the configured Redis
(QUOTAPORTAL_AUTOPASS=1: each submission asks for a pass, so passes run while it submits). It measures:
- idle: `--idle` submissions one after the other from one keep-alive session;
- concurrent: `--clients` threads, each with its own keep-alive session, `--requests` submissions in all;
and prints for each p50, p90, p99 and max latency, submissions per second held and the passes that ran
meanwhile; statements per submission, counted on one submission through the same view in this process (with
the queue nearly empty, and again once it holds every job); and whether every accepted job (201) is a row
afterwards. Then it stops the processes it started (also on Ctrl-C and SIGTERM) and deletes its rows.
"""

from __future__ import annotations

import cProfile
import io
import itertools
import json
import pstats
import random
import threading
import time
from pathlib import Path

import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scheduling import rules
from scheduling.models import (
    Event,
    InstanceType,
    Job,
    JobQueue,
    Membership,
    SchedulingPass,
    ServiceEnvironment,
    Team,
)
from scheduling.services import configuration as config_services
from simulator.metrics import percentile
from tools.guard import require_scratch_database
from tools.processes import Processes, cpu_seconds, free_port, service_env

PREFIX = "bench-submit"
TYPES = {"big": f"{PREFIX}.p5", "small": f"{PREFIX}.g5"}
CAPACITY = {"big": 8, "small": 16}
# (share, team, strategy, limits): the member's share borrows what the other one lends.
SHARES = [
    (f"{PREFIX}-a", f"{PREFIX}-a", "LEND_AND_BORROW", {"big": 4, "small": 8}),
    (f"{PREFIX}-b", f"{PREFIX}-b", "LEND", {"big": 4, "small": 8}),
]
REQUEST_TIMEOUT = 60


class Command(BaseCommand):
    help = "p50/p90/p99 latency of POST /api/v1/jobs/ under gunicorn, idle and with concurrent clients."

    def add_arguments(self, parser):
        parser.add_argument("--idle", type=int, default=200, help="sequential submissions (default 200)")
        parser.add_argument("--clients", type=int, default=20, help="concurrent client threads (default 20)")
        parser.add_argument(
            "--requests", type=int, default=2000, help="submissions of the concurrent clients in all (2000)"
        )
        parser.add_argument("--web-workers", type=int, default=2, help="gunicorn processes (default 2)")
        parser.add_argument("--threads", type=int, default=4, help="threads per gunicorn process (default 4)")
        parser.add_argument("--workers", type=int, default=1, help="Celery worker processes (default 1)")
        parser.add_argument("--seed", type=int, default=19)
        parser.add_argument(
            "--profile",
            type=int,
            default=0,
            metavar="N",
            help="also time N submissions through the view in this process and print where their time goes",
        )
        parser.add_argument("--json", help="also write the figures to this file")

    def handle(self, *args, **options):
        self.options = options
        if not (
            1 <= options["idle"] <= 100_000
            and 1 <= options["clients"] <= 200
            and options["clients"] <= options["requests"] <= 1_000_000
        ):
            raise CommandError("--idle 1..100000, --clients 1..200, --requests from --clients to 1000000")
        if not (
            1 <= options["web_workers"] <= 32 and 1 <= options["threads"] <= 64 and 1 <= options["workers"]
        ):
            raise CommandError("--web-workers 1..32, --threads 1..64, --workers at least 1")
        if connection.vendor != "postgresql":
            raise CommandError(
                "the submission bench needs PostgreSQL: set DATABASE_URL=postgres://... (what production runs)"
            )
        require_scratch_database()
        broker = settings.CELERY_BROKER_URL
        if not broker.startswith(("redis://", "rediss://")):
            raise CommandError(
                f"the submission bench needs Redis: set CELERY_BROKER_URL=redis://... (it is {broker})"
            )
        call_command("migrate", verbosity=0, interactive=False)
        from quotaportal.celery import app

        app.control.purge()  # passes an interrupted run left in the broker
        cleanup()
        self.rng = random.Random(options["seed"])
        self.counter = itertools.count()
        run = f"{PREFIX}-{timezone.now():%Y%m%d-%H%M%S}"
        log_dir = Path(settings.VAR_DIR) / PREFIX / run
        log_dir.mkdir(parents=True, exist_ok=True)
        self.world = setup()
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        env = service_env(broker=broker, log_dir=log_dir, app_name=run)
        settings.API_SUBMIT_RATE = env["API_SUBMIT_RATE"]  # the counted submissions share the web's counter
        try:
            with Processes(log_dir) as processes:
                processes.start_web(
                    env, port=port, workers=options["web_workers"], threads=options["threads"]
                )
                processes.start_workers(env, count=options["workers"], prefix=PREFIX)
                processes.start_beat(env)
                processes.wait_ready(
                    self.base, broker=broker, queue_ids=[self.world["queue_id"]], trigger="bench"
                )
                self.processes, self.app_name = processes, run
                result = self.measure()
            result["lost"] = self.lost(result)
        finally:
            app.control.purge()
            cleanup()
        result["options"] = options
        result["log_dir"] = str(log_dir)
        self.report(result)
        problems = [
            f"{n} submissions answered {code}" for code, n in result["statuses"].items() if code != "201"
        ]
        if result["lost"]:
            problems.append(f"{result['lost']} accepted jobs are not in the database")
        if problems:
            raise CommandError("; ".join(problems) + f"; logs in {log_dir}")

    # --- measuring ----------------------------------------------------------------------------------------

    def measure(self) -> dict:
        self.accepted: list[int] = []
        self.statuses: dict[str, int] = {}
        self.lock = threading.Lock()
        session = self.session()
        for _ in range(5):  # not timed: the first requests open the server's database and Redis connections
            self.submit(session, "warm")
        statements_before = self.statements()
        idle = self.phase("idle", clients=1, count=self.options["idle"])
        concurrent = self.phase("concurrent", clients=self.options["clients"], count=self.options["requests"])
        statements_after = self.statements()
        if self.options["profile"]:
            self.profile(self.options["profile"])
        return {
            "idle": idle,
            "concurrent": concurrent,
            "statements": [statements_before, statements_after],
            "statuses": dict(sorted(self.statuses.items())),
            "accepted": len(self.accepted),
        }

    def phase(self, name: str, *, clients: int, count: int) -> dict:
        """`count` submissions from `clients` threads, each with its own keep-alive session."""
        remaining = iter(range(count))
        latencies: list[float] = []
        failures: list[str] = []

        def client() -> None:
            session = self.session()
            try:
                while next(remaining, None) is not None:
                    latencies.append(self.submit(session, name))
            except Exception as exc:  # a client that dies says so, and the run fails
                failures.append(f"{type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=client, name=f"{name}-{i}", daemon=True) for i in range(clients)]
        since = timezone.now()
        cpu_before = self.cpu()
        backends = BackendCpu(self.app_name)
        began = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - began
        cpu = {name: spent - cpu_before[name] for name, spent in self.cpu().items()}
        cpu["postgres"] = backends.stop()
        if failures:
            raise CommandError(f"{name}: {len(failures)} clients failed, the first with {failures[0]}")
        passes = list(
            SchedulingPass.objects.filter(job_queue_id=self.world["queue_id"], started_at__gte=since)
            .order_by("duration_ms")
            .values_list("duration_ms", flat=True)
        )
        ordered = sorted(latencies)
        return {
            "clients": clients,
            "submissions": len(ordered),
            "seconds": round(seconds, 2),
            "per_second": round(len(ordered) / seconds, 1),
            "latency_ms": {
                **{f"p{q}": round(percentile(ordered, q), 1) for q in (50, 90, 99)},
                "max": round(ordered[-1], 1),
            },
            "cpu_ms_per_submission": {
                name: round(spent * 1000 / len(ordered), 1) for name, spent in cpu.items()
            },
            "passes": len(passes),
            "pass_ms": {
                "p50": round(percentile(passes, 50)) if passes else None,
                "max": round(passes[-1]) if passes else None,
            },
        }

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of gunicorn, of Celery (workers and beat) and of this process (the clients)."""
        started = self.processes.started
        return {
            "web": cpu_seconds([started["web"].pid]),
            "celery": cpu_seconds(p.pid for name, p in started.items() if name != "web"),
            "clients": time.process_time(),
        }

    def session(self) -> requests.Session:
        session = requests.Session()
        session.headers["Authorization"] = f"Token {self.world['token']}"
        return session

    def submit(self, session: requests.Session, phase: str) -> float:
        """One submission; its latency in ms. The job's id is kept when it is accepted."""
        body = self.body(phase)
        began = time.perf_counter()
        response = session.post(f"{self.base}/api/v1/jobs/", json=body, timeout=REQUEST_TIMEOUT)
        latency = (time.perf_counter() - began) * 1000
        with self.lock:
            code = str(response.status_code)
            self.statuses[code] = self.statuses.get(code, 0) + 1
            if response.status_code == 201:
                self.accepted.append(response.json()["id"])
        return latency

    def body(self, phase: str) -> dict:
        with self.lock:
            n = next(self.counter)
            big, small, duration = self.rng.randint(1, 2), self.rng.randint(1, 4), self.rng.randint(2, 10)
        return {
            "name": f"{phase}-{n}",
            "job_queue": PREFIX,
            "quota_share": SHARES[0][0],
            "instance_preferences": [
                {"instance_type": TYPES["big"], "instance_count": big},
                {"instance_type": TYPES["small"], "instance_count": small},
            ],
            "duration_seconds": duration,
            "client_token": f"{phase}-{n}",
            "payload": {"image": "registry.example.com/bench/trainer:1", "n": n},
        }

    def statements(self) -> dict:
        """The SQL statements of one submission through the same view, in this process, and the queue's size."""
        client = APIClient(HTTP_HOST="127.0.0.1")
        client.credentials(HTTP_AUTHORIZATION=f"Token {self.world['token']}")
        jobs = Job.objects.filter(job_queue_id=self.world["queue_id"]).count()
        with CaptureQueriesContext(connection) as captured:
            response = client.post("/api/v1/jobs/", self.body("counted"), format="json")
        if response.status_code != 201:
            raise CommandError(
                f"the counted submission answered {response.status_code}: {response.content[:300]}"
            )
        self.accepted.append(response.json()["id"])
        return {"queue_jobs": jobs, "statements": len(captured)}

    def profile(self, count: int) -> None:
        """`count` submissions through the view in this process, timed, then again under cProfile."""
        client = APIClient(HTTP_HOST="127.0.0.1")
        client.credentials(HTTP_AUTHORIZATION=f"Token {self.world['token']}")

        def submit() -> None:
            response = client.post("/api/v1/jobs/", self.body("profiled"), format="json")
            if response.status_code != 201:
                raise CommandError(f"a profiled submission answered {response.status_code}")
            self.accepted.append(response.json()["id"])

        began, cpu_began = time.perf_counter(), time.thread_time()
        for _ in range(count):
            submit()
        wall, cpu = time.perf_counter() - began, time.thread_time() - cpu_began
        self.stdout.write(
            f"\n{count} submissions through the view in this process: {wall * 1000 / count:.1f} ms each, "
            f"{cpu * 1000 / count:.1f} ms of it CPU; {count} more under cProfile, the project's functions:"
        )
        profiler = cProfile.Profile()
        profiler.runcall(lambda: [submit() for _ in range(count)])
        report = io.StringIO()
        pstats.Stats(profiler, stream=report).sort_stats("cumulative").print_stats(r"/(api|scheduling)/", 25)
        self.stdout.write(report.getvalue())

    def lost(self, result: dict) -> int:
        """Accepted jobs (201) that are not rows, and rows of the member that no 201 answered (both lost)."""
        rows = set(Job.objects.filter(job_queue_id=self.world["queue_id"]).values_list("id", flat=True))
        accepted = set(self.accepted)
        result["rows"] = len(rows)
        return len(accepted - rows) + len(rows - accepted)

    # --- the report ---------------------------------------------------------------------------------------

    def report(self, r: dict) -> None:
        o = r["options"]
        write = self.stdout.write
        write(
            f"\nPOST /api/v1/jobs/ under gunicorn gthread {o['web_workers']} x {o['threads']} threads, "
            f"{o['workers']} Celery worker(s) + beat, PostgreSQL, Redis; QUOTAPORTAL_AUTOPASS=1"
        )
        for label, p in (
            (f"idle, 1 client, {o['idle']} in a row", r["idle"]),
            (
                f"{o['clients']} clients, {o['requests']} in all",
                r["concurrent"],
            ),
        ):
            ms = p["latency_ms"]
            write(
                f"  {label:<32} p50 {ms['p50']} ms, p90 {ms['p90']} ms, p99 {ms['p99']} ms, max {ms['max']} ms; "
                f"{p['per_second']} submissions/s held over {p['seconds']} s; {p['passes']} passes meanwhile "
                f"(p50 {p['pass_ms']['p50']} ms, max {p['pass_ms']['max']} ms)"
            )
            write(
                f"  {'':<32} CPU per submission: "
                + ", ".join(f"{name} {ms} ms" for name, ms in p["cpu_ms_per_submission"].items())
            )
        before, after = r["statements"]
        write(
            f"  statements per submission: {before['statements']} into a queue of {before['queue_jobs']} jobs, "
            f"{after['statements']} into {after['queue_jobs']} jobs"
        )
        write(
            f"  accepted (201): {r['accepted']}, rows afterwards: {r['rows']}, lost: {r['lost']}; statuses: "
            + ", ".join(f"{code}: {n}" for code, n in r["statuses"].items())
        )
        write(f"  logs in {r['log_dir']}")
        if o["json"]:
            Path(o["json"]).write_text(json.dumps(r, indent=2, default=str))


class BackendCpu(threading.Thread):
    """CPU of the PostgreSQL backends serving the bench's processes (found by their application_name; the
    server must be on this machine), sampled every 0.5 s from now until `stop()`: the web's connections are
    replaced every DB_CONN_MAX_AGE seconds, and a backend that ends takes its CPU figure with it."""

    def __init__(self, app_name: str):
        super().__init__(daemon=True)
        self.app_name = app_name
        self.done = threading.Event()
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.sample(born_before=True)
        self.start()

    def sample(self, born_before: bool = False) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", [self.app_name])
            pids = [pid for (pid,) in cursor.fetchall()]
        for pid in pids:
            spent = cpu_seconds([pid])  # 0 once it has ended
            self.first.setdefault(pid, spent if born_before else 0.0)
            self.last[pid] = max(spent, self.last.get(pid, 0.0))

    def run(self) -> None:
        try:
            while not self.done.wait(0.5):
                self.sample()
        finally:
            connection.close()

    def stop(self) -> float:
        """CPU seconds the backends spent since the first sample."""
        self.done.set()
        self.join()
        self.sample()
        return sum(self.last[pid] - self.first[pid] for pid in self.last)


@transaction.atomic
def setup() -> dict:
    """The bench's queue on a simulated environment, its two shares and teams, and the member's token."""
    types = {key: InstanceType.objects.create(name=name, gpu_count=8) for key, name in TYPES.items()}
    environment = config_services.service_environment_create(
        fields={"name": PREFIX, "executor": ServiceEnvironment.Executor.SIMULATED},
        limits=[rules.LimitInput(types[key], n) for key, n in CAPACITY.items()],
        actor=None,
    )
    queue = config_services.config_object_create(
        model=JobQueue, fields={"name": PREFIX, "service_environment": environment}, actor=None
    )
    teams = {}
    for name, slug, strategy, limits in SHARES:
        teams[slug] = Team.objects.create(name=slug, slug=slug)
        config_services.quota_share_create(
            fields={"name": name, "job_queue": queue, "team": teams[slug], "strategy": strategy},
            limits=[rules.LimitInput(types[key], n) for key, n in limits.items()],
            actor=None,
        )
    member = get_user_model().objects.create_user(username=f"{PREFIX}-member")
    Membership.objects.create(team=teams[SHARES[0][1]], user=member, role=Membership.Role.MEMBER)
    return {"queue_id": queue.pk, "token": Token.objects.create(user=member).key}


@transaction.atomic
def cleanup() -> None:
    """What a run left: the queue with its jobs, events and shares; its environment, types, teams, member."""
    queues = JobQueue.objects.filter(name=PREFIX)
    Event.objects.filter(team__slug__startswith=PREFIX).delete()
    Event.objects.filter(job_queue__in=queues).delete()
    Job.objects.filter(team__slug__startswith=PREFIX).delete()
    queues.delete()
    ServiceEnvironment.objects.filter(name=PREFIX).delete()
    InstanceType.objects.filter(name__startswith=f"{PREFIX}.").delete()
    Team.objects.filter(slug__startswith=PREFIX).delete()
    get_user_model().objects.filter(username__startswith=PREFIX).delete()
