"""qp: submit jobs to quotaportal and follow them from a terminal.

    qp login --url https://quota.example.com          # asks for the token, writes the config file (0600)
    qp submit --queue training --share nlp --name llm --prefer ml.p5.48xlarge:4 --prefer ml.p4d.24xlarge:4 \\
        --command "python train.py --epochs 3"
    qp jobs --status RUNNABLE | qp status 42 | qp why 42 | qp wait 42 --timeout 3600 | qp logs 42 | qp cancel 42

Every command takes --json (the API's JSON, for scripts). Exit codes: 0 done; 1 an error (its message names
the field the portal refused); 2 a bad argument; `wait`: 3 the job FAILED, 4 it was CANCELLED, 124 time ran out.
"""

from __future__ import annotations

import argparse
import getpass
import json
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quotaportal_cli import __version__, config
from quotaportal_cli.client import ApiError, Client

EXIT_ERROR, EXIT_USAGE, EXIT_FAILED, EXIT_CANCELLED, EXIT_TIMEOUT = 1, 2, 3, 4, 124
FINISHED = ("SUCCEEDED", "FAILED", "CANCELLED")
MAX_PREFERENCES = 5


class UsageError(Exception):
    """A bad argument or job file, named (exit 2)."""


# --- reading a job -------------------------------------------------------------------------------------------


def preference(text: str) -> dict:
    """`TYPE:COUNT[:PLAN]` -> one entry of the preference list."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise UsageError(f"--prefer {text!r}: write INSTANCE_TYPE:COUNT or INSTANCE_TYPE:COUNT:TRAINING_PLAN")
    try:
        count = int(parts[1])
    except ValueError:
        raise UsageError(f"--prefer {text!r}: the count {parts[1]!r} is not a whole number") from None
    if count < 1:
        raise UsageError(f"--prefer {text!r}: the count must be at least 1")
    entry = {"instance_type": parts[0], "instance_count": count}
    if len(parts) == 3 and parts[2]:
        entry["training_plan"] = parts[2]
    return entry


def job_file(path: str) -> dict:
    """A job document (the API's field names) from a JSON or YAML file; YAML needs PyYAML."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"--file {path}: {exc.strerror}") from None
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise UsageError(
                f"--file {path}: reading YAML needs PyYAML (pip install pyyaml), or use JSON"
            ) from None
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise UsageError(f"--file {path}: not YAML: {exc}") from None
    else:
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"--file {path}: not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise UsageError(
            f"--file {path}: the file must hold one job (an object with job_queue, quota_share...)"
        )
    return document


def submission(args: argparse.Namespace) -> dict:
    """The job to POST: the file's fields, then the flags over them."""
    document = job_file(args.file) if args.file else {}
    flags = {
        "name": args.name,
        "job_queue": args.queue,
        "quota_share": args.share,
        "scheduling_priority": args.priority,
        "retry_attempts": args.retry_attempts,
        "max_pending_seconds": args.max_pending_seconds,
        "duration_seconds": args.duration_seconds,
        "client_token": args.client_token,
    }
    document.update({key: value for key, value in flags.items() if value is not None})
    if args.prefer:
        if len(args.prefer) > MAX_PREFERENCES:
            raise UsageError(f"--prefer: at most {MAX_PREFERENCES} entries, {len(args.prefer)} given")
        document["instance_preferences"] = [preference(text) for text in args.prefer]
    payload = dict(document.get("payload") or {})
    if args.payload:
        try:
            payload = json.loads(args.payload)
        except ValueError as exc:
            raise UsageError(f"--payload: not JSON: {exc}") from None
        if not isinstance(payload, dict):
            raise UsageError('--payload: a JSON object, e.g. \'{"command": ["python", "train.py"]}\'')
    command = list(args.argv or [])
    if args.command:
        if command:
            raise UsageError("give the command either with --command or after --, not both")
        try:
            command = shlex.split(args.command)
        except ValueError as exc:
            raise UsageError(f"--command: {exc}") from None
    if command:
        payload["command"] = command
    for pair in args.env or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--env {pair!r}: write NAME=VALUE")
        payload.setdefault("env", {})[key] = value
    if payload:
        document["payload"] = payload
    missing = [
        flag
        for flag, field in (("--name", "name"), ("--queue", "job_queue"), ("--share", "quota_share"))
        if not document.get(field)
    ]
    if not document.get("instance_preferences"):
        missing.append("--prefer")
    if missing:
        raise UsageError(f"missing {', '.join(missing)} (as flags or in --file)")
    return document


