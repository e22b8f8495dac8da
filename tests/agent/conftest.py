"""The agent against a fake server, in a thread of the test process, with real child processes."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
from pathlib import Path

import pytest

AGENT_DIR = Path(__file__).resolve().parents[2] / "agent"
sys.path.insert(0, str(AGENT_DIR))

from quotaportal_agent.agent import Agent, Config  # noqa: E402
from tests.agent.fake_server import ENVIRONMENT_ID, INSTANCE_TYPE, TOKEN, FakeServer  # noqa: E402


def python(code: str) -> list[str]:
    """A job command: a small Python program."""
    return [sys.executable, "-c", textwrap.dedent(code)]


def quick_config(server: FakeServer, tmp_path: Path, **overrides) -> Config:
    values = dict(
        url=server.url,
        token=TOKEN,
        environment_id=ENVIRONMENT_ID,
        instance_type=INSTANCE_TYPE,
        slots=4,
        work_dir=tmp_path / "work",
        state_file=tmp_path / "work" / "state.json",
        heartbeat_seconds=0.3,
        wait_seconds=1,
        min_poll_seconds=0.1,
        max_backoff_seconds=0.3,
        hold_seconds=0.5,
        shutdown_flush_seconds=1.0,
        tick_seconds=0.02,
    )
    values.update(overrides)
    (tmp_path / "work").mkdir(exist_ok=True)
    return Config(**values)


class RunningAgent:
    def __init__(self, agent: Agent):
        self.agent = agent
        self.thread = threading.Thread(target=agent.run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.agent.request_shutdown()
        self.thread.join(timeout=15)
        assert not self.thread.is_alive(), "the agent did not shut down"


@pytest.fixture
def server():
    fake = FakeServer()
    fake.come_up()
    yield fake
    if not fake.down:
        fake.go_down()


@pytest.fixture
def start_agent(server, tmp_path):
    started: list[RunningAgent] = []

    def start(**overrides) -> RunningAgent:
        running = RunningAgent(Agent(quick_config(server, tmp_path, **overrides)))
        started.append(running)
        return running

    yield start
    for running in started:
        if running.thread.is_alive():
            running.stop()
        for job in running.agent.state.jobs.values():  # the agent leaves jobs running when it stops
            if job.pid:
                try:
                    os.killpg(job.pid, signal.SIGKILL)
                except OSError:
                    pass
