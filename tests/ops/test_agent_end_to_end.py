"""End to end: gunicorn, a Celery worker and beat on PostgreSQL and Redis, and the reference agent
(`agent/quotaportal_agent`) running real processes (`tests/ops/e2e_job.py`).

What happened to the processes is read from the timestamps they wrote themselves, not from the database: a
victim that traps SIGTERM checkpoints and exits inside its grace period and its preemptor starts only after;
one that ignores SIGTERM is killed at the deadline; an agent killed with SIGKILL has its job lost after
`lease_seconds` and retried on a second agent, and when it comes back its stale reports are refused (409) and
it stops the orphan; the web server restarted under a running agent loses no report.

One stack (web, worker, beat) serves the module; each test makes its own environment (its own short
`stop_grace_seconds` and `lease_seconds`), agents and jobs, and stops them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from django.conf import settings
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token

from scheduling.models import (
    Event,
    EventKind,
    Job,
    JobAttempt,
    JobStatus,
    Membership,
    QuotaShare,
    ServiceEnvironment,
)
from tests.factories import (
    JobQueueFactory,
    MembershipFactory,
    ServiceEnvironmentFactory,
    TeamFactory,
    UserFactory,
    environment_with,
    share_with,
)
from tests.ops.support import (
    BASE_DIR,
    PYTHON,
    child_env,
    ops_broker_url,
    require_redis,
    start,
    stop,
    wait_for,
)

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

JOB_SCRIPT = str(Path(__file__).with_name("e2e_job.py"))
AGENT_DIR = str(BASE_DIR / "agent")


def halt(process: subprocess.Popen, grace: float = 3) -> None:
    """SIGTERM (unless grace is 0), then SIGKILL the process's group: the tests keep nothing of them."""
    if grace and process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=10)


def e2e_broker_url() -> str:
    """CELERY_BROKER_URL when it names a Redis database of its own (not CI's 0), else the ops tests' one."""
    url = settings.CELERY_BROKER_URL
    if url.startswith("redis://") and urlsplit(url).path.strip("/") not in ("", "0"):
        return url
    return ops_broker_url()


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Stack:
    """gunicorn (gthread: long-polls hold a thread each), one Celery worker and beat, on the test database."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        broker = e2e_broker_url()
        require_redis(broker)
        self.queue = f"e2e-{uuid.uuid4().hex[:8]}"
        self.env = child_env(
            CELERY_BROKER_URL=broker,
            # A queue and keys of its own: no worker of another run on this Redis database takes its passes.
            CELERY_QUEUE=self.queue,
            CACHE_KEY_PREFIX=self.queue,
            CACHE_URL=broker,  # the work-version key: a pass in the worker wakes a long-poll in the web server
            QUOTAPORTAL_AUTOPASS="1",  # reports and submissions ask for passes, through the worker
            PASS_INTERVAL_SECONDS="1",  # the beat's passes settle deadlines and leases
            PASS_COALESCE_SECONDS="0",  # no pass request waits on a key another run left in a shared Redis
            WORK_RECHECK_SECONDS="1",
            ALLOWED_HOSTS="127.0.0.1,localhost",
            HTTPS="0",
            QUOTAPORTAL_VAR_DIR=str(log_dir),
        )
        self.processes: dict[str, subprocess.Popen] = {}

    def start_web(self) -> None:
        argv = [PYTHON, "-m", "gunicorn", "quotaportal.wsgi:application", "--bind", f"127.0.0.1:{self.port}"]
        argv += ["--worker-class", "gthread", "--workers", "2", "--threads", "16", "--graceful-timeout", "2"]
        self.processes["web"] = start(argv, self.env, self.log_dir / "web.log")
        wait_for(self.web_ready, 60, "gunicorn answered /healthz", interval=0.2)

    def stop_web(self) -> None:
        stop(self.processes.pop("web"))

    def web_ready(self) -> bool:
        try:
            return requests.get(f"{self.base}/healthz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def start(self) -> None:
        celery = [PYTHON, "-m", "celery", "-A", "quotaportal"]
        self.processes["worker"] = start(
            [*celery, "worker", "--concurrency", "2", "-n", f"{self.queue}@%h", "--without-gossip"]
            + ["--without-mingle", "--without-heartbeat", "--loglevel", "WARNING"],
            self.env,
            self.log_dir / "worker.log",
        )
        self.processes["beat"] = start(
            [*celery, "beat", "--loglevel", "WARNING", "--schedule", str(self.log_dir / "beat-schedule")],
            self.env,
            self.log_dir / "beat.log",
        )
        self.start_web()

    def stop_all(self) -> None:
        """SIGTERM to all at once, SIGKILL to what is left 3 s later."""
        processes = [self.processes.pop(name) for name in list(self.processes)]
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        until = time.monotonic() + 3
        while time.monotonic() < until and any(process.poll() is None for process in processes):
            time.sleep(0.05)
        for process in processes:
            halt(process, grace=0)

    def tails(self) -> str:
        return "\n".join(
            f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}"
            for log in sorted(self.log_dir.glob("*.log"))
        )


@pytest.fixture
def stack(transactional_db, tmp_path):
    """A stack per test, set up after (so torn down before) the test database's flush: a pass of the worker
    or beat racing the flush's TRUNCATEs would deadlock it."""
    log_dir = tmp_path / "stack"
    log_dir.mkdir()
    running = Stack(log_dir)
    try:
        running.start()
        yield running
    finally:
        running.stop_all()


