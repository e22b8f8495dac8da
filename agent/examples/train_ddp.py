"""A tiny data-parallel training job across hosts (torch.distributed, gloo on CPU, or NCCL with GPUs).

Run by the agent on each host of a job of several instances, either directly (one process per host: the agent
sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK) or under torchrun with no flags at all (`torchrun
train_ddp.py`: the agent's PET_* variables give it the node count, this node's rank and the main address):

    {"command": ["python", "train_ddp.py"]}            or            {"command": ["torchrun", "train_ddp.py"]}

It fits y = 3x + 2 with a one-weight linear model under DistributedDataParallel, each rank on its own shard of
made-up data. On SIGTERM (a preemption, a cancel, another rank's failure) every rank agrees at the next step to
stop, rank 0 writes a checkpoint (the model and the step) and all exit 0; the next attempt resumes from it: rank
0 loads it and DistributedDataParallel hands its weights to every rank. The checkpoint lives in CHECKPOINT_DIR
(default: the working directory, which is per host; give a directory every host can read when rank 0 may land
on another host). At the end each rank writes `result-<rank>.json` (step, weight, bias, where it resumed from).

Variables: TRAIN_STEPS (default 300), TRAIN_STEP_SECONDS (default 0.02), CHECKPOINT_DIR.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

STEPS = int(os.environ.get("TRAIN_STEPS", "300"))
STEP_SECONDS = float(os.environ.get("TRAIN_STEP_SECONDS", "0.02"))
CHECKPOINT = Path(os.environ.get("CHECKPOINT_DIR", ".")) / "ddp-checkpoint.pt"

stop_asked = False


def on_sigterm(_number, _frame) -> None:
    global stop_asked
    stop_asked = True


def main() -> int:
    signal.signal(signal.SIGTERM, on_sigterm)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, init_method="env://", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    print(
        f"rank {rank} of {world} on {os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}",
        flush=True,
    )
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    start = 0
    if rank == 0 and CHECKPOINT.exists():
        saved = torch.load(CHECKPOINT)
        model.load_state_dict(saved["model"])
        start = saved["step"]
        print(f"resumed from step {start}", flush=True)
    step = torch.tensor([start])
    dist.broadcast(step, src=0)  # every rank goes on from rank 0's step
    start = int(step.item())
    ddp = DistributedDataParallel(model)  # broadcasts rank 0's weights to every rank
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(1000 + rank)
    current = start
    for current in range(start, STEPS):
        flag = torch.tensor([1 if stop_asked else 0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # all ranks stop at the same step
        if flag.item():
            if rank == 0:
                CHECKPOINT.parent.mkdir(parents=True, exist_ok=True)
                torch.save({"model": model.state_dict(), "step": current}, CHECKPOINT)
                print(f"checkpoint at step {current}", flush=True)
            dist.barrier()
            dist.destroy_process_group()
            return 0
        x = torch.rand(16, 1, generator=generator) * 4 - 2
        loss = torch.nn.functional.mse_loss(ddp(x), 3 * x + 2)
        optimizer.zero_grad()
        loss.backward()  # gradients averaged across ranks
        optimizer.step()
        if current % 50 == 0:
            print(f"step {current} loss {loss.item():.4f}", flush=True)
        time.sleep(STEP_SECONDS)
    weight, bias = model.weight.item(), model.bias.item()
    Path(f"result-{rank}.json").write_text(
        json.dumps(
            {
                "rank": rank,
                "world_size": world,
                "step": STEPS,
                "resumed_from": start,
                "weight": weight,
                "bias": bias,
            }
        )
    )
    print(f"done: y = {weight:.3f}x + {bias:.3f}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
