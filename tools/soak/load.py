"""The soak's load on the REST API, in threads: clients that submit, cancel, reprioritise and read jobs, and,
without agents, the external queue's executor, which reports its jobs' progress as an executor would."""

from __future__ import annotations

import random
import threading
import time

import requests

from tools.soak.report import Stats, answer_text
from tools.soak.world import EXT_QUEUE, soak_job_body

REQUEST_TIMEOUT = 30


class Load:
    """The load of one run against `base` on the soak's `world`: its clients go on until `deadline` (a
    `time.monotonic()` instant), with at most `jobs` submissions in all; every answer counts in `stats`, and one
    that is not among those expected is a violation (outside a fault's window)."""

    def __init__(self, base: str, world: dict, stats: Stats, *, seed: int, jobs: int, deadline: float):
        self.base, self.world, self.stats = base, world, stats
        self.seed, self.jobs, self.deadline = seed, jobs, deadline
        self.executor_heartbeat = time.monotonic()  # when the external executor last began a round

    def client(self, index: int, load_over: threading.Event) -> None:
        """One client thread: its own user, token and random sequence, until the deadline or `load_over`."""
        try:
            self._client_loop(index, load_over)
        except Exception as exc:  # a client that dies says so
            self.stats.violation(f"client {index}: {type(exc).__name__}: {exc}")

    def _client_loop(self, index: int, load_over: threading.Event) -> None:
        base, world = self.base, self.world
        stats, rng = self.stats, random.Random(self.seed * 1000 + index)
        user = world["clients"][index]
        session = requests.Session()
        session.headers["Authorization"] = f"Token {user['token']}"
        mine: list[int] = []
        tokens: list[tuple[str, int]] = []
        serial = 0
        while time.monotonic() < self.deadline and not load_over.is_set():
            roll = rng.random()
            if roll < 0.55 or not mine:
                with stats.lock:  # past --jobs submissions, the clients go on with everything else
                    allowed = stats.submissions_tried < self.jobs
                    stats.submissions_tried += allowed
                if allowed:
                    serial += 1
                    self._submit(session, base, rng, user, mine, tokens, f"{user['name']}-{serial}")
                elif not mine:
                    break
            elif roll < 0.65:
                self._call(
                    session,
                    "cancel",
                    "POST",
                    f"{base}/api/v1/jobs/{rng.choice(mine)}/cancel/",
                    {"reason": "soak"},
                    expected={200, 409},
                )
            elif roll < 0.80:
                self._call(
                    session,
                    "priority",
                    "PATCH",
                    f"{base}/api/v1/jobs/{rng.choice(mine)}/",
                    {"scheduling_priority": rng.randint(0, 100)},
                    expected={200, 409},
                )
            elif roll < 0.95:
                self._call(session, "read", "GET", f"{base}/api/v1/jobs/{rng.choice(mine)}/", expected={200})
            else:
                queue = rng.choice(world["queue_ids"])
                self._call(
                    session, "snapshot", "GET", f"{base}/api/v1/job-queues/{queue}/snapshot/", expected={200}
                )

    def _submit(self, session, base, rng, user, mine, tokens, name) -> None:
        stats = self.stats
        if tokens and rng.random() < 0.08:  # a retried submission: the first job comes back, 200
            token, job_id = rng.choice(tokens)
            body = {**user["body_for"][token], "client_token": token}
            response = self._call(
                session, "submit-repeat", "POST", f"{base}/api/v1/jobs/", body, expected={200}
            )
            if response is not None and response.status_code == 200 and response.json()["id"] != job_id:
                stats.violation(f"client_token {token} returned job {response.json()['id']}, not {job_id}")
            return
        if rng.random() < 0.05:  # a bad submission: refused with a 400, nothing stored
            body = soak_job_body(rng, user, name)
            body["instance_preferences"][0]["instance_count"] = 10_000
            self._call(session, "submit-invalid", "POST", f"{base}/api/v1/jobs/", body, expected={400})
            return
        body = soak_job_body(rng, user, name)
        token = f"{name}-t" if rng.random() < 0.5 else None
        if token:
            body["client_token"] = token
        started = time.monotonic()
        response = self._call(session, "submit", "POST", f"{base}/api/v1/jobs/", body, expected={201})
        if response is not None and response.status_code == 201:
            job_id = response.json()["id"]
            with stats.lock:
                stats.submit_latency_ms.append((time.monotonic() - started) * 1000)
                stats.submitted[job_id] = user["name"]
            mine.append(job_id)
            if token:
                tokens.append((token, job_id))
                user["body_for"][token] = {k: v for k, v in body.items() if k != "client_token"}
        else:
            with stats.lock:
                stats.failed_submissions += 1

    def _call(self, session, operation: str, method: str, url: str, body=None, *, expected: set[int]):
        started = time.monotonic()
        try:
            response = session.request(method, url, json=body, timeout=REQUEST_TIMEOUT)
        except requests.RequestException as exc:
            self.stats.record(operation, "error")
            self.stats.unexpected(started, f"{operation} {method} {url}: {type(exc).__name__}: {exc}")
            return None
        self.stats.record(operation, response.status_code)
        if response.status_code not in expected:
            self.stats.unexpected(
                started, f"{operation} {method} {url}: {response.status_code} {answer_text(response)}"
            )
        return response

    def external_executor(self, stop: threading.Event) -> None:
        """Reports progress on the external queue as an executor would: STARTING, RUNNING, an outcome, and
        STOPPED for a job asked to stop."""
        base, world = self.base, self.world
        session = requests.Session()
        session.headers["Authorization"] = f"Token {world['executor_token']}"
        rng = random.Random(self.seed)
        running_since: dict[int, float] = {}
        while not stop.is_set():
            self.executor_heartbeat = time.monotonic()
            try:
                self._external_round(session, base, rng, running_since)
            except Exception as exc:  # reported, and the executor goes on: a dead one would stall its queue
                self.stats.violation(f"external executor: {type(exc).__name__}: {exc}")
            stop.wait(0.5)

    def _external_round(
        self, session, base: str, rng: random.Random, running_since: dict[int, float]
    ) -> None:
        for status in ("SCHEDULED", "STARTING", "RUNNING", "STOPPING"):
            listing = self._call(
                session,
                "executor-list",
                "GET",
                f"{base}/api/v1/jobs/?job_queue={EXT_QUEUE}&status={status}",
                expected={200},
            )
            if listing is None or listing.status_code != 200:
                continue
            for job in listing.json()["results"]:
                url = f"{base}/api/v1/jobs/{job['id']}/report/"
                if status == "STOPPING":  # asked to stop (a preemption, a drain or a cancel): it has stopped
                    self._call(session, "report", "POST", url, {"status": "STOPPED"}, expected={200, 409})
                    running_since.pop(job["id"], None)
                elif status == "SCHEDULED":
                    self._call(session, "report", "POST", url, {"status": "STARTING"}, expected={200, 409})
                elif status == "STARTING":
                    self._call(session, "report", "POST", url, {"status": "RUNNING"}, expected={200, 409})
                    running_since[job["id"]] = time.monotonic()
                elif time.monotonic() - running_since.setdefault(job["id"], time.monotonic()) >= (
                    job["duration_seconds"] or 1
                ):
                    outcome = "FAILED" if rng.random() < 0.15 else "SUCCEEDED"
                    self._call(
                        session,
                        "report",
                        "POST",
                        url,
                        {"status": outcome, "reason": "soak"},
                        expected={200, 409},
                    )
                    if outcome == "SUCCEEDED" and rng.random() < 0.2:  # a report after the end: 409
                        self._call(
                            session, "report-again", "POST", url, {"status": "RUNNING"}, expected={409}
                        )