@dataclass
class World:
    """One environment with its queue, shares, type, a member and an executor account (tokens for both)."""

    stack: Stack
    tmp: Path
    environment: ServiceEnvironment
    queue_name: str
    type_name: str
    member_token: str
    executor_token: str
    agents: dict[str, subprocess.Popen] = field(default_factory=dict)
    patience: float = 30  # how long wait_status waits unless told

    @property
    def log(self) -> Path:
        return self.tmp / "jobs.log"

    def submit(self, share: str, count: int, mode: str, seconds: float, **fields) -> int:
        command = [PYTHON, JOB_SCRIPT, str(self.log), mode, str(seconds)]
        return self.submit_command(share, count, command, name=f"{mode}-{share}", **fields)

    def submit_command(
        self, share: str, count: int, command: list[str], env: dict | None = None, **fields
    ) -> int:
        body = {
            "name": f"{share}-{count}",
            "job_queue": self.queue_name,
            "quota_share": share,
            "instance_preferences": [{"instance_type": self.type_name, "instance_count": count}],
            "payload": {"command": command, "env": env or {}},
            **fields,
        }
        response = requests.post(
            f"{self.stack.base}/api/v1/jobs/",
            json=body,
            headers={"Authorization": f"Token {self.member_token}"},
            timeout=10,
        )
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def report(self, job_id: int, body: dict) -> requests.Response:
        return requests.post(
            f"{self.stack.base}/api/v1/jobs/{job_id}/report/",
            json=body,
            headers={"Authorization": f"Token {self.executor_token}"},
            timeout=10,
        )

    def cancel(self, job_id: int) -> None:
        response = requests.post(
            f"{self.stack.base}/api/v1/jobs/{job_id}/cancel/",
            headers={"Authorization": f"Token {self.member_token}"},
            timeout=10,
        )
        assert response.status_code == 200, response.text

    def work_dir(self, name: str) -> Path:
        return self.tmp / f"agent-{name}"

    def start_agent(self, name: str, slots: int) -> subprocess.Popen:
        argv = [PYTHON, "-m", "quotaportal_agent", "--url", self.stack.base, "--token", self.executor_token]
        argv += ["--environment", str(self.environment.pk), "--instance-type", self.type_name]
        argv += ["--slots", str(slots), "--work-dir", str(self.work_dir(name)), "--name", f"e2e-{name}"]
        argv += ["--heartbeat-seconds", "1", "--wait-seconds", "10", "--log-level", "INFO"]
        env = {**os.environ, "PYTHONPATH": AGENT_DIR, "PYTHONUNBUFFERED": "1"}
        self.agents[name] = start(argv, env, self.tmp / f"agent-{name}.log")
        return self.agents[name]

    def notes(self) -> list[tuple[float, int, int, str]]:
        """(time, job, attempt, what) as the job processes wrote them."""
        if not self.log.exists():
            return []
        rows = []
        for line in self.log.read_text().splitlines():
            moment, job, attempt, what = line.split(" ", 3)
            rows.append((float(moment), int(job), int(attempt), what))
        return rows

    def first(self, job: int, attempt: int, what: str) -> float | None:
        return next(
            (t for t, j, a, w in self.notes() if (j, a) == (job, attempt) and w.split(" ")[0] == what), None
        )

    def last(self, job: int, attempt: int, what: str) -> float | None:
        found = [t for t, j, a, w in self.notes() if (j, a) == (job, attempt) and w.split(" ")[0] == what]
        return found[-1] if found else None

    def wait_note(self, job: int, attempt: int, what: str, seconds: float = 30) -> float:
        return wait_for(
            lambda: self.first(job, attempt, what),
            seconds,
            f"job {job} attempt {attempt} wrote {what!r}\n{self.tails()}",
        )

    def wait_status(self, job: int, status: str, seconds: float | None = None) -> Job:
        return wait_for(
            lambda: (found := Job.objects.get(pk=job)).status == status and found,
            seconds or self.patience,
            f"job {job} {status} (it is {Job.objects.get(pk=job).status})\n{self.tails()}",
        )

    def tails(self) -> str:
        own = "\n".join(
            f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}"
            for log in sorted(self.tmp.glob("*.log"))
        )
        return own + "\n" + self.stack.tails()

    def cleanup(self) -> None:
        for process in self.agents.values():
            halt(process, grace=0)  # its clean shutdown would wait for its long-poll: nothing to keep here
        # The jobs' processes outlive their agents on purpose (a restarted agent adopts them): end them here.
        for _, _, _, what in self.notes():
            if what.startswith("start "):
                pgid = int(what.split("pgid=")[1].split()[0])
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def external_world(
    tag: str,
    type_name: str,
    *,
    grace: int,
    lease: int,
    shares: dict,
    deadline: int | None = None,
    capacity: int | None = None,
) -> dict:
    """An external environment `tag-env` with its queue `tag`, one instance type (capacity: the sum of the
    shares' limits unless given), a team's shares (`shares`: name -> (strategy, limit)), a member and an
    executor account: the fields a World is made of, tokens for both accounts among them."""
    extra = {} if deadline is None else {"start_deadline_seconds": deadline}
    environment = ServiceEnvironmentFactory(
        name=f"{tag}-env",
        executor=ServiceEnvironment.Executor.EXTERNAL,
        stop_grace_seconds=grace,
        lease_seconds=lease,
        **extra,
    )
    queue = JobQueueFactory(name=tag, service_environment=environment)
    environment_with(queue, {type_name: capacity or sum(limit for _, limit in shares.values())})
    team = TeamFactory(name=tag, slug=tag)
    for name, (strategy, limit) in shares.items():
        share_with(queue, name, {type_name: limit}, team=team, strategy=strategy)
    member = UserFactory(username=f"{tag}-member")
    MembershipFactory(team=team, user=member, role=Membership.Role.MEMBER)
    executor = UserFactory(username=f"{tag}-executor")
    executor.user_permissions.add(Permission.objects.get(codename="report_job_status"))
    environment.executor_accounts.add(executor)
    return {
        "environment": environment,
        "queue_name": tag,
        "type_name": type_name,
        "member_token": Token.objects.create(user=member).key,
        "executor_token": Token.objects.create(user=executor).key,
    }


