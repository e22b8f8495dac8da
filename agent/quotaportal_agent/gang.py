"""A task of a job on several hosts: the variables its process reads, and the files beside it.

The server hands every task of an attempt the same roster (each rank's address and instances, rank 0's
address and the job's main port). From it each task's process gets what torch.distributed (`env://`),
torchrun (`PET_*`, so a bare `torchrun train.py` joins the others), SageMaker's training toolkit (`SM_*` and
`resourceconfig.json`) and AWS Batch multi-node jobs read, and quotaportal's own. A variable the payload sets
itself is left as the payload sets it, except quotaportal's and `CUDA_VISIBLE_DEVICES`.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse


def advertise_address(url: str) -> str:
    """The address this host reaches the server from: the source address of the route to it (a UDP socket
    `connect` sends nothing)."""
    parts = urlparse(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80)
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(address)
            return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def gpus_of(slots: list[int], gpus_per_instance: int) -> list[int]:
    """The GPUs of the instances (slots) a task holds: slot i has GPUs i*g .. i*g+g-1."""
    return [slot * gpus_per_instance + gpu for slot in slots for gpu in range(gpus_per_instance)]


def host_names(roster: dict[str, Any]) -> list[str]:
    """How ranks name each other's hosts: their addresses when every rank has its own, else `algo-<rank+1>`
    (SageMaker's names) when two ranks share a host (test rigs), with the addresses in the resource config."""
    addresses = [task["address"] for task in roster["tasks"]]
    if len(set(addresses)) == len(addresses):
        return addresses
    return [f"algo-{task['rank'] + 1}" for task in roster["tasks"]]


def task_environment(
    *,
    job_id: int,
    attempt: int,
    rank: int,
    roster: dict[str, Any],
    instance_type: str,
    instance_count: int,
    gpus: list[int],
    task_dir: Path,
    payload_env: dict[str, str],
    interface: str = "",
) -> dict[str, str]:
    """The variables of one task's process (beyond the agent's own environment), and its files written."""
    tasks = roster["tasks"]
    world = len(tasks)
    main_address, main_port = str(roster["main_address"]), str(roster["main_port"])
    hosts = host_names(roster)
    current = hosts[rank]
    procs = str(max(1, len(gpus)))
    task_dir.mkdir(parents=True, exist_ok=True)
    roster_file = task_dir / "roster.json"
    roster_file.write_text(json.dumps(roster, indent=1))
    base = task_dir / "ml"
    config_dir = base / "input" / "config"
    config_dir.mkdir(parents=True, exist_ok=True)
    resource = {
        "current_host": current,
        "current_instance_type": instance_type,
        "current_group_name": "homogeneousCluster",
        "hosts": hosts,
        "host_addresses": {hosts[t["rank"]]: t["address"] for t in tasks},
        "instance_groups": [
            {"instance_group_name": "homogeneousCluster", "instance_type": instance_type, "hosts": hosts}
        ],
        "network_interface_name": interface,
    }
    (config_dir / "resourceconfig.json").write_text(json.dumps(resource, indent=1))
    defaults = {
        # torch.distributed, one process per host (init_process_group("env://"))
        "MASTER_ADDR": main_address,
        "MASTER_PORT": main_port,
        "WORLD_SIZE": str(world),
        "RANK": str(rank),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "NODE_RANK": str(rank),
        "NNODES": str(world),
        "NPROC_PER_NODE": procs,
        # torchrun reads every flag's default from PET_<FLAG>
        "PET_NNODES": str(world),
        "PET_NODE_RANK": str(rank),
        "PET_NPROC_PER_NODE": procs,
        "PET_MASTER_ADDR": main_address,
        "PET_MASTER_PORT": main_port,
        "PET_RDZV_ID": f"qp-{job_id}-{attempt}",
        # SageMaker's training toolkit
        "SM_HOSTS": json.dumps(hosts),
        "SM_CURRENT_HOST": current,
        "SM_NUM_GPUS": str(len(gpus)),
        "SM_CURRENT_INSTANCE_TYPE": instance_type,
        "SM_RESOURCE_CONFIG": json.dumps(resource),
        "SAGEMAKER_BASE_DIR": str(base),
        # AWS Batch multi-node parallel jobs
        "AWS_BATCH_JOB_NUM_NODES": str(world),
        "AWS_BATCH_JOB_NODE_INDEX": str(rank),
        "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
    }
    if rank != 0:
        defaults["AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"] = main_address
    if interface:  # the interface the ranks reach each other on (`--network-interface`)
        defaults.update(
            NCCL_SOCKET_IFNAME=interface, GLOO_SOCKET_IFNAME=interface, SM_NETWORK_INTERFACE_NAME=interface
        )
    env = {name: value for name, value in defaults.items() if name not in payload_env}
    env.update(
        {
            "QUOTAPORTAL_JOB_ID": str(job_id),
            "QUOTAPORTAL_ATTEMPT": str(attempt),
            "QUOTAPORTAL_INSTANCE_TYPE": instance_type,
            "QUOTAPORTAL_INSTANCE_COUNT": str(instance_count),
            "QUOTAPORTAL_TASK": str(rank),
            "QUOTAPORTAL_TASK_COUNT": str(world),
            "QUOTAPORTAL_TASK_INSTANCES": str(tasks[rank]["instances"]),
            "QUOTAPORTAL_HOSTS": json.dumps([t["address"] for t in tasks]),
            "QUOTAPORTAL_MAIN_ADDRESS": main_address,
            "QUOTAPORTAL_MAIN_PORT": main_port,
            "QUOTAPORTAL_ROSTER_FILE": str(roster_file),
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)),
        }
    )
    return env


def check_roster(roster: Any, rank: int) -> dict[str, Any]:
    """The roster as the server sent it, or ValueError naming what is wrong with it."""
    if not isinstance(roster, dict) or not isinstance(roster.get("tasks"), list) or not roster["tasks"]:
        raise ValueError("bad roster: no tasks")
    for index, task in enumerate(roster["tasks"]):
        if (
            not isinstance(task, dict)
            or task.get("rank") != index
            or not isinstance(task.get("address"), str)
        ):
            raise ValueError(f"bad roster: task {index} has no rank {index} or no address")
    if not 0 <= rank < len(roster["tasks"]):
        raise ValueError(f"bad roster: it has no rank {rank}")
    port = roster.get("main_port")
    if not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"bad roster: main_port {port!r}")
    if not isinstance(roster.get("main_address"), str) or not roster["main_address"]:
        raise ValueError("bad roster: no main_address")
    return roster
