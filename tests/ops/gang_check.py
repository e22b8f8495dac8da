"""A job of several hosts for the end-to-end tests: its ranks meet only if the roster they were given is right.

    python gang_check.py LOG MODE SECONDS

Rank 0 listens on MASTER_ADDR:MASTER_PORT. Every other rank connects from its own address (the roster's,
QUOTAPORTAL_HOSTS[RANK], bound as the source) and says its rank; rank 0 checks each peer's source address against
the roster, and once all WORLD_SIZE - 1 have come, sends each the sum of the ranks (a tiny all-reduce). A missing
rank makes rank 0 exit 3 after GANG_CHECK_TIMEOUT; a peer from the wrong address, 4. Each rank writes what it saw
to `gang-check-<rank>.json` in its working directory, and appends `<epoch> <job> <attempt> <rank> <what>` lines
to LOG: `start`, `met`, `tick` (every 0.1 s), `sigterm`, `exit`, `done`.

Then MODE `run`: ticks for SECONDS and exits 0 (`done`). MODE `die`: rank GANG_CHECK_DIE_RANK exits 1 at once
after the meeting, the others tick on (as ranks blocked in a collective would) until stopped. On SIGTERM a rank
checkpoints (CHECKPOINT_SECONDS + 0.5 x rank, writing `checkpoint-<rank>`) and exits 0. Standard library only.
"""

import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

LOG, MODE, SECONDS = sys.argv[1], sys.argv[2], float(sys.argv[3])
JOB = os.environ.get("QUOTAPORTAL_JOB_ID", "?")
ATTEMPT = os.environ.get("QUOTAPORTAL_ATTEMPT", "?")
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
HOSTS = json.loads(os.environ["QUOTAPORTAL_HOSTS"])
MAIN = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
TIMEOUT = float(os.environ.get("GANG_CHECK_TIMEOUT", "30"))


def note(what: str) -> None:
    line = f"{time.time():.3f} {JOB} {ATTEMPT} {RANK} {what}\n".encode()
    descriptor = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, line)
    finally:
        os.close(descriptor)


def on_sigterm(_number, _frame) -> None:
    note("sigterm")
    time.sleep(float(os.environ.get("CHECKPOINT_SECONDS", "1")) + 0.5 * RANK)
    Path(f"checkpoint-{RANK}").write_text(f"job {JOB} attempt {ATTEMPT} rank {RANK} at {time.time():.3f}\n")
    note("exit")
    sys.exit(0)


def meet_as_main() -> dict:
    peers, seen = {}, []
    with socket.create_server(MAIN, reuse_port=False) as server:
        server.settimeout(TIMEOUT)
        while len(peers) < WORLD - 1:
            try:
                connection, (address, _) = server.accept()
            except TimeoutError:
                note(f"missing ranks={sorted(set(range(1, WORLD)) - set(peers))}")
                sys.exit(3)
            rank = int(connection.recv(64).decode())
            seen.append((rank, address))
            if HOSTS[rank] != address:
                note(f"wrong-address rank={rank} from={address} roster={HOSTS[rank]}")
                sys.exit(4)
            peers[rank] = connection
        total = sum(range(WORLD))
        for connection in peers.values():
            connection.sendall(str(total).encode())
            connection.close()
    return {"sum": total, "peers": sorted(seen)}


def meet_as_peer() -> dict:
    until = time.time() + TIMEOUT
    while True:
        try:
            with socket.create_connection(MAIN, timeout=5, source_address=(HOSTS[RANK], 0)) as connection:
                connection.sendall(str(RANK).encode())
                total = int(connection.recv(64).decode())
                return {"sum": total, "main": list(MAIN)}
        except (ConnectionRefusedError, ValueError, OSError):
            if time.time() > until:
                note("main-never-answered")
                sys.exit(3)
            time.sleep(0.2)


signal.signal(signal.SIGTERM, on_sigterm)
note(f"start address={HOSTS[RANK]} pgid={os.getpgrp()} cwd={os.getcwd()}")
met = meet_as_main() if RANK == 0 else meet_as_peer()
if met["sum"] != sum(range(WORLD)):
    note(f"wrong-sum {met['sum']}")
    sys.exit(4)
Path(f"gang-check-{RANK}.json").write_text(
    json.dumps(
        {"rank": RANK, "world_size": WORLD, "hosts": HOSTS, "main": list(MAIN), **met, "at": time.time()}
    )
)
note("met")
if MODE == "die" and RANK == int(os.environ.get("GANG_CHECK_DIE_RANK", "-1")):
    note("dying")
    sys.exit(1)
end = time.time() + SECONDS
while MODE == "die" or time.time() < end:
    time.sleep(0.1)
    note("tick")
note("done")