@pytest.fixture
def make_world(stack, tmp_path):
    made: list[World] = []

    def make(tag: str, *, grace: int, lease: int, shares: dict[str, tuple[str, int]]) -> World:
        """`shares`: name -> (strategy, limit); the environment's capacity is the sum of the limits."""
        world = World(
            stack=stack,
            tmp=tmp_path,
            **external_world(tag, f"e2e.{tag}", grace=grace, lease=lease, shares=shares),
        )
        made.append(world)
        return world

    yield make
    for world in made:
        world.cleanup()


def kinds(job: int) -> list[str]:
    return list(Event.objects.filter(job_id=job).order_by("id").values_list("kind", flat=True))


def test_a_reclaimed_victim_checkpoints_inside_its_grace_and_the_preemptor_starts_only_after(make_world):
    grace = 8
    world = make_world(
        "reclaim",
        grace=grace,
        lease=30,
        shares={"owner": (QuotaShare.Strategy.LEND, 1), "borrower": (QuotaShare.Strategy.LEND_AND_BORROW, 1)},
    )
    world.start_agent("a", slots=2)
    victim = world.submit("borrower", 2, "graceful", 120)  # 1 of its own, 1 borrowed from owner
    world.wait_note(victim, 1, "start")

    preemptor = world.submit("owner", 1, "graceful", 1)  # owner reclaims what it lent
    preemptor_started = world.wait_note(preemptor, 1, "start")

    sigterm = world.first(victim, 1, "sigterm")
    exited = world.first(victim, 1, "exit")
    assert sigterm is not None and exited is not None, world.tails()
    assert sigterm < exited < sigterm + grace  # it checkpointed (1 s) and left inside its grace period
    assert exited <= preemptor_started  # the preemptor's process started only once the victim's had ended
    # ... and it did not wait for the deadline: the agent's STOPPED report freed the capacity at once.
    assert preemptor_started < sigterm + grace, (sigterm, exited, preemptor_started)
    assert world.last(victim, 1, "tick") <= exited
    checkpoint = world.work_dir("a") / "jobs" / str(victim) / "checkpoint"
    assert checkpoint.read_text().startswith(f"job {victim} attempt 1 at ")

    # The victim resumes (attempt 2, in the same directory, beside its checkpoint) once the preemptor is done.
    resumed = world.wait_note(victim, 2, "start", seconds=30)
    assert resumed >= world.first(preemptor, 1, "done")
    assert world.wait_status(preemptor, JobStatus.SUCCEEDED)
    victim_kinds = kinds(victim)
    for kind in (EventKind.PREEMPTED_RECLAIM, EventKind.STOPPING, EventKind.STOPPED):
        assert kind in victim_kinds, victim_kinds
    first = JobAttempt.objects.get(job_id=victim, attempt=1)
    assert first.exit_code == 0 and first.stopped_at is not None


