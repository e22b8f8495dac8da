"""A demo training job for the reference agent: prints progress, checkpoints on SIGTERM, resumes on the next attempt.

It keeps its checkpoint in its working directory, which the agent gives every attempt of a job on this host
(`WORK_DIR/jobs/<job id>/`), so a preempted job picks up where it stopped. Standard library only.

    TRAIN_STEPS (default 120)  TRAIN_STEP_SECONDS (default 1)
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

CHECKPOINT = Path("checkpoint.json")


def save(step: int) -> None:
    partial = CHECKPOINT.with_suffix(".partial")
    partial.write_text(json.dumps({"step": step, "saved_at": time.time()}))
    partial.replace(CHECKPOINT)  # never half a checkpoint, even if SIGKILL comes now


def main() -> int:
    steps = int(os.environ.get("TRAIN_STEPS", "120"))
    step_seconds = float(os.environ.get("TRAIN_STEP_SECONDS", "1"))
    step = json.loads(CHECKPOINT.read_text())["step"] if CHECKPOINT.exists() else 0
    job = os.environ.get("QUOTAPORTAL_JOB_ID", "?")
    attempt = os.environ.get("QUOTAPORTAL_ATTEMPT", "?")
    devices = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    print(
        f"job {job} attempt {attempt} on devices [{devices}]: resuming at step {step} of {steps}", flush=True
    )

    def checkpoint_and_leave(number, _frame):
        save(step)
        print(f"{signal.Signals(number).name}: checkpoint at step {step}, exiting", flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, checkpoint_and_leave)
    while step < steps:
        time.sleep(step_seconds)
        step += 1
        if step % 10 == 0 or step == steps:
            print(f"step {step}/{steps} loss {2.0 / (1 + step / 20):.4f}", flush=True)
    save(step)
    print(f"finished {steps} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