# --- showing a job -------------------------------------------------------------------------------------------


def _entry(entry: dict) -> str:
    plan = f" on plan {entry['training_plan']}" if entry.get("training_plan") else ""
    return f"{entry['instance_type']} x{entry['instance_count']}{plan}"


def status_lines(job: dict) -> list[str]:
    lines = [f"job {job['id']} {job['name']}: {job['status']}"]
    lines.append(
        f"  queue {job['job_queue']}, share {job['quota_share']}, priority {job['scheduling_priority']}"
    )
    lines.append("  prefers " + ", then ".join(_entry(e) for e in job["instance_preferences"]))
    if job.get("selected_instance_type"):
        plan = f" on plan {job['selected_training_plan']}" if job.get("selected_training_plan") else ""
        borrowed = f" ({job['borrowed_instances']} borrowed)" if job.get("borrowed_instances") else ""
        lines.append(
            f"  on {job['selected_instance_type']} x{job['selected_instance_count']}{plan}{borrowed}"
        )
    if job.get("status_reason"):
        lines.append(f"  reason: {job['status_reason']}")
    if job.get("queue_position"):
        lines.append(f"  position {job['queue_position']} in its share's queue")
    estimate = job.get("estimated_start")
    if estimate:
        lines.append(f"  estimated start: {estimate_words(estimate)}")
    attempts = job.get("attempts") or []
    if attempts:
        lines.append(
            f"  attempt {job['attempt']} of {job['retry_attempts']}; preempted {job['preemption_count']} time(s)"
        )
    return lines


def moment(text: str) -> str:
    """An API time (ISO 8601, UTC) as people read it: `2026-12-05 02:27 UTC`."""
    try:
        return f"{datetime.fromisoformat(text).astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    except (TypeError, ValueError):
        return str(text)


def estimate_words(estimate: dict) -> str:
    if not estimate.get("earliest"):
        return f"none ({estimate.get('basis', '')})"
    window = moment(estimate["earliest"])
    if estimate.get("latest") and moment(estimate["latest"]) != window:
        window += f" to {moment(estimate['latest'])}"
    return f"{window} ({estimate.get('basis', '')})"


def why_lines(job: dict) -> list[str]:
    lines = [f"job {job['id']} {job['name']} is {job['status']}"]
    lines.append(f"  why: {job.get('status_reason') or 'no reason recorded'}")
    if job["status"] == "RUNNABLE":
        if job.get("queue_position"):
            lines.append(f"  position {job['queue_position']} in share {job['quota_share']}'s queue")
        estimate = job.get("estimated_start")
        lines.append(
            f"  estimated start: {estimate_words(estimate)}"
            if estimate
            else "  estimated start: not estimated yet"
        )
    return lines


def latest_attempt(job: dict, number: int | None) -> dict | None:
    attempts = job.get("attempts") or []
    if number is None:
        return attempts[-1] if attempts else None
    return next((a for a in attempts if a.get("attempt") == number), None)


# --- commands ------------------------------------------------------------------------------------------------


def emit(args: argparse.Namespace, data: Any, lines: list[str]) -> None:
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print("\n".join(lines))


def client_for(args: argparse.Namespace) -> Client:
    settings = config.settings_from(url=args.url, token=args.token)
    return Client(settings.url, settings.token)


def cmd_login(args: argparse.Namespace) -> int:
    stored = config.read_file(config.config_path())
    url = args.url or stored.get("url")
    if not url:
        url = input("portal address (https://...): ").strip()
    url = config.url_check(url)
    token = args.token
    if args.token_stdin:
        token = sys.stdin.readline().strip()
    if not token:
        token = getpass.getpass("API token (from your profile page): ").strip()
    if not token:
        raise UsageError("--token: no token given")
    Client(url, token).check()
    path = config.config_path()
    config.write_file(path, url=url, token=token)
    emit(
        args,
        {"url": url, "config": str(path)},
        [f"signed in to {url}; settings written to {path} (mode 0600)"],
    )
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    document = submission(args)
    job = client_for(args).submit(document)
    emit(
        args,
        job,
        [f"submitted job {job['id']} {job['name']}: {job['status']}", f"  follow it: qp wait {job['id']}"],
    )
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    job = client_for(args).job(args.job)
    emit(args, job, status_lines(job))
    return 0