def test_a_victim_that_ignores_sigterm_is_killed_at_the_deadline(make_world):
    grace = 3
    world = make_world("stubborn", grace=grace, lease=30, shares={"only": (QuotaShare.Strategy.RESERVE, 1)})
    world.start_agent("a", slots=1)
    stubborn = world.submit("only", 1, "ignore", 120)
    world.wait_note(stubborn, 1, "start")
    world.wait_status(stubborn, JobStatus.RUNNING)

    world.cancel(stubborn)
    sigterm = world.wait_note(stubborn, 1, "sigterm", seconds=15)
    world.wait_status(stubborn, JobStatus.CANCELLED, seconds=grace + 15)
    wait_for(
        lambda: JobAttempt.objects.get(job_id=stubborn, attempt=1).exit_code is not None,
        10,
        "the STOPPED report with the exit code",
    )

    time.sleep(0.5)  # any tick after the kill would be there by now
    last_tick = world.last(stubborn, 1, "tick")
    # It went on after SIGTERM (ignored it) until the deadline, when SIGKILL ended it (no exit, no done).
    assert sigterm + grace - 0.5 <= last_tick <= sigterm + grace + 1.5, (sigterm, last_tick)
    assert world.first(stubborn, 1, "exit") is None and world.first(stubborn, 1, "done") is None
    assert JobAttempt.objects.get(job_id=stubborn, attempt=1).exit_code == 128 + signal.SIGKILL
    assert EventKind.STOPPING in kinds(stubborn)


