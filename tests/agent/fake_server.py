"""A stand-in for quotaportal's executor endpoints, faithful to the protocol the agent codes to.

The work endpoint (GET service-environments/ID/work/) claims placed jobs for the caller and lists stopping ones, holding
the request up to `wait` seconds until there is some; `POST /api/v1/jobs/{id}/report/` checks the attempt (stale
-> 409) and the transition (illegal -> 409), accepts repeats, and 404s unknown jobs. `go_down`/`come_up` close and
reopen the port, so the agent sees connections refused, as in a real outage.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

TOKEN = "test-token"
ENVIRONMENT_ID = 7
ENVIRONMENT_NAME = "local"
INSTANCE_TYPE = "gpu.small"

ACTIVE = {"SCHEDULED", "STARTING", "RUNNING", "STOPPING"}
ALLOWED = {
    "SCHEDULED": {"STARTING", "RUNNING", "SUCCEEDED", "FAILED"},
    "STARTING": {"STARTING", "RUNNING", "SUCCEEDED", "FAILED"},
    "RUNNING": {"RUNNING", "SUCCEEDED", "FAILED"},
    # A RUNNING report while stopping only renews the lease; the job stays STOPPING.
    "STOPPING": {"STARTING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED"},
}


@dataclass
class FakeJob:
    id: int
    name: str
    payload: Any
    instance_type: str
    instance_count: int
    stop_grace_seconds: float
    gpus_per_instance: int | None = None  # None: the entry leaves it out, as servers before it did
    attempt: int = 1
    status: str = "SCHEDULED"
    claimed: int = 0  # how many times a start of the current attempt was handed out
    deadline: float | None = None


@dataclass
class Received:
    job_id: int
    body: dict
    code: int
    at: float


@dataclass
class FakeServer:
    jobs: dict[int, FakeJob] = field(default_factory=dict)
    reports: list[Received] = field(default_factory=list)
    polls: int = 0
    offers: list[int | None] = field(default_factory=list)  # the free_slots of every poll
    pollers: set[tuple[str, str]] = field(default_factory=set)  # (executor, host) of every poll
    resend_claimed: bool = False  # also offer jobs handed out before but not yet reported STARTING
    down_after_claim: bool = False  # an outage right after the next start is handed out
    refuse_output: bool = False  # answer 400 to any report with an output tail, as to a field it cannot take
    garbage: bytes | None = None  # answer every GET with 200 and this body (a proxy's page, a wrong server)
    garbage_answers: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)
    port: int = 0
    down: bool = False
    _httpd: ThreadingHTTPServer | None = None
    _outage_after_answer: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def come_up(self) -> None:
        handler = type("Handler", (_Handler,), {"server_state": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.down = False
        threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def go_down(self) -> None:
        self.down = True
        with self.changed:
            self.changed.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- what a test does on the server's side ------------------------------------------------------

    def add_job(
        self,
        payload: Any,
        *,
        instance_count: int = 1,
        grace: float = 2.0,
        name: str = "",
        gpus_per_instance: int | None = None,
    ) -> int:
        with self.changed:
            job_id = 100 + len(self.jobs)
            self.jobs[job_id] = FakeJob(
                job_id,
                name or f"job-{job_id}",
                payload,
                INSTANCE_TYPE,
                instance_count,
                grace,
                gpus_per_instance,
            )
            self.changed.notify_all()
        return job_id

    def request_stop(self, job_id: int, grace: float) -> float:
        with self.changed:
            job = self.jobs[job_id]
            job.status, job.deadline = "STOPPING", time.time() + grace
            self.changed.notify_all()
            return job.deadline

    def lose(self, job_id: int) -> None:
        """The lease ran out: the attempt is given up (and not placed again in these tests)."""
        with self.changed:
            job = self.jobs[job_id]
            job.attempt, job.status, job.claimed = job.attempt + 1, "RUNNABLE", 0

    def accepted(self, job_id: int) -> list[str]:
        with self.changed:
            return [r.body["status"] for r in self.reports if r.job_id == job_id and r.code == 200]

    def final(self, job_id: int) -> Received | None:
        with self.changed:
            finals = [
                r
                for r in self.reports
                if r.job_id == job_id
                and r.code == 200
                and r.body["status"] in {"SUCCEEDED", "FAILED", "STOPPED"}
            ]
        return finals[0] if finals else None

    def wait_final(self, job_id: int, timeout: float = 10.0) -> Received:
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            if (found := self.final(job_id)) is not None:
                return found
            time.sleep(0.02)
        raise AssertionError(f"job {job_id}: no final report in {timeout}s; got {self.accepted(job_id)}")

    # -- the protocol ---------------------------------------------------------------------------------

    def work(self, instance_type: str, wait: float, free_slots: int | None = None) -> dict:
        until = time.monotonic() + wait
        with self.changed:
            self.polls += 1
            self.offers.append(free_slots)
            while True:
                start = [
                    job
                    for job in self.jobs.values()
                    if job.status == "SCHEDULED"
                    and job.instance_type == instance_type
                    and (job.claimed == 0 or self.resend_claimed)
                ]
                if free_slots is not None:  # as the real server: in order, what fits in what is left
                    left_over, fitting = free_slots, []
                    for job in start:
                        if job.instance_count <= left_over:
                            fitting.append(job)
                            left_over -= job.instance_count
                    start = fitting
                stop = [job for job in self.jobs.values() if job.status == "STOPPING"]
                left = until - time.monotonic()
                if start or stop or left <= 0 or self.down:
                    break
                self.changed.wait(left)
            for job in start:
                job.claimed += 1
            self._outage_after_answer = bool(start) and self.down_after_claim
            self.down_after_claim = self.down_after_claim and not start
            return {
                "start": [
                    {
                        "id": job.id,
                        "name": job.name,
                        "attempt": job.attempt,
                        "instance_type": job.instance_type,
                        "instance_count": job.instance_count,
                        "training_plan": None,
                        "payload": job.payload,
                        "stop_grace_seconds": job.stop_grace_seconds,
                    }
                    | ({} if job.gpus_per_instance is None else {"gpus_per_instance": job.gpus_per_instance})
                    for job in start
                ],
                "stop": [
                    {
                        "id": job.id,
                        "attempt": job.attempt,
                        "deadline": datetime.fromtimestamp(job.deadline, UTC)
                        .isoformat()
                        .replace("+00:00", "Z"),
                    }
                    for job in stop
                ],
            }

    def report(self, job_id: int, body: dict) -> tuple[int, dict]:
        with self.changed:
            job = self.jobs.get(job_id)
            refused = _field_errors(body, refuse_output=self.refuse_output)
            if refused:
                code, answer = 400, refused
            elif job is None:
                code, answer = 404, {"detail": "Not found."}
            elif body.get("attempt") != job.attempt:
                code, answer = (
                    409,
                    {"detail": f"attempt {body.get('attempt')} is stale: current {job.attempt}"},
                )
            elif body["status"] == job.status and job.status not in ACTIVE:
                code, answer = 200, {"status": job.status}  # a repeated final report
            elif body["status"] not in ALLOWED.get(job.status, set()):
                code, answer = 409, {"detail": f"{job.status} -> {body['status']} is not allowed"}
            else:
                if not (job.status == "STOPPING" and body["status"] in {"STARTING", "RUNNING"}):
                    job.status = body["status"]
                code, answer = 200, {"status": job.status}
            self.reports.append(Received(job_id, body, code, time.time()))
            self.changed.notify_all()
            return code, answer


def _field_errors(body: dict, *, refuse_output: bool) -> dict[str, list[str]]:
    """The real serializer's field checks (api.serializers.JobReportSerializer): 400 naming each field."""
    errors: dict[str, list[str]] = {}
    for name, most in (("reason", 2000), ("output_tail", 65536)):
        text = body.get(name, "")
        if not isinstance(text, str):
            errors[name] = ["Not a valid string."]
        elif "\0" in text:
            errors[name] = ["Null characters are not allowed."]
        elif len(text) > most:
            errors[name] = [f"Ensure this field has no more than {most} characters."]
    exit_code = body.get("exit_code")
    if exit_code is not None and not -(2**31) <= exit_code < 2**31:
        errors["exit_code"] = ["Ensure this value is within the range of a 32-bit integer."]
    if refuse_output and body.get("output_tail"):
        errors.setdefault("output_tail", []).append("refused by this test")
    return errors


