"""`python -m quotaportal_agent`: arguments, logging, signals, then the agent's loop until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

from quotaportal_agent.agent import Agent, Config
from quotaportal_agent.client import Backoff, Client
from quotaportal_agent.gang import advertise_address
from quotaportal_agent.state import StateFileLock

PROG = "quotaportal-agent"


class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """One line naming the flag, exit 2 (argparse's usage block would bury it)."""
        self.exit(2, f"{PROG}: error: {message}\n")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text!r}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 0, not {text!r}")
    return value


def port_range(text: str) -> str:
    first, _, last = text.partition("-")
    try:
        low, high = int(first), int(last or first)
    except ValueError:
        low = high = 0
    if not 1024 <= low <= high <= 65535:
        raise argparse.ArgumentTypeError(
            f"must be FIRST-LAST within 1024-65535, e.g. 29400-29499, not {text!r}"
        )
    return f"{low}-{high}"


def wait_seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 30:
        raise argparse.ArgumentTypeError(f"must be a whole number of seconds from 0 to 30, not {text!r}")
    return value


def base_url(text: str) -> str:
    parts = urlparse(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"must be the portal's http(s):// address, not {text!r}")
    return text.rstrip("/")


def non_empty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text.strip()


def build_parser() -> Parser:
    parser = Parser(prog=PROG, description="Run quotaportal jobs on this host as processes.")
    parser.add_argument(
        "--url", required=True, type=base_url, help="the portal, e.g. https://quota.example.com"
    )
    parser.add_argument("--token", help="an API token with report_job_status (default: $QUOTAPORTAL_TOKEN)")
    parser.add_argument("--token-file", type=Path, help="a file holding the token (instead of --token)")
    parser.add_argument(
        "--name",
        type=non_empty,
        help="this agent's executor name (default: HOST-<hash of the state file>; stable across restarts)",
    )
    parser.add_argument("--environment", required=True, type=non_empty, help="service environment id or name")
    parser.add_argument("--instance-type", required=True, type=non_empty, help="the type this host offers")
    parser.add_argument("--slots", required=True, type=positive_int, help="instances (GPUs) on this host")
    parser.add_argument("--work-dir", type=Path, default=Path("quotaportal-agent"), help="jobs' work dirs")
    parser.add_argument("--state-file", type=Path, help="default: WORK_DIR/state.json")
    parser.add_argument("--heartbeat-seconds", type=positive_float, default=30.0, help="default 30")
    parser.add_argument(
        "--wait-seconds", type=wait_seconds, default=20, help="the long-poll, 0-30; default 20"
    )
    parser.add_argument(
        "--stop-jobs-on-exit",
        action="store_true",
        help="on SIGTERM or SIGINT, stop the jobs' processes too, and report them FAILED: stopped unfinished "
        "(default: leave them running for the next agent)",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument(
        "--advertise-address",
        type=non_empty,
        help="where the other hosts of a job reach this one (default: the address it reaches the portal from)",
    )
    parser.add_argument(
        "--port-range",
        type=port_range,
        default="29400-29499",
        help="FIRST-LAST: a job's main port, when its rank 0 runs here, is one of these (default 29400-29499)",
    )
    parser.add_argument(
        "--gpus-per-instance",
        type=non_negative_int,
        help="GPUs of each instance (slot) (default: the instance type's gpu_count, as the portal says)",
    )
    parser.add_argument(
        "--network-interface",
        type=non_empty,
        help="the interface the hosts of a job reach each other on: NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME "
        "and SageMaker's network_interface_name (default: none set)",
    )
    parser.add_argument(
        "--whole-jobs-only",
        action="store_true",
        help="take only jobs this host can run whole, never part of a job on several hosts",
    )
    return parser


def resolve_environment(client: Client, given: str, stop: threading.Event) -> int | None:
    """The environment's id: `given` if numeric, else looked up by name (waiting out a server outage)."""
    if given.isdigit():
        return int(given)
    backoff = Backoff()
    while not stop.is_set():
        environments = client.environments()
        if environments is not None:
            return next((int(e["id"]) for e in environments if e.get("name") == given), None)
        backoff.wait(stop)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.token and args.token_file:
        parser.error("--token-file: give either --token or --token-file, not both")
    token = args.token or os.environ.get("QUOTAPORTAL_TOKEN", "")
    if args.token_file:
        try:
            token = args.token_file.read_text().strip()
        except OSError as error:
            parser.error(f"--token-file: cannot read it: {error}")
        if not token:
            parser.error(f"--token-file: {args.token_file} is empty")
    if not token:
        parser.error("--token: give it, --token-file, or set QUOTAPORTAL_TOKEN")
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    work_dir = args.work_dir.resolve()
    state_file = (args.state_file or work_dir / "state.json").resolve()
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
        state_file.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        parser.error(f"--work-dir: cannot create it: {error}")
    lock = StateFileLock(state_file)
    if not lock.acquire():
        parser.error(f"--state-file: another agent is using {state_file}")

    host = socket.gethostname()
    name = args.name or f"{host}-{hashlib.sha256(str(state_file).encode()).hexdigest()[:8]}"
    stop = threading.Event()
    client = Client(args.url, token, executor=name[:128], host=host[:255])
    agent: Agent | None = None

    def on_signal(number, _frame):
        logging.getLogger(PROG).info(
            "%s: shutting down; running jobs are %s",
            signal.Signals(number).name,
            "stopped" if args.stop_jobs_on_exit else "left running",
        )
        stop.set()
        if agent is not None:
            agent.request_shutdown()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        environment_id = resolve_environment(client, args.environment, stop)
    except PermissionError as error:
        parser.error(f"--token: {error}")
    if environment_id is None:
        if stop.is_set():
            return 0
        parser.error(f"--environment: no service environment named {args.environment!r}")
    config = Config(
        url=args.url,
        token=token,
        environment_id=environment_id,
        instance_type=args.instance_type,
        slots=args.slots,
        work_dir=work_dir,
        state_file=state_file,
        heartbeat_seconds=args.heartbeat_seconds,
        wait_seconds=args.wait_seconds,
        stop_jobs_on_exit=args.stop_jobs_on_exit,
        tasks=not args.whole_jobs_only,
        advertise_address=args.advertise_address or advertise_address(args.url),
        ports=args.port_range,
        gpus_per_instance=args.gpus_per_instance,
        network_interface=args.network_interface or "",
    )
    logging.getLogger(PROG).info("executor name %s", name)
    try:
        agent = Agent(config, client)
    except (ValueError, KeyError, TypeError) as error:
        parser.error(f"--state-file: unreadable: {error}")
    if stop.is_set():
        agent.request_shutdown()
    try:
        agent.run()
    finally:
        lock.release()
    return 0
