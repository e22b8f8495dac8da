"""What a soak run counts and says: its Stats (requests, samples, faults, violations), the report it prints
(and writes as JSON), and the excerpts of answers and logs that a failure quotes."""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tools.soak.invariants import SAMPLE_SECONDS


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@dataclass
class Stats:
    """What a run counts and finds, written by its threads under `lock`."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: Counter = field(default_factory=Counter)  # (operation, status) -> n
    submit_latency_ms: list[float] = field(default_factory=list)
    submitted: dict[int, str] = field(default_factory=dict)  # job id -> client
    tokens: dict[str, int] = field(default_factory=dict)  # client_token -> job id
    submissions_tried: int = 0
    failed_submissions: int = 0
    violations: list[str] = field(default_factory=list)
    tolerated: list[str] = field(default_factory=list)  # failures inside a fault's window
    samples: int = 0
    sample_ms: list[float] = field(default_factory=list)
    sample_errors: int = 0
    stopping: Counter = field(default_factory=Counter)  # samples with STOPPING jobs, and those jobs
    fault_windows: list[tuple[float, float]] = field(default_factory=list)
    fault_notes: list[str] = field(default_factory=list)
    agent_notes: dict = field(
        default_factory=dict
    )  # with agents: processes, tasks, start timeouts, lost tasks

    def record(self, operation: str, status: int | str) -> None:
        with self.lock:
            self.requests[(operation, status)] += 1

    def violation(self, message: str) -> None:
        with self.lock:
            self.violations.append(message)

    def in_fault_window(self, started: float) -> bool:
        return any(begin <= started <= end for begin, end in self.fault_windows)

    def unexpected(self, started: float, message: str) -> None:
        """A request or sample that failed: tolerated if it began inside a fault's window, else a violation."""
        if self.in_fault_window(started):
            with self.lock:
                self.tolerated.append(message)
        else:
            self.violation(message)


def report_write(r: dict, out, style, json_path: str | None) -> None:
    """The run's figures and violations on `out` (a command's stdout, in its `style`), and in `json_path`."""
    write = out.write
    o = r["options"]
    write(
        f"\nquotaportal soak: {r['load_seconds']} s load, {o['clients']} clients, {o['workers']} Celery "
        f"workers + beat, gunicorn x{o['web_workers']}, faults: {', '.join(o['fault']) or 'none'}, "
        + (
            f"{o['agents']} {'mixed ' if o.get('mixed_agents') else ''}agents on the external queue"
            if o.get("agents")
            else "the external queue's fake executor"
        )
    )
    rows = [
        (
            "requests",
            f"{r['requests']} ({r['requests_per_second']}/s); "
            + ", ".join(f"{op} {n}" for op, n in r["by_operation"].items()),
        ),
        ("HTTP statuses", ", ".join(f"{code}: {n}" for code, n in r["statuses"].items())),
        ("submissions", f"{r['submissions']} accepted ({r['submissions_per_second']}/s)"),
        (
            "submit latency",
            f"p50 {r['submit_latency_ms']['p50']} ms, p99 {r['submit_latency_ms']['p99']} ms, "
            f"max {r['submit_latency_ms']['max']} ms",
        ),
        ("jobs", f"{r['jobs_total']}: " + ", ".join(f"{s} {n}" for s, n in r["jobs"].items())),
        (
            "passes",
            f"{r['passes']} ("
            + ", ".join(f"{t} {n}" for t, n in r["passes_by_trigger"].items())
            + f"); duration p50 {r['pass_ms']['p50']} ms, p99 {r['pass_ms']['p99']} ms, "
            f"max {r['pass_ms']['max']} ms",
        ),
        ("events", ", ".join(f"{k} {n}" for k, n in r["events"].items())),
        (
            "samples",
            f"{r['samples']} every {SAMPLE_SECONDS} s in REPEATABLE READ, "
            f"p50 {r['sample_ms']['p50']} ms, "
            f"max {r['sample_ms']['max']} ms, {r['sample_errors']} failed; "
            f"{r['samples_with_stopping_jobs']} with STOPPING jobs (counted with their capacity)",
        ),
        ("replay", f"{r['attempts']} attempts, {r['replay_change_points']} change points checked"),
        ("histories", f"{r['histories_checked']} checked, {r['histories_broken']} inconsistent"),
        ("drain", f"{r['drain_seconds']} s; pass tasks left in the broker: {r['broker_backlog_at_end']}"),
    ]
    if r.get("agents"):
        a = r["agents"]
        rows.append(
            (
                "agents",
                f"{a['processes']} processes ({a['tasks']} tasks of jobs run as tasks), "
                f"{a['start_timeouts']} start timeouts, {a['tasks_lost']} tasks lost; slots and unstarted "
                f"holds checked from the processes' notes: {a['violations']} violations",
            )
        )
    rows += [("fault", note) for note in r["faults"]]
    if r["faults"]:
        rows.append(("tolerated", f"{r['tolerated_in_fault_windows']} failed requests inside fault windows"))
    rows.append(("violations", str(len(r["violations"]))))
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        write(f"  {label:<{width}}  {value}")
    for message in r["violations"][:40]:
        write(style.ERROR(f"  VIOLATION {message}"))
    write(style.SUCCESS("RESULT: PASS") if not r["violations"] else style.ERROR("RESULT: FAIL"))
    if json_path:
        Path(json_path).write_text(json.dumps(r, indent=2, default=str))


def answer_text(response) -> str:
    """The start of an unexpected answer, without the markup of an error page."""
    if "html" in response.headers.get("Content-Type", ""):
        title = response.text.partition("<title>")[2].partition("</title>")[0]
        return f"(an HTML page: {title.strip() or 'untitled'})"
    return response.text[:300]


def logs_excerpt(log_dir: Path, *, limit: int = 6000) -> str:
    """What the soak's services logged as errors (tracebacks, ERROR and CRITICAL lines), and the last lines of
    every agent's log: a failed run says why without its log directory, which a CI machine does not keep."""
    parts = []
    for path in sorted(log_dir.glob("*.log")):
        lines = path.read_text(errors="replace").splitlines()
        if path.name.startswith("agent"):
            kept = lines[-15:]
        else:
            kept, inside = [], False
            for line in lines:
                if line.startswith("Traceback") or " ERROR " in line or " CRITICAL " in line:
                    inside = True
                elif inside and line[:4].isdigit():  # a new timestamped line ends a traceback
                    inside = False
                if inside:
                    kept.append(line)
        if kept:
            parts.append(f"--- {path.name}\n" + "\n".join(kept[-60:]))
    text = "\n".join(parts) or "the services logged no errors"
    return f"what the logs say ({log_dir}):\n" + (text if len(text) <= limit else "[...]" + text[-limit:])
