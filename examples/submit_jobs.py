#!/usr/bin/env python3
r"""Submit a batch of training jobs to quotaportal's REST API, then poll until each is placed or finished.

    python examples/submit_jobs.py --url http://127.0.0.1:8000 --token KEY --count 5 \
        --queue training --share nlp --prefer ml.p5.48xlarge:1:nlp-p5-december --prefer ml.p4d.24xlarge:1

Each job carries a client token `<batch>-<n>`: run the script again with the same `--batch` and it finds the
jobs it already submitted (the API answers 200 with the first job) instead of submitting them twice.
Needs only `requests`. Exit status: 0 when every job is placed or finished, 1 on a refused submission,
2 when --timeout runs out first.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

import requests

PLACED = {"SCHEDULED", "STARTING", "RUNNING"}
FINISHED = {"SUCCEEDED", "FAILED", "CANCELLED"}
DEFAULT_PREFERENCES = ["ml.p5.48xlarge:1", "ml.p4d.24xlarge:1"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url",
        default="http://127.0.0.1:8000",
        help="quotaportal's address (default %(default)s); /api/v1 is added if missing",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get("QUOTAPORTAL_TOKEN"),
        help="API token (manage.py drf_create_token USER); default $QUOTAPORTAL_TOKEN",
    )
    parser.add_argument("--count", type=int, default=3, help="jobs to submit (default %(default)s)")
    parser.add_argument("--queue", default="training", help="job queue name (default %(default)s)")
    parser.add_argument("--share", default="nlp", help="quota share name (default %(default)s)")
    parser.add_argument(
        "--prefer",
        action="append",
        metavar="TYPE:COUNT[:PLAN]",
        help="a preference entry, in order; repeat for up to five "
        f"(default {' then '.join(DEFAULT_PREFERENCES)})",
    )
    parser.add_argument("--priority", type=int, default=0, help="scheduling_priority 0..9999")
    parser.add_argument(
        "--duration",
        type=int,
        default=120,
        help="duration_seconds, what the simulated executor runs (default %(default)s)",
    )
    parser.add_argument(
        "--batch",
        default=f"batch-{int(time.time())}",
        help="prefix of the jobs' names and client tokens (default batch-<unix time>)",
    )
    parser.add_argument(
        "--command",
        help="the program each job runs, e.g. 'python3 train.py --epochs 3' (payload.command, split like a "
        "shell line); a queue whose environment has an external executor refuses jobs without one",
    )
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between polls")
    parser.add_argument("--timeout", type=float, default=600.0, help="stop polling after this many seconds")
    args = parser.parse_args(argv)
    if not args.token:
        parser.error("give --token or set QUOTAPORTAL_TOKEN")
    if args.count < 1:
        parser.error("--count must be at least 1")
    return args


def api_base(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/api/v1") else f"{url}/api/v1"


def preference(entry: str) -> dict:
    """`ml.p5.48xlarge:2:dec-p5` -> {"instance_type": ..., "instance_count": 2, "training_plan": "dec-p5"}."""
    parts = entry.split(":")
    if len(parts) not in (2, 3) or not parts[1].isdigit():
        raise SystemExit(f"--prefer {entry!r}: use TYPE:COUNT or TYPE:COUNT:PLAN")
    body = {"instance_type": parts[0], "instance_count": int(parts[1])}
    if len(parts) == 3:
        body["training_plan"] = parts[2]
    return body


def describe_error(response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}: {response.text[:200]}"
    if isinstance(body, dict) and set(body) == {"detail"}:
        return f"HTTP {response.status_code}: {body['detail']}"
    fields = "; ".join(f"{field}: {' '.join(messages)}" for field, messages in body.items())
    return f"HTTP {response.status_code}: {fields}"


def submit(session: requests.Session, base: str, args: argparse.Namespace) -> list[dict]:
    entries = [preference(entry) for entry in (args.prefer or DEFAULT_PREFERENCES)]
    jobs = []
    for number in range(1, args.count + 1):
        body = {
            "name": f"{args.batch}-{number}",
            "job_queue": args.queue,
            "quota_share": args.share,
            "instance_preferences": entries,
            "scheduling_priority": args.priority,
            "duration_seconds": args.duration,
            "payload": {
                "batch": args.batch,
                "index": number,
                **({"command": shlex.split(args.command)} if args.command else {}),
            },
            "client_token": f"{args.batch}-{number}",
        }
        response = session.post(f"{base}/jobs/", json=body, timeout=30)
        if response.status_code not in (200, 201):
            print(f"job {number}: refused, {describe_error(response)}", file=sys.stderr)
            raise SystemExit(1)
        job = response.json()
        how = "submitted" if response.status_code == 201 else "already submitted (same client token)"
        print(f"job {job['id']} {job['name']}: {how}")
        jobs.append(job)
    return jobs


def settled(job: dict) -> bool:
    return job["status"] in PLACED or job["status"] in FINISHED


def poll(
    session: requests.Session, base: str, jobs: list[dict], *, interval: float, timeout: float
) -> list[dict]:
    """Re-read the jobs until each is placed or finished, or the timeout passes; returns their last state."""
    latest = {job["id"]: job for job in jobs}
    deadline = time.monotonic() + timeout
    while True:
        waiting = [job_id for job_id, job in latest.items() if not settled(job)]
        if not waiting or time.monotonic() >= deadline:
            return list(latest.values())
        time.sleep(interval)
        for job_id in waiting:
            response = session.get(f"{base}/jobs/{job_id}/", timeout=30)
            response.raise_for_status()
            job = response.json()
            if job["status"] != latest[job_id]["status"]:
                print(f"job {job_id}: {latest[job_id]['status']} -> {job['status']}")
            latest[job_id] = job


def print_summary(jobs: list[dict]) -> None:
    print()
    print(f"{'id':>6}  {'name':<28} {'status':<10} {'placed on':<28} reason")
    for job in sorted(jobs, key=lambda job: job["id"]):
        where = ""
        if job["selected_instance_type"]:
            where = f"{job['selected_instance_type']} x{job['selected_instance_count']}"
            if job["selected_training_plan"]:
                where += f" ({job['selected_training_plan']})"
        reason = job["status_reason"] if job["status"] == "RUNNABLE" else ""
        print(f"{job['id']:>6}  {job['name']:<28} {job['status']:<10} {where:<28} {reason[:100]}")
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job["status"]] = counts.get(job["status"], 0) + 1
    print("\n" + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    base = api_base(args.url)
    with requests.Session() as session:
        session.headers["Authorization"] = f"Token {args.token}"
        jobs = submit(session, base, args)
        jobs = poll(session, base, jobs, interval=args.interval, timeout=args.timeout)
    print_summary(jobs)
    if all(settled(job) for job in jobs):
        return 0
    print(f"timed out after {args.timeout:.0f}s with jobs still RUNNABLE", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