def cmd_why(args: argparse.Namespace) -> int:
    job = client_for(args).job(args.job)
    data = {
        key: job.get(key)
        for key in ("id", "name", "status", "status_reason", "queue_position", "estimated_start")
    }
    emit(args, data, why_lines(job))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    job = client_for(args).job(args.job)
    attempt = latest_attempt(job, args.attempt)
    if attempt is None:
        which = f"attempt {args.attempt}" if args.attempt else "attempt"
        raise ApiError(f"job {job['id']} has no {which} yet (it is {job['status']})")
    if args.json:
        emit(args, {"job": job["id"], **attempt}, [])
        return 0
    header = f"# job {job['id']} attempt {attempt['attempt']}"
    if attempt.get("exit_code") is not None:
        header += f", exit code {attempt['exit_code']}"
    print(header, file=sys.stderr)
    tail = attempt.get("output_tail") or ""
    sys.stdout.write(tail if tail.endswith("\n") or not tail else tail + "\n")
    if not tail:
        print("# no output reported (the simulated executor runs no process)", file=sys.stderr)
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    filters = {"status": args.status, "job_queue": args.queue, "quota_share": args.share, "team": args.team}
    jobs = client_for(args).jobs(filters=filters, limit=args.limit)
    lines = [
        f"{job['id']:>8}  {job['status']:<10} {job['name']:<32} {job['job_queue']}/{job['quota_share']}"
        f"  {job['created_at'][:16].replace('T', ' ')}"
        for job in jobs
    ]
    emit(args, jobs, lines or ["no jobs"])
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    job = client_for(args).cancel(args.job, args.reason or "")
    still = " (it stops gracefully first)" if job["status"] == "STOPPING" else ""
    emit(args, job, [f"job {job['id']} {job['name']}: {job['status']}{still}"])
    return 0


def cmd_wait(args: argparse.Namespace) -> int:
    client = client_for(args)
    deadline = time.monotonic() + args.timeout if args.timeout else None
    last_status = None
    while True:
        try:
            job = client.job(args.job)
        except ApiError as exc:
            # The portal restarting, or a moment of network trouble: keep waiting until the timeout. A refusal
            # (the job is not found, the token was revoked) ends the wait at once.
            if exc.status is not None and exc.status < 500 and exc.status != 429:
                raise
            if deadline is not None and time.monotonic() >= deadline:
                raise
            print(f"qp wait: {str(exc).splitlines()[0]}; trying again", file=sys.stderr)
            time.sleep(args.interval)
            continue
        if job["status"] != last_status and not args.json and not args.quiet:
            print(
                f"{time.strftime('%H:%M:%S')} job {job['id']} {job['status']}: {job.get('status_reason', '')}"
            )
            last_status = job["status"]
        if job["status"] in FINISHED:
            if args.json:
                emit(args, job, [])
            return {"SUCCEEDED": 0, "FAILED": EXIT_FAILED, "CANCELLED": EXIT_CANCELLED}[job["status"]]
        if deadline is not None and time.monotonic() >= deadline:
            if args.json:
                emit(args, job, [])
            print(f"qp: job {job['id']} still {job['status']} after {args.timeout:g} s", file=sys.stderr)
            return EXIT_TIMEOUT
        pause = (
            args.interval if deadline is None else min(args.interval, max(0.0, deadline - time.monotonic()))
        )
        time.sleep(pause)


# --- arguments -----------------------------------------------------------------------------------------------


def positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0")
    return value