def test_an_agent_killed_loses_its_job_after_the_lease_and_its_stale_reports_are_refused(make_world):
    lease = 10
    world = make_world("lost", grace=4, lease=lease, shares={"only": (QuotaShare.Strategy.RESERVE, 1)})
    agent_a = world.start_agent("a", slots=1)
    job = world.submit("only", 1, "graceful", 300, retry_attempts=2)
    world.wait_note(job, 1, "start")
    world.wait_status(job, JobStatus.RUNNING)
    world.start_agent("b", slots=1)  # idle: the environment's one instance is taken

    agent_a.kill()  # SIGKILL the agent alone: its job's process runs on, as on a host cut off the network
    killed = time.time()
    agent_a.wait(timeout=10)

    retried = world.wait_note(job, 2, "start", seconds=lease + 25)
    assert retried - killed >= lease - 1.5  # the last heartbeat was at most 1 s before the kill
    (start_line,) = [w for t, j, a, w in world.notes() if (j, a) == (job, 2) and w.startswith("start ")]
    assert f"cwd={world.work_dir('b')}" in start_line  # on the second agent
    running = world.wait_status(job, JobStatus.RUNNING)
    assert running.attempt == 2 and running.failed_attempts == 1
    lost = Event.objects.get(job_id=job, kind=EventKind.EXECUTOR_LOST)
    assert "EXECUTOR_LOST" in lost.message or "no report" in lost.message

    # A late report about attempt 1 is refused and never touches attempt 2.
    stale = world.report(job, {"attempt": 1, "status": "FAILED", "exit_code": 1})
    assert stale.status_code == 409 and "stale" in stale.json()["detail"]
    assert Job.objects.get(pk=job).status == JobStatus.RUNNING

    # Agent a comes back: it adopts its orphan, heartbeats attempt 1, is refused (409) and stops it.
    world.start_agent("a", slots=1)
    world.wait_note(job, 1, "sigterm", seconds=20)
    world.wait_note(job, 1, "exit", seconds=10)
    assert (
        "409" in (world.tmp / "agent-a.log").read_text() or "stale" in (world.tmp / "agent-a.log").read_text()
    )
    time.sleep(1.5)
    current = Job.objects.get(pk=job)
    assert (current.status, current.attempt) == (JobStatus.RUNNING, 2)
    assert world.first(job, 2, "sigterm") is None
    assert world.last(job, 2, "tick") > world.first(job, 1, "exit")  # attempt 2 runs on


def test_the_web_server_restarted_under_a_running_agent_loses_nothing(make_world, stack):
    world = make_world("restart", grace=5, lease=60, shares={"only": (QuotaShare.Strategy.RESERVE, 1)})
    world.start_agent("a", slots=1)
    job = world.submit("only", 1, "graceful", 5)
    world.wait_note(job, 1, "start")
    world.wait_status(job, JobStatus.RUNNING)

    stack.stop_web()
    down = time.time()
    try:
        finished = world.wait_note(job, 1, "done", seconds=15)  # the job ends while the server is away
        time.sleep(1)
    finally:
        stack.start_web()
    up = time.time()

    done = world.wait_status(job, JobStatus.SUCCEEDED, seconds=45)
    assert down < finished < up
    assert any(down < t < up for t, j, a, w in world.notes() if j == job and w == "tick")  # it ran on
    assert done.attempt == 1 and done.failed_attempts == 0
    (attempt,) = JobAttempt.objects.filter(job_id=job)
    assert attempt.exit_code == 0 and "done" in attempt.output_tail
    job_kinds = kinds(job)
    assert job_kinds.count(EventKind.STARTED) == 1 and job_kinds.count(EventKind.SUCCEEDED) == 1
    assert EventKind.EXECUTOR_LOST not in job_kinds and EventKind.FAILED not in job_kinds
    assert "waits for the server" in (world.tmp / "agent-a.log").read_text()  # it did queue and retry