class _Handler(BaseHTTPRequestHandler):
    server_state: FakeServer

    def log_message(self, *args):  # quiet
        pass

    def _answer(self, code: int, body: dict) -> None:
        if self.server_state.down:
            self.close_connection = True
            return
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        if self.server_state._outage_after_answer:
            self.server_state._outage_after_answer = False
            self.server_state.down = True  # from this instant every request goes unanswered
            threading.Thread(target=self.server_state.go_down, daemon=True).start()

    def _authorized(self) -> bool:
        if self.headers.get("Authorization") == f"Token {TOKEN}":
            return True
        self._answer(401, {"detail": "Invalid token."})
        return False

    def do_GET(self):
        if not self._authorized():
            return
        if self.server_state.garbage is not None:
            self.server_state.garbage_answers += 1
            self.send_response(200)
            self.send_header("Content-Length", str(len(self.server_state.garbage)))
            self.end_headers()
            self.wfile.write(self.server_state.garbage)
            return
        url = urlparse(self.path)
        query = parse_qs(url.query)
        if url.path == "/api/v1/service-environments/":
            results = [{"id": ENVIRONMENT_ID, "name": ENVIRONMENT_NAME, "executor": "external"}]
            self._answer(200, {"count": 1, "next": None, "previous": None, "results": results})
        elif url.path == "/".join(["/api/v1/service-environments", str(ENVIRONMENT_ID), "work", ""]):
            wait = min(30.0, float(query.get("wait", ["0"])[0]))
            with self.server_state.changed:
                self.server_state.pollers.add((query.get("executor", [""])[0], query.get("host", [""])[0]))
            free = query.get("free_slots", [None])[0]
            self._answer(
                200,
                self.server_state.work(
                    query.get("instance_type", [""])[0], wait, None if free is None else int(free)
                ),
            )
        else:
            self._answer(404, {"detail": "Not found."})

    def do_POST(self):
        if self.server_state.down or not self._authorized():
            self.close_connection = True
            return
        match = re.fullmatch(r"/api/v1/jobs/(\d+)/report/", urlparse(self.path).path)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if match is None:
            self._answer(404, {"detail": "Not found."})
            return
        self._answer(*self.server_state.report(int(match.group(1)), body))
