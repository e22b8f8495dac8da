"""The agent's part of jobs on several hosts: a claimed task holds its slots and waits for the roster, starts
with the variables torch.distributed, torchrun, SageMaker and AWS Batch read, and gives its slots back when
the server ends the claim. The agent's main loop is driven by hand here (no poller), with a client that only
records; the processes are real."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from quotaportal_agent import gang
from quotaportal_agent.agent import Agent, Config
from quotaportal_agent.client import Delivery, ReportOutcome
from quotaportal_agent.state import Report

ROSTER = {
    "main_address": "127.0.0.2",
    "main_port": 18250,
    "world_size": 2,
    "tasks": [
        {"rank": 0, "address": "127.0.0.2", "instances": 1, "executor": "a"},
        {"rank": 1, "address": "127.0.0.3", "instances": 1, "executor": "b"},
    ],
}


class Recorder:
    """A client that answers nothing: the tests read the agent's outbox."""

    def offer(self, environment_id: int, free_slots: int) -> bool:
        return True


@pytest.fixture
def agent(tmp_path):
    (tmp_path / "work").mkdir()
    config = Config(
        url="http://127.0.0.1:9",
        token="t",
        environment_id=1,
        instance_type="ml.p5.48xlarge",
        slots=2,
        work_dir=tmp_path / "work",
        state_file=tmp_path / "work" / "state.json",
        heartbeat_seconds=0.2,
    )
    made = Agent(config, client=Recorder())
    yield made
    for job in made.state.jobs.values():
        if job.pid:
            try:
                os.killpg(job.pid, signal.SIGKILL)
            except OSError:
                pass


def entry(job_id: int, task: int, roster=None, **payload_env) -> dict:
    dump = "import json, os; json.dump(dict(os.environ), open(os.environ['OUT'], 'w'))"
    return {
        "id": job_id,
        "name": "train",
        "attempt": 1,
        "instance_type": "ml.p5.48xlarge",
        "instance_count": 2,
        "training_plan": None,
        "payload": {"command": [sys.executable, "-c", dump], "env": payload_env},
        "stop_grace_seconds": 5,
        "lease_seconds": 60,
        "task": task,
        "task_instances": 1,
        "gpus_per_instance": 8,
        "start_deadline": "2030-01-01T00:00:00Z",
        "roster": roster,
    }


def outbox(agent: Agent) -> list[dict]:
    return [report.body for report in agent.state.outbox]


def wait_for(path: Path) -> dict:
    until = time.monotonic() + 10
    while time.monotonic() < until:
        if path.exists() and path.stat().st_size:
            return json.loads(path.read_text())
        time.sleep(0.02)
    raise AssertionError(f"{path} never written")


def test_a_claimed_task_holds_its_slots_and_starts_only_when_the_roster_comes(agent, tmp_path):
    seen = tmp_path / "env.json"
    agent.handle("work", {"start": [entry(7, 1, OUT=str(seen), MASTER_PORT="19999")], "stop": []})
    job = agent.state.jobs["7:1:1"]
    assert job.waiting and job.pid is None and agent.free_count() == 1
    assert outbox(agent)[-1]["status"] == "STARTING" and outbox(agent)[-1]["task"] == 1
    time.sleep(0.25)
    agent.tick(0)  # a waiting task's heartbeat says STARTING, renewing its lease
    assert [body["status"] for body in outbox(agent)] == ["STARTING"]  # not while one waits in the outbox
    agent.state.outbox.clear()
    time.sleep(0.25)
    agent.tick(0)
    assert [(body["status"], body["task"]) for body in outbox(agent)] == [("STARTING", 1)]

    agent.handle(
        "work", {"start": [], "stop": [], "go": [{"id": 7, "attempt": 1, "task": 1, "roster": ROSTER}]}
    )
    env = wait_for(seen)
    assert not job.waiting and job.pid is not None
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.2", "19999")  # the payload's own wins
    assert (env["WORLD_SIZE"], env["RANK"], env["NODE_RANK"], env["LOCAL_RANK"]) == ("2", "1", "1", "0")
    assert (env["PET_NNODES"], env["PET_NODE_RANK"], env["PET_MASTER_ADDR"]) == ("2", "1", "127.0.0.2")
    assert env["PET_NPROC_PER_NODE"] == "8" and env["PET_RDZV_ID"] == "qp-7-1"
    assert json.loads(env["SM_HOSTS"]) == ["127.0.0.2", "127.0.0.3"] and env["SM_CURRENT_HOST"] == "127.0.0.3"
    assert env["AWS_BATCH_JOB_NODE_INDEX"] == "1"
    assert env["AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"] == "127.0.0.2"
    assert env["QUOTAPORTAL_TASK"] == "1" and env["QUOTAPORTAL_INSTANCE_COUNT"] == "2"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"  # the 8 GPUs of its one instance (slot 0)
    resource = json.loads(
        (Path(env["SAGEMAKER_BASE_DIR"]) / "input" / "config" / "resourceconfig.json").read_text()
    )
    assert resource["current_host"] == "127.0.0.3" and resource["hosts"] == ["127.0.0.2", "127.0.0.3"]
    assert json.loads(Path(env["QUOTAPORTAL_ROSTER_FILE"]).read_text()) == ROSTER
    assert [(b["status"], b["task"]) for b in outbox(agent)][-1] == ("RUNNING", 1)