def job_id(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a job id (a positive whole number)")
    return int(text)


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url", help=f"the portal's address (default: ${config.URL_VARIABLE}, then the config file)"
    )
    common.add_argument(
        "--token", help=f"API token (default: ${config.TOKEN_VARIABLE}, then the config file)"
    )
    common.add_argument("--json", action="store_true", help="print the API's JSON")
    top = argparse.ArgumentParser(
        prog="qp", description="quotaportal from the command line.", epilog="See docs/cli.md for more."
    )
    top.add_argument("--version", action="version", version=f"qp {__version__}")
    commands = top.add_subparsers(dest="subcommand", required=True, metavar="COMMAND")

    login = commands.add_parser("login", parents=[common], help="store the portal's address and your token")
    login.add_argument("--token-stdin", action="store_true", help="read the token from standard input")
    login.set_defaults(run=cmd_login)

    submit = commands.add_parser("submit", parents=[common], help="submit a job")
    submit.add_argument(
        "--file", "-f", help="a job in JSON or YAML (the API's field names); flags override it"
    )
    submit.add_argument("--name", help="the job's name")
    submit.add_argument("--queue", help="job queue name")
    submit.add_argument("--share", help="quota share name (of your team)")
    submit.add_argument(
        "--prefer",
        action="append",
        metavar="TYPE:COUNT[:PLAN]",
        help="a preference list entry, in order (repeat up to 5 times), e.g. ml.p5.48xlarge:4:dec-p5",
    )
    submit.add_argument("--priority", type=int, help="scheduling priority 0..9999 (higher first)")
    submit.add_argument("--retry-attempts", type=int, help="attempts in all, 1..10")
    submit.add_argument("--max-pending-seconds", type=int, help="fail the job if it waits longer")
    submit.add_argument("--duration-seconds", type=int, help="how long it runs (the simulated executor)")
    submit.add_argument("--client-token", help="idempotency key: submitting again returns the first job")
    submit.add_argument("--command", help="the command the executor runs, as one shell-quoted string")
    submit.add_argument("--env", action="append", metavar="NAME=VALUE", help="an environment variable for it")
    submit.add_argument(
        "--payload", help="the whole payload as a JSON object (--command and --env add to it)"
    )
    submit.add_argument("argv", nargs="*", help="the command after --, as separate arguments")
    submit.set_defaults(run=cmd_submit)

    for name, run, text in (
        ("status", cmd_status, "a job's status, placement and attempts"),
        ("why", cmd_why, "why a job waits (or ended) and when it is expected to start"),
    ):
        command = commands.add_parser(name, parents=[common], help=text)
        command.add_argument("job", type=job_id)
        command.set_defaults(run=run)

    jobs = commands.add_parser("jobs", parents=[common], help="your teams' jobs, newest first")
    jobs.add_argument("--status", help="RUNNABLE, SCHEDULED, STARTING, RUNNING, STOPPING, SUCCEEDED, ...")
    jobs.add_argument("--queue", help="job queue name")
    jobs.add_argument("--share", help="quota share name")
    jobs.add_argument("--team", help="team slug")
    jobs.add_argument("--limit", type=int, default=20, help="at most this many (default 20)")
    jobs.set_defaults(run=cmd_jobs)

    logs = commands.add_parser("logs", parents=[common], help="the output tail of a job's latest attempt")
    logs.add_argument("job", type=job_id)
    logs.add_argument("--attempt", type=int, help="another attempt than the latest")
    logs.set_defaults(run=cmd_logs)

    cancel = commands.add_parser("cancel", parents=[common], help="cancel a job")
    cancel.add_argument("job", type=job_id)
    cancel.add_argument("--reason", help="recorded with the cancellation")
    cancel.set_defaults(run=cmd_cancel)

    wait = commands.add_parser("wait", parents=[common], help="wait until a job ends; exit 0 if it succeeded")
    wait.add_argument("job", type=job_id)
    wait.add_argument("--timeout", type=positive_number, help="give up after this many seconds (exit 124)")
    wait.add_argument(
        "--interval", type=positive_number, default=5.0, help="seconds between looks (default 5)"
    )
    wait.add_argument("--quiet", "-q", action="store_true", help="print nothing while waiting")
    wait.set_defaults(run=cmd_wait)
    return top


def main(argv: list[str] | None = None) -> int:
    top = parser()
    args = top.parse_args(argv)
    try:
        return args.run(args)
    except UsageError as exc:
        print(f"qp {args.subcommand}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (config.ConfigError, ApiError) as exc:
        print(f"qp {args.subcommand}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
