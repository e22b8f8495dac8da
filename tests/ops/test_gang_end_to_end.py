"""End to end, jobs on several hosts (multi-host.md): gunicorn, a Celery worker and beat on PostgreSQL and Redis, and
several real agents with their own names, work directories and loopback addresses (127.0.0.2-127.0.0.4), each
running its rank of `tests/ops/gang_check.py` as a real process.

The ranks meet only if the roster is right (rank 0 listens on the main address and port it was given and checks
every peer's source address against the roster), and what happened to the processes is read from the lines and
files they wrote themselves.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from scheduling.models import (
    Event,
    EventKind,
    Executor,
    Job,
    JobStatus,
    JobTask,
    QuotaShare,
    TaskState,
)
from tests.ops.support import PYTHON, start, wait_for
from tests.ops.test_agent_end_to_end import AGENT_DIR, JOB_SCRIPT, Stack, World, external_world, halt, kinds

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

GANG_SCRIPT = str(Path(__file__).with_name("gang_check.py"))
ADDRESSES = {"a": "127.0.0.2", "b": "127.0.0.3", "c": "127.0.0.4"}
# Each agent's main ports, inside the range these tests may use.
PORTS = {"a": "18210-18219", "b": "18220-18229", "c": "18230-18239", "old": "18240-18249"}


@pytest.fixture
def stack(transactional_db, tmp_path):
    """As the single-host end-to-end tests' stack, with a short backoff after a start timeout."""
    log_dir = tmp_path / "stack"
    log_dir.mkdir()
    running = Stack(log_dir)
    running.env["START_BACKOFF_BASE_SECONDS"] = "4"
    try:
        running.start()
        yield running
    finally:
        running.stop_all()


