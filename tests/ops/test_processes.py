"""The processes a tool starts (tools/processes.py) end with it, however it ends."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from tools.processes import Processes

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_leaving_the_block_on_ctrl_c_stops_every_process_it_started(tmp_path):
    with pytest.raises(KeyboardInterrupt), Processes(tmp_path) as processes:
        started = [processes.start(f"sleeper{i}", SLEEPER, dict(os.environ)) for i in range(2)]
        raise KeyboardInterrupt

    assert [process.poll() for process in started] == [-signal.SIGTERM, -signal.SIGTERM]
    assert processes.started == {}


def test_sigterm_to_the_tool_stops_its_processes_and_exits(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as exited, Processes(tmp_path) as processes:
        sleeper = processes.start("sleeper", SLEEPER, dict(os.environ))
        os.kill(os.getpid(), signal.SIGTERM)

    assert exited.value.code == 128 + signal.SIGTERM
    assert sleeper.poll() == -signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == before