def test_a_waiting_task_gives_its_slots_back_when_stopped_or_refused(agent):
    agent.handle("work", {"start": [entry(8, 0), entry(9, 1)], "stop": []})
    assert agent.free_count() == 0
    agent.handle("work", {"start": [], "stop": [{"id": 8, "attempt": 1, "task": 0, "deadline": None}]})
    assert "8:1" not in agent.state.jobs and agent.free_count() == 1
    assert (outbox(agent)[-1]["status"], outbox(agent)[-1]["task"]) == ("STOPPED", 0)
    # The server refused a heartbeat of the other (its claim ended, and the stop was missed): its slot is free.
    refused = Report(seq=99, job_id=9, body={"attempt": 1, "status": "STARTING", "task": 1})
    agent.handle("refused", (refused, ReportOutcome(Delivery.CONFLICT, "rank 1 is released")))
    assert agent.state.jobs == {} and agent.free_count() == 2


def test_a_task_whose_slots_are_not_free_is_given_back_not_failed(agent):
    agent.handle("work", {"start": [entry(10, 0), entry(11, 0)], "stop": []})
    too_many = {**entry(12, 0), "task_instances": 1}
    agent.handle("work", {"start": [too_many], "stop": []})
    assert outbox(agent)[-1]["status"] == "STOPPED" and outbox(agent)[-1]["task"] == 0


def test_a_network_interface_names_the_transport_for_nccl_gloo_and_sagemaker(tmp_path):
    env = gang.task_environment(
        job_id=1,
        attempt=1,
        rank=0,
        roster=ROSTER,
        instance_type="ml.p5.48xlarge",
        instance_count=2,
        gpus=[],
        task_dir=tmp_path,
        payload_env={"GLOO_SOCKET_IFNAME": "lo"},
        interface="ens5",
    )
    assert env["NCCL_SOCKET_IFNAME"] == env["SM_NETWORK_INTERFACE_NAME"] == "ens5"
    assert "GLOO_SOCKET_IFNAME" not in env  # the payload's own stays
    assert "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS" not in env  # rank 0 is the main node
    resource = json.loads((tmp_path / "ml" / "input" / "config" / "resourceconfig.json").read_text())
    assert resource["network_interface_name"] == "ens5"


def test_the_roster_is_checked_and_shared_hosts_get_sagemaker_names(tmp_path):
    assert gang.gpus_of([1, 2], 2) == [2, 3, 4, 5] and gang.gpus_of([0], 0) == []
    shared = {**ROSTER, "tasks": [{**t, "address": "127.0.0.2"} for t in ROSTER["tasks"]]}
    assert gang.host_names(shared) == ["algo-1", "algo-2"]
    with pytest.raises(ValueError, match="main_port"):
        gang.check_roster({**ROSTER, "main_port": 0}, 1)
    with pytest.raises(ValueError, match="no rank 5"):
        gang.check_roster(ROSTER, 5)