@dataclass
class Fleet(World):
    """One external environment, its queue and shares, a member and an executor account, and its agents, which
    run the ranks of `gang_check.py`."""

    patience: float = 40

    @property
    def log(self) -> Path:
        return self.tmp / "gang.log"

    def submit(
        self, share: str, count: int, mode: str, seconds: float, env: dict | None = None, **fields
    ) -> int:
        command = [PYTHON, GANG_SCRIPT, str(self.log), mode, str(seconds)]
        return self.submit_command(share, count, command, env, name=f"{mode}-{share}-{count}", **fields)

    def start_agent(self, name: str, slots: int = 1, *extra: str) -> subprocess.Popen:
        argv = [PYTHON, "-m", "quotaportal_agent", "--url", self.stack.base, "--token", self.executor_token]
        argv += ["--environment", str(self.environment.pk), "--instance-type", self.type_name]
        argv += ["--slots", str(slots), "--work-dir", str(self.work_dir(name)), "--name", f"gang-{name}"]
        argv += ["--heartbeat-seconds", "1", "--wait-seconds", "20", "--port-range", PORTS[name]]
        if name in ADDRESSES:
            argv += ["--advertise-address", ADDRESSES[name]]
        argv += list(extra)
        env = {**os.environ, "PYTHONPATH": AGENT_DIR, "PYTHONUNBUFFERED": "1"}
        self.agents[name] = start(argv, env, self.tmp / f"agent-{name}.log")
        return self.agents[name]

    def notes(self) -> list[tuple[float, int, int, int, str]]:
        """(time, job, attempt, rank, what) as the ranks wrote them."""
        if not self.log.exists():
            return []
        rows = []
        for line in self.log.read_text().splitlines():
            moment, job, attempt, rank, what = line.split(" ", 4)
            rows.append((float(moment), int(job), int(attempt), int(rank), what))
        return rows

    def times(self, job: int, attempt: int, what: str) -> dict[int, float]:
        """rank -> the first time it wrote `what` in this attempt."""
        found: dict[int, float] = {}
        for moment, j, a, rank, said in self.notes():
            if (j, a) == (job, attempt) and said.split(" ")[0] == what and rank not in found:
                found[rank] = moment
        return found

    def wait_notes(
        self, job: int, attempt: int, what: str, ranks: int, seconds: float = 40
    ) -> dict[int, float]:
        return wait_for(
            lambda: (found := self.times(job, attempt, what)) and len(found) >= ranks and found,
            seconds,
            f"job {job} attempt {attempt}: {ranks} rank(s) wrote {what!r}\n{self.tails()}",
        )

    def cleanup(self) -> None:
        for process in self.agents.values():
            halt(process, grace=0)
        for *_, what in self.notes():
            if what.startswith("start ") and "pgid=" in what:
                try:
                    os.killpg(int(what.split("pgid=")[1].split()[0]), signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture
def make_fleet(stack, tmp_path):
    made: list[Fleet] = []

    def make(
        tag: str, *, grace: int, lease: int, deadline: int, shares: dict, capacity: int | None = None
    ) -> Fleet:
        fields = external_world(
            tag, f"gang.{tag}", grace=grace, lease=lease, shares=shares, deadline=deadline, capacity=capacity
        )
        fleet = Fleet(stack=stack, tmp=tmp_path, **fields)
        made.append(fleet)
        return fleet

    yield make
    for fleet in made:
        fleet.cleanup()


def met_files(fleet: Fleet, job: int) -> dict[int, dict]:
    """rank -> what it wrote in gang-check-<rank>.json, from every agent's job directory."""
    found = {}
    for name in ADDRESSES:
        for path in (fleet.work_dir(name) / "jobs" / str(job)).glob("gang-check-*.json"):
            data = json.loads(path.read_text())
            found[data["rank"]] = {**data, "agent": name}
    return found


def test_two_and_three_host_jobs_meet_through_the_roster_and_succeed(make_fleet):
    fleet = make_fleet(
        "meet", grace=5, lease=30, deadline=60, shares={"only": (QuotaShare.Strategy.RESERVE, 3)}
    )
    for name in ADDRESSES:
        fleet.start_agent(name)

    two = fleet.submit("only", 2, "run", 1)
    fleet.wait_status(two, JobStatus.SUCCEEDED)
    three = fleet.submit("only", 3, "run", 1)
    done = fleet.wait_status(three, JobStatus.SUCCEEDED)

    for job, size in ((two, 2), (three, 3)):
        met = met_files(fleet, job)
        assert sorted(met) == list(range(size)), fleet.tails()
        tasks = {t.rank: t for t in JobTask.objects.filter(job_id=job)}
        assert {rank: t.state for rank, t in tasks.items()} == dict.fromkeys(range(size), TaskState.SUCCEEDED)
        for rank, seen in met.items():
            # Each rank ran on the agent that claimed it, from that agent's own address, and met all the others.
            assert ADDRESSES[seen["agent"]] == tasks[rank].address == seen["hosts"][rank]
            assert seen["sum"] == sum(range(size)) and seen["world_size"] == size
            assert seen["main"] == [tasks[0].address, tasks[0].port]
            assert tasks[rank].exit_code == 0
        assert len({seen["agent"] for seen in met.values()}) == size  # one host per rank
        # Nothing started before the last instance was claimed.
        last_claim = max(t.claimed_at.timestamp() for t in tasks.values())
        assert min(fleet.times(job, 1, "start").values()) >= last_claim - 0.05
    assert done.attempt == 1 and kinds(three).count(EventKind.STARTED) == 1


def test_a_rank_that_exits_1_stops_every_other_within_the_grace_and_the_job_fails_naming_it(make_fleet):
    grace = 6
    fleet = make_fleet(
        "die", grace=grace, lease=30, deadline=60, shares={"only": (QuotaShare.Strategy.RESERVE, 3)}
    )
    for name in ADDRESSES:
        fleet.start_agent(name)
    job = fleet.submit("only", 3, "die", 0, env={"GANG_CHECK_DIE_RANK": "1"})

    died = fleet.wait_notes(job, 1, "dying", 1)[1]
    sigterms = fleet.wait_notes(job, 1, "sigterm", 2, seconds=grace + 10)
    exits = fleet.wait_notes(job, 1, "exit", 2, seconds=grace + 10)
    failed = fleet.wait_status(job, JobStatus.FAILED, seconds=grace + 15)

    assert sorted(sigterms) == [0, 2]
    for rank in (0, 2):
        assert died < sigterms[rank] < died + 5  # stopped by the server, not left blocked
        assert exits[rank] < sigterms[rank] + grace  # and they checkpointed inside the grace period
    assert "rank 1" in failed.status_reason and failed.failed_attempts == 1
    failure = Event.objects.filter(job_id=job, kind=EventKind.FAILED).first()
    assert failure is not None and "rank 1" in failure.message
    states = dict(JobTask.objects.filter(job_id=job).values_list("rank", "state"))
    assert states == {0: TaskState.STOPPED, 1: TaskState.FAILED, 2: TaskState.STOPPED}
    time.sleep(1)
    ticks = [t for t, j, a, rank, w in fleet.notes() if j == job and w == "tick"]
    assert max(ticks) < max(exits.values())  # nothing of the gang runs on


def test_an_agent_killed_mid_run_has_its_task_lost_and_the_survivors_stopped(make_fleet):
    lease = 10
    fleet = make_fleet(
        "lost", grace=5, lease=lease, deadline=60, shares={"only": (QuotaShare.Strategy.RESERVE, 2)}
    )
    fleet.start_agent("a")
    agent_b = fleet.start_agent("b")
    job = fleet.submit("only", 2, "run", 300)
    fleet.wait_notes(job, 1, "met", 2)
    fleet.wait_status(job, JobStatus.RUNNING)

    lost_rank = JobTask.objects.get(job_id=job, executor_name="gang-b").rank
    survivor = 1 - lost_rank
    agent_b.kill()  # SIGKILL the agent: its rank runs on, cut off from the server
    killed = time.time()
    agent_b.wait(timeout=10)

    sigterm = fleet.wait_notes(job, 1, "sigterm", 1, seconds=lease + 20)
    assert list(sigterm) == [survivor]  # only the survivor hears from the server
    assert sigterm[survivor] - killed >= lease - 1.5  # after the lease, not before
    ended = fleet.wait_status(job, JobStatus.FAILED, seconds=20)
    assert "EXECUTOR_LOST" in ended.status_reason and f"rank {lost_rank} on gang-b" in ended.status_reason
    lost = Event.objects.get(job_id=job, kind=EventKind.TASK_LOST)
    assert f"rank {lost_rank}" in lost.message
    states = dict(JobTask.objects.filter(job_id=job).values_list("rank", "state"))
    assert states == {survivor: TaskState.STOPPED, lost_rank: TaskState.LOST}
    assert fleet.times(job, 1, "exit")[survivor] < sigterm[survivor] + 5


def test_a_reclaimed_gang_checkpoints_on_every_host_and_the_preemptor_starts_only_after_the_last_exit(
    make_fleet,
):
    grace = 8
    fleet = make_fleet(
        "reclaim",
        grace=grace,
        lease=30,
        deadline=60,
        shares={"owner": (QuotaShare.Strategy.LEND, 2), "borrower": (QuotaShare.Strategy.LEND_AND_BORROW, 1)},
    )
    for name in ADDRESSES:
        fleet.start_agent(name)
    victim = fleet.submit("borrower", 3, "run", 300)  # 1 of its own, 2 borrowed from owner
    fleet.wait_notes(victim, 1, "met", 3)
    fleet.wait_status(victim, JobStatus.RUNNING)

    preemptor = fleet.submit("owner", 2, "run", 1)
    started = fleet.wait_notes(preemptor, 1, "start", 2, seconds=grace + 20)

    sigterms = fleet.times(victim, 1, "sigterm")
    exits = fleet.times(victim, 1, "exit")
    assert sorted(sigterms) == sorted(exits) == [0, 1, 2], fleet.tails()
    last_exit = max(exits.values())
    assert last_exit - min(sigterms.values()) >= 1.9  # rank 2 took 2 s to checkpoint, rank 0 one
    assert min(started.values()) >= last_exit  # the preemptor waited for every host
    assert min(started.values()) < min(sigterms.values()) + grace  # ... and not for the deadline
    for rank, name in enumerate(ADDRESSES):
        assert any(
            fleet.work_dir(agent).joinpath("jobs", str(victim), f"checkpoint-{rank}").exists()
            for agent in ADDRESSES
        ), name
    assert EventKind.PREEMPTED_RECLAIM in kinds(victim)
    fleet.wait_status(preemptor, JobStatus.SUCCEEDED)


def test_a_gang_that_cannot_gather_times_out_frees_its_capacity_and_is_placed_again_later(make_fleet):
    deadline = 8
    fleet = make_fleet(
        "gather",
        grace=5,
        lease=30,
        deadline=deadline,
        shares={"only": (QuotaShare.Strategy.RESERVE, 3)},
    )
    fleet.start_agent("a")
    fleet.start_agent("b")  # two hosts for a job of three
    gang = fleet.submit("only", 3, "run", 1)
    wait_for(
        lambda: JobTask.objects.filter(job_id=gang, state=TaskState.WAITING).count() == 2, 20, "2 claims"
    )
    small = fleet.submit("only", 1, "run", 1)  # waits behind it: the gang holds every instance

    timed_out = fleet.wait_status(gang, JobStatus.RUNNABLE, seconds=deadline + 10)
    assert "START_TIMEOUT" in timed_out.status_reason and "rank 2" in timed_out.status_reason
    assert timed_out.failed_attempts == 0 and timed_out.start_timeouts == 1
    assert fleet.times(gang, 1, "start") == {}  # nothing of it ever ran
    assert EventKind.START_TIMEOUT in kinds(gang)
    # Its capacity went to the job waiting behind it, on a host whose claim was released.
    fleet.wait_status(small, JobStatus.SUCCEEDED, seconds=20)

    fleet.start_agent("c")  # a third host comes: after its backoff the gang is placed again and runs
    done = fleet.wait_status(gang, JobStatus.SUCCEEDED, seconds=40)
    assert done.attempt >= 2 and sorted(met_files(fleet, gang)) == [0, 1, 2]
    placed_again = Event.objects.filter(job_id=gang, kind=EventKind.ADMITTED).order_by("id")[1].created_at
    timeout_at = Event.objects.get(job_id=gang, kind=EventKind.START_TIMEOUT).created_at
    assert (placed_again - timeout_at).total_seconds() >= 3.5  # not before its backoff (4 s)


def test_an_agent_that_takes_only_whole_jobs_still_runs_them_and_a_freed_slot_is_offered_at_once(make_fleet):
    fleet = make_fleet(
        "old", grace=5, lease=30, deadline=60, shares={"only": (QuotaShare.Strategy.RESERVE, 2)}
    )
    fleet.start_agent("old", 2, "--whole-jobs-only")
    lines = fleet.tmp / "e2e.log"
    whole = submit_plain(fleet, lines, 1, count=2)
    fleet.wait_status(whole, JobStatus.SUCCEEDED)
    # Its two instances' GPUs, 8 each (the instance type's gpu_count, which the start entry carries).
    devices = ",".join(map(str, range(16)))
    assert f"devices={devices} " in next(line for line in lines.read_text().splitlines() if " start " in line)
    assert not JobTask.objects.filter(job_id=whole).exists()  # taken whole, as before tasks
    old = Executor.objects.get(name="gang-old")
    assert old.jobs_taken == 1 and not old.gang_capable
    halt(fleet.agents.pop("old"), grace=0)

    # A task-taking agent with one slot and a 20 s long-poll: the second job is placed at once but the agent is
    # busy; it is claimed within a second of the slot freeing, not at the end of the poll in flight.
    fleet.start_agent("a", 1)
    first = submit_plain(fleet, lines, 2)
    wait_for(lambda: Job.objects.get(pk=first).status == JobStatus.RUNNING, 30, "first running")
    second = submit_plain(fleet, lines, 1)
    fleet.wait_status(second, JobStatus.SUCCEEDED, seconds=30)
    done = note_time(lines, first, "done")
    started = note_time(lines, second, "start")
    assert 0 < started - done < 2.0, (done, started)


def submit_plain(fleet: Fleet, lines: Path, seconds: float, count: int = 1) -> int:
    import requests

    response = requests.post(
        f"{fleet.stack.base}/api/v1/jobs/",
        json={
            "name": "plain",
            "job_queue": fleet.queue_name,
            "quota_share": "only",
            "instance_preferences": [{"instance_type": fleet.type_name, "instance_count": count}],
            "payload": {"command": [PYTHON, JOB_SCRIPT, str(lines), "run", str(seconds)]},
        },
        headers={"Authorization": f"Token {fleet.member_token}"},
        timeout=10,
    )
    assert response.status_code == 201, response.text
    return response.json()["id"]


def note_time(lines: Path, job: int, what: str) -> float:
    for line in lines.read_text().splitlines():
        moment, j, _, said = line.split(" ", 3)
        if int(j) == job and said.split(" ")[0] == what:
            return float(moment)
    raise AssertionError(f"job {job} never wrote {what}")


def preempted_training_resumes_and_converges(make_fleet, tag: str, command: list[str], steps: int) -> None:
    """A training job on two hosts is reclaimed halfway: rank 0 checkpoints on SIGTERM, and the next attempt
    resumes from that step and ends with the same weights on both hosts, close to y = 3x + 2."""
    fleet = make_fleet(
        tag,
        grace=20,
        lease=30,
        deadline=120,
        shares={"owner": (QuotaShare.Strategy.LEND, 1), "borrower": (QuotaShare.Strategy.LEND_AND_BORROW, 1)},
    )
    for name in ("a", "b"):
        fleet.start_agent(name, 1, "--gpus-per-instance", "0")
    checkpoints = fleet.tmp / "checkpoints"
    env = {"TRAIN_STEPS": str(steps), "TRAIN_STEP_SECONDS": "0.02", "CHECKPOINT_DIR": str(checkpoints)}
    job = fleet.submit_command("borrower", 2, command, env)
    fleet.wait_status(job, JobStatus.RUNNING, seconds=60)

    def stepped() -> bool:  # some steps in (a framework may take seconds to start)
        logs = [
            p
            for name in ("a", "b")
            for p in (fleet.work_dir(name) / "jobs" / str(job)).glob("attempt-1*.log")
        ]
        return any("step 100" in p.read_text(errors="replace") for p in logs)

    wait_for(stepped, 60, f"job {job} took 100 steps\n{fleet.tails()}")

    preemptor = submit_plain_to(fleet, "owner", 1)
    fleet.wait_status(preemptor, JobStatus.SUCCEEDED, seconds=60)
    done = fleet.wait_status(job, JobStatus.SUCCEEDED, seconds=120)

    assert done.attempt == 2 and EventKind.PREEMPTED_RECLAIM in kinds(job)
    results = []
    for name in ("a", "b"):
        results += [
            json.loads(p.read_text())
            for p in (fleet.work_dir(name) / "jobs" / str(job)).glob("result-*.json")
        ]
    assert sorted(r["rank"] for r in results) == [0, 1], fleet.tails()
    assert all(0 < r["resumed_from"] < steps for r in results), (
        results
    )  # the second attempt went on from the first
    assert (
        len({(round(r["weight"], 6), round(r["bias"], 6)) for r in results}) == 1
    )  # every rank took every step
    assert abs(results[0]["weight"] - 3) < 0.1 and abs(results[0]["bias"] - 2) < 0.1, results
    assert any(checkpoints.iterdir())


def submit_plain_to(fleet: Fleet, share: str, count: int) -> int:
    command = [PYTHON, JOB_SCRIPT, str(fleet.tmp / "e2e.log"), "run", "1"]
    return fleet.submit_command(share, count, command)


def test_a_standard_library_training_job_on_two_hosts_checkpoints_when_reclaimed_and_resumes(make_fleet):
    example = str(Path(AGENT_DIR) / "examples" / "train_hosts.py")
    preempted_training_resumes_and_converges(make_fleet, "hosts", [PYTHON, example], steps=400)
