"""The same tiny training across hosts as train_ddp.py, with the standard library only (for hosts without torch).

Rank 0 listens on MASTER_ADDR:MASTER_PORT (the agent gives every host the same roster); every other rank
connects to it. Each step every rank computes the gradient of y = 3x + 2 on its own made-up data and sends it,
with whether it was asked to stop (SIGTERM), to rank 0, which averages the gradients, updates the weights and
sends them back with the verdict: so all ranks take the same step, and stop at the same step. On a stop rank 0
writes `hosts-checkpoint.json` (weights and step) in CHECKPOINT_DIR (default: its working directory) and all exit
0; the next attempt resumes from it. At the end each rank writes `result-<rank>.json`.

    {"command": ["python3", "train_hosts.py"]}

Variables: TRAIN_STEPS (default 300), TRAIN_STEP_SECONDS (default 0.02), CHECKPOINT_DIR.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import time
from pathlib import Path

STEPS = int(os.environ.get("TRAIN_STEPS", "300"))
STEP_SECONDS = float(os.environ.get("TRAIN_STEP_SECONDS", "0.02"))
CHECKPOINT = Path(os.environ.get("CHECKPOINT_DIR", ".")) / "hosts-checkpoint.json"
RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
MAIN = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
RATE = 0.05

stop_asked = False


def on_sigterm(_number, _frame) -> None:
    global stop_asked
    stop_asked = True


def gradient(weight: float, bias: float, rng: random.Random) -> tuple[float, float]:
    xs = [rng.uniform(-2, 2) for _ in range(16)]
    errors = [(weight * x + bias) - (3 * x + 2) for x in xs]
    return sum(2 * e * x for e, x in zip(errors, xs, strict=True)) / 16, sum(2 * e for e in errors) / 16


def send(connection: socket.socket, message: dict) -> None:
    connection.sendall((json.dumps(message) + "\n").encode())


def receive(reader) -> dict:
    line = reader.readline()
    if not line:
        raise ConnectionError("a peer went away")
    return json.loads(line)


def main() -> int:
    signal.signal(signal.SIGTERM, on_sigterm)
    rng = random.Random(1000 + RANK)
    weight, bias, step = 0.0, 0.0, 0
    if RANK == 0:
        if CHECKPOINT.exists():
            saved = json.loads(CHECKPOINT.read_text())
            weight, bias, step = saved["weight"], saved["bias"], saved["step"]
            print(f"resumed from step {step}", flush=True)
        server = socket.create_server(MAIN)
        server.settimeout(120)
        peers = [server.accept()[0] for _ in range(WORLD - 1)]
        readers = [peer.makefile("r") for peer in peers]
    else:
        until = time.time() + 120
        while True:
            try:
                peer = socket.create_connection(MAIN, timeout=120)
                break
            except OSError:
                if time.time() > until:
                    raise
                time.sleep(0.2)
        reader = peer.makefile("r")
        state = receive(reader)
        weight, bias, step = state["weight"], state["bias"], state["step"]
    if RANK == 0:
        for peer in peers:
            send(peer, {"weight": weight, "bias": bias, "step": step})
    start = step
    while step < STEPS:
        grad_w, grad_b = gradient(weight, bias, rng)
        if RANK == 0:
            grads, stop = [(grad_w, grad_b)], stop_asked
            for item in map(receive, readers):
                grads.append((item["w"], item["b"]))
                stop = stop or item["stop"]
            if not stop:
                weight -= RATE * sum(g[0] for g in grads) / WORLD
                bias -= RATE * sum(g[1] for g in grads) / WORLD
            for peer in peers:
                send(peer, {"weight": weight, "bias": bias, "stop": stop})
        else:
            send(peer, {"w": grad_w, "b": grad_b, "stop": stop_asked})
            verdict = receive(reader)
            weight, bias, stop = verdict["weight"], verdict["bias"], verdict["stop"]
        if stop:
            if RANK == 0:
                CHECKPOINT.parent.mkdir(parents=True, exist_ok=True)
                CHECKPOINT.write_text(json.dumps({"weight": weight, "bias": bias, "step": step}))
                print(f"checkpoint at step {step}", flush=True)
            return 0
        if step % 50 == 0:
            print(f"step {step}", flush=True)
        step += 1
        time.sleep(STEP_SECONDS)
    Path(f"result-{RANK}.json").write_text(
        json.dumps(
            {
                "rank": RANK,
                "world_size": WORLD,
                "step": step,
                "resumed_from": start,
                "weight": weight,
                "bias": bias,
            }
        )
    )
    print(f"done: y = {weight:.3f}x + {bias:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
