"""The work endpoint under 50 long-polling agents: `python -m tools.bench_agents [--agents 50] [--wait 10]`.

On a scratch database (tools.guard) it sets up its own `bench-agents` environment (external executor), queue,
share and jobs: `--running` placed jobs already taken by an executor (so the pollers get nothing to start) and
`--pending` RUNNABLE ones that do not fit (so every pass has reasons to write). It starts gunicorn with gthread
workers sized for the waits (`--web-workers` x `--threads`), with QUOTAPORTAL_AUTOPASS=0, so passes run only
when it asks, through `POST /job-queues/{id}/schedule/`, which answers the pass's `duration_ms` (what
`SchedulingPass.duration_ms` records).

Then, twice, without and with `--agents` pollers (threads of this process using the reference agent's own
client, `quotaportal_agent.client.Client.work`, each long-polling `wait=--wait` under a name of its own), it
measures `--calls` sequential `wait=0` calls of the work endpoint (latency p50, p99) and `--passes` passes
(duration_ms p50, p99, and the wall time of the call), and counts the database connections the web server holds
while the pollers wait. The cache (CACHE_URL) must be one the web processes share: Redis or a file cache.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.utils import timezone
from rest_framework.authtoken.models import Token

from scheduling import rules
from scheduling.models import (
    InstanceType,
    Job,
    JobQueue,
    JobStatus,
    Membership,
    ServiceEnvironment,
    Team,
)
from scheduling.passes.run import queue_pass_run
from scheduling.services import configuration as config_services
from scheduling.services import jobs as job_services
from tools.guard import require_scratch_database
from tools.processes import Processes, free_port

PREFIX = "bench-agents"
TYPE = "bench-agents.gpu"
APP_NAME = "qp-bench-agents"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))] if ordered else 0.0


class Command(BaseCommand):
    help = "Work-endpoint latency and pass time with N agents long-polling, against none."

    def add_arguments(self, parser):
        parser.add_argument("--agents", type=int, default=50, help="long-polling agents (default 50)")
        parser.add_argument("--wait", type=int, default=10, help="their wait= (default 10)")
        parser.add_argument("--calls", type=int, default=200, help="wait=0 calls measured (default 200)")
        parser.add_argument("--passes", type=int, default=30, help="passes measured (default 30)")
        parser.add_argument("--running", type=int, default=200, help="placed, taken jobs (default 200)")
        parser.add_argument("--pending", type=int, default=300, help="RUNNABLE jobs (default 300)")
        parser.add_argument("--web-workers", type=int, default=2)
        parser.add_argument("--threads", type=int, default=64, help="gthread threads per web worker")
        parser.add_argument("--json", help="also write the figures to this file")

    def handle(self, *args, **options):
        self.options = options
        if not 1 <= options["agents"] <= 500 or not 0 <= options["wait"] <= 30:
            raise CommandError("--agents 1..500, --wait 0..30")
        require_scratch_database()
        cache_url = settings.CACHE_URL
        if cache_url.startswith("locmem"):
            raise CommandError("CACHE_URL is locmem://: the web processes would not share the work version")
        call_command("migrate", verbosity=0, interactive=False)
        world = self._setup()
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        log_dir = Path(settings.VAR_DIR) / "bench-agents"
        log_dir.mkdir(parents=True, exist_ok=True)
        with Processes(log_dir) as processes:
            processes.start_web(
                self._web_env(), port=port, workers=options["web_workers"], threads=options["threads"]
            )
            processes.wait_web(self.base)
            quiet = self._measure(world, pollers=0)
            busy = self._measure(world, pollers=options["agents"])
        self._report(quiet, busy, cache_url)

    # --- set-up -------------------------------------------------------------------------------------------

    def _setup(self) -> dict:
        JobQueue.objects.filter(name=PREFIX).delete()
        ServiceEnvironment.objects.filter(name=PREFIX).delete()
        Job.objects.filter(job_queue_name=PREFIX).delete()
        get_user_model().objects.filter(username__startswith=PREFIX).delete()
        Team.objects.filter(slug=PREFIX).delete()
        InstanceType.objects.filter(name=TYPE).delete()

        running, pending = self.options["running"], self.options["pending"]
        gpu = InstanceType.objects.create(name=TYPE, gpu_count=8)
        environment = config_services.service_environment_create(
            fields={"name": PREFIX, "executor": ServiceEnvironment.Executor.EXTERNAL, "lease_seconds": 86400},
            limits=[rules.LimitInput(gpu, running)],
            actor=None,
        )
        queue = config_services.config_object_create(
            model=JobQueue, fields={"name": PREFIX, "service_environment": environment}, actor=None
        )
        team = Team.objects.create(name=PREFIX, slug=PREFIX)
        share = config_services.quota_share_create(
            fields={"name": PREFIX, "job_queue": queue, "team": team, "strategy": "RESERVE"},
            limits=[rules.LimitInput(gpu, running)],
            actor=None,
        )
        User = get_user_model()
        member = User.objects.create_user(username=f"{PREFIX}-member")
        Membership.objects.create(team=team, user=member, role=Membership.Role.MEMBER)
        for i in range(running + pending):
            job_services.job_submit(
                user=member,
                submission=job_services.JobSubmission(
                    name=f"job-{i}",
                    job_queue=queue,
                    quota_share=share,
                    instance_preferences=[rules.PreferenceInput(gpu, 1, None)],
                    payload={"command": ["true"]},
                ),
            )
        queue_pass_run(job_queue_id=queue.pk, trigger="bench")  # places `running`, the rest wait
        now = timezone.now()
        Job.objects.filter(job_queue=queue, status=JobStatus.SCHEDULED).update(
            status=JobStatus.RUNNING, taken_at=now, lease_expires_at=now + timezone.timedelta(days=1)
        )
        executor = User.objects.create_user(username=f"{PREFIX}-executor")
        executor.user_permissions.add(Permission.objects.get(codename="report_job_status"))
        environment.executor_accounts.add(executor)
        admin = User.objects.create_user(username=f"{PREFIX}-admin", is_staff=True)
        return {
            "environment_id": environment.pk,
            "queue_id": queue.pk,
            "executor_token": Token.objects.create(user=executor).key,
            "admin_token": Token.objects.create(user=admin).key,
        }

    def _web_env(self) -> dict:
        return {
            **os.environ,
            "DATABASE_URL": settings.DATABASE_URL,
            "CACHE_URL": settings.CACHE_URL,
            "SECRET_KEY": settings.SECRET_KEY,
            "DEBUG": "0",
            "HTTPS": "0",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "QUOTAPORTAL_AUTOPASS": "0",
            "LOG_LEVEL": "WARNING",
            "PGAPPNAME": APP_NAME,
        }

    # --- measuring ----------------------------------------------------------------------------------------

    def _measure(self, world: dict, *, pollers: int) -> dict:
        sys.path.insert(0, str(Path(settings.BASE_DIR) / "agent"))
        from quotaportal_agent.client import Client  # the reference agent's own client

        stop = threading.Event()
        answered: list[float] = []
        lock = threading.Lock()

        def poll(i: int) -> None:
            client = Client(self.base, world["executor_token"], executor=f"{PREFIX}-poller-{i}", host="bench")
            while not stop.is_set():
                began = time.monotonic()
                work = client.work(world["environment_id"], TYPE, self.options["wait"])
                with lock:
                    answered.append(time.monotonic() - began)
                if work is None:
                    stop.wait(0.5)

        threads = [threading.Thread(target=poll, args=(i,), daemon=True) for i in range(pollers)]
        for thread in threads:
            thread.start()
        time.sleep(2 if pollers else 0)  # every poller inside its wait
        connections_waiting = self._web_connections() if pollers else None

        session = requests.Session()
        session.headers["Authorization"] = f"Token {world['executor_token']}"
        url = f"{self.base}/api/v1/service-environments/{world['environment_id']}/work/"
        latency = []
        for _ in range(self.options["calls"]):
            began = time.perf_counter()
            response = session.get(
                url, params={"instance_type": TYPE, "wait": 0, "executor": f"{PREFIX}-probe"}
            )
            latency.append((time.perf_counter() - began) * 1000)
            if response.status_code != 200 or response.json()["start"]:
                raise CommandError(f"work answered {response.status_code}: {response.text[:300]}")
        admin = requests.Session()
        admin.headers["Authorization"] = f"Token {world['admin_token']}"
        durations, walls = [], []
        for _ in range(self.options["passes"]):
            began = time.perf_counter()
            response = admin.post(f"{self.base}/api/v1/job-queues/{world['queue_id']}/schedule/")
            walls.append((time.perf_counter() - began) * 1000)
            if response.status_code != 200:
                raise CommandError(f"schedule answered {response.status_code}: {response.text[:300]}")
            durations.append(response.json()["duration_ms"])
        stop.set()
        for thread in threads:
            thread.join(timeout=self.options["wait"] + 15)
        return {
            "pollers": pollers,
            "work_wait0_ms": {
                "p50": round(percentile(latency, 0.5), 1),
                "p99": round(percentile(latency, 0.99), 1),
            },
            "pass_duration_ms": {
                "p50": round(percentile(durations, 0.5), 1),
                "p99": round(percentile(durations, 0.99), 1),
            },
            "pass_call_ms": {
                "p50": round(percentile(walls, 0.5), 1),
                "p99": round(percentile(walls, 0.99), 1),
            },
            "poller_answers": len(answered),
            "poller_answer_s": {
                "min": round(min(answered), 2) if answered else None,
                "max": round(max(answered), 2) if answered else None,
            },
            "db_connections_of_web_while_waiting": connections_waiting,
        }

    def _web_connections(self) -> int | None:
        if connection.vendor != "postgresql":
            return None
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [APP_NAME])
            return cursor.fetchone()[0]

    def _report(self, quiet: dict, busy: dict, cache_url: str) -> None:
        o = self.options
        write = self.stdout.write
        write(
            f"\nwork endpoint and passes, {o['running']} running + {o['pending']} pending jobs, gunicorn gthread "
            f"{o['web_workers']} x {o['threads']} threads, {connection.vendor}, cache {cache_url.split(':')[0]}"
        )
        for label, r in (("no pollers", quiet), (f"{busy['pollers']} pollers wait={o['wait']}", busy)):
            write(
                f"  {label:<22} work wait=0 p50 {r['work_wait0_ms']['p50']} ms p99 {r['work_wait0_ms']['p99']} ms; "
                f"pass duration_ms p50 {r['pass_duration_ms']['p50']} p99 {r['pass_duration_ms']['p99']} "
                f"(call p50 {r['pass_call_ms']['p50']} ms)"
            )
        write(
            f"  pollers: {busy['poller_answers']} answers, {busy['poller_answer_s']['min']} to "
            f"{busy['poller_answer_s']['max']} s each; the web server's database connections while they waited: "
            f"{busy['db_connections_of_web_while_waiting']}"
        )
        if o["json"]:
            Path(o["json"]).write_text(json.dumps({"options": o, "quiet": quiet, "busy": busy}, indent=2))
