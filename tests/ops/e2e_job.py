"""A job for the end-to-end tests, run by the real agent: it writes its own timestamps.

    python e2e_job.py LOG MODE SECONDS

Appends `<epoch> <job id> <attempt> <what>` lines to LOG (one write each, O_APPEND): `start`, a `tick` every
0.1 s, `sigterm`, and `exit` or `done`. MODE `graceful`: on SIGTERM it checkpoints (writes `checkpoint` in its
working directory, taking CHECKPOINT_SECONDS, default 1) and exits 0. MODE `ignore`: it ignores SIGTERM and
goes on ticking until SIGKILL. Otherwise it ends after SECONDS with `done`, exit 0. Standard library only.
"""

import os
import signal
import sys
import time
from pathlib import Path

LOG, MODE, SECONDS = sys.argv[1], sys.argv[2], float(sys.argv[3])
JOB = os.environ.get("QUOTAPORTAL_JOB_ID", "?")
ATTEMPT = os.environ.get("QUOTAPORTAL_ATTEMPT", "?")


def note(what: str) -> None:
    line = f"{time.time():.3f} {JOB} {ATTEMPT} {what}\n".encode()
    descriptor = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, line)
    finally:
        os.close(descriptor)


def on_sigterm(_number, _frame) -> None:
    note("sigterm")
    if MODE == "ignore":
        return
    time.sleep(float(os.environ.get("CHECKPOINT_SECONDS", "1")))
    Path("checkpoint").write_text(f"job {JOB} attempt {ATTEMPT} at {time.time():.3f}\n")
    note("exit")
    sys.exit(0)


signal.signal(signal.SIGTERM, on_sigterm)
note(f"start devices={os.environ.get('CUDA_VISIBLE_DEVICES', '')} pgid={os.getpgrp()} cwd={os.getcwd()}")
print(f"job {JOB} attempt {ATTEMPT} started", flush=True)
end = time.time() + SECONDS
while time.time() < end:
    time.sleep(0.1)
    note("tick")
note("done")
print("done", flush=True)
