"""A real torch.distributed job (gloo, CPU) across two agents, run by `make test-torch` with the CPU build of
torch in its own virtualenv (TORCH_PYTHON, default var/torch-venv/bin/python): directly (one process per host,
`env://`) through a reclaim, a checkpoint and a resume, and under a bare `torchrun` that reads the agent's PET_*
variables. Skipped when that interpreter has no torch, unless QUOTAPORTAL_REQUIRE_TORCH=1 (`make test-torch`).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from scheduling.models import JobStatus, QuotaShare
from tests.ops.support import BASE_DIR
from tests.ops.test_agent_end_to_end import AGENT_DIR
from tests.ops.test_gang_end_to_end import (  # noqa: F401 (the fixtures)
    make_fleet,
    preempted_training_resumes_and_converges,
    stack,
)

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

TORCH_PYTHON = os.environ.get("TORCH_PYTHON", str(BASE_DIR / "var" / "torch-venv" / "bin" / "python"))
EXAMPLE = str(Path(AGENT_DIR) / "examples" / "train_ddp.py")


def _has_torch() -> bool:
    try:
        return (
            subprocess.run([TORCH_PYTHON, "-c", "import torch"], capture_output=True, timeout=120).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="module", autouse=True)
def torch_python():
    if not _has_torch():
        message = f"no torch in {TORCH_PYTHON}: `make test-torch` installs requirements-torch.txt there"
        if os.environ.get("QUOTAPORTAL_REQUIRE_TORCH") == "1":
            pytest.fail(message)
        pytest.skip(message)


def test_a_torch_ddp_job_on_two_hosts_checkpoints_when_reclaimed_and_resumes(make_fleet):  # noqa: F811
    preempted_training_resumes_and_converges(make_fleet, "ddp", [TORCH_PYTHON, EXAMPLE], steps=300)


def test_a_bare_torchrun_on_two_hosts_joins_through_the_agent_variables(make_fleet):  # noqa: F811
    fleet = make_fleet(
        "torchrun", grace=10, lease=30, deadline=120, shares={"only": (QuotaShare.Strategy.RESERVE, 2)}
    )
    for name in ("a", "b"):
        fleet.start_agent(name, 1, "--gpus-per-instance", "0")
    torchrun = [TORCH_PYTHON, "-m", "torch.distributed.run", EXAMPLE]  # `torchrun train_ddp.py`, no flags
    job = fleet.submit_command("only", 2, torchrun, {"TRAIN_STEPS": "100", "TRAIN_STEP_SECONDS": "0"})
    fleet.wait_status(job, JobStatus.SUCCEEDED, seconds=120)
    results = []
    for name in ("a", "b"):
        results += [
            json.loads(p.read_text())
            for p in (fleet.work_dir(name) / "jobs" / str(job)).glob("result-*.json")
        ]
    assert sorted((r["rank"], r["world_size"]) for r in results) == [(0, 2), (1, 2)], fleet.tails()
    assert results[0]["weight"] == results[1]["weight"]
