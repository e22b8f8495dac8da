"""quotaportal's REST API as the agent uses it: the work long-poll, reports, and finding an environment.

No method raises on a server outage: a poll that fails returns None, a report says whether to retry, and the
caller waits with a `Backoff` before trying again. An answer is read up to `max_answer_bytes` (a work document
of hundreds of jobs is some kilobytes); a longer one is taken as a server fault, like an outage, so a broken or
hostile server cannot make the agent hold an answer of any size, nor list environments without end.
"""

from __future__ import annotations

import enum
import json
import logging
import random
import threading
from dataclasses import dataclass
from typing import Any

import requests

log = logging.getLogger(__name__)

USER_AGENT = "quotaportal-agent/0.1"
MAX_ANSWER_BYTES = 4 * 1024 * 1024
MAX_ENVIRONMENT_PAGES = 1000


class AnswerTooLarge(Exception):
    pass


@dataclass(frozen=True)
class Answer:
    """A server's answer, read whole but never beyond the client's cap."""

    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


class Delivery(enum.Enum):
    """What became of one report."""

    DELIVERED = "delivered"  # 200: recorded (a repeat is harmless)
    CONFLICT = "conflict"  # 409: a stale attempt or an illegal transition; never retried
    GONE = "gone"  # 404: the job no longer exists
    REFUSED = "refused"  # any other 4xx but 401/403/429: the server will never take it
    RETRY = "retry"  # server down, 5xx, 401/403/429: try again later, in order


@dataclass(frozen=True)
class ReportOutcome:
    delivery: Delivery
    detail: str = ""


class Backoff:
    """Exponential backoff with jitter; `wait` returns early when `stop` is set."""

    def __init__(self, initial: float = 0.5, maximum: float = 30.0):
        self.initial, self.maximum = initial, maximum
        self.delay = initial

    def reset(self) -> None:
        self.delay = self.initial

    def wait(self, stop: threading.Event) -> None:
        # Jitter so that many agents cut off by the same outage do not all come back in the same second.
        stop.wait(self.delay * random.uniform(0.5, 1.0))
        self.delay = min(self.delay * 2, self.maximum)


class Client:
    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 10.0,
        executor: str = "",
        host: str = "",
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ):
        self.base = url.rstrip("/") + "/api/v1"
        self.timeout = timeout
        self.max_answer_bytes = max_answer_bytes
        # Who polls: the server lists this executor's jobs to stop, and shows it on the environment's page.
        self.identity = {key: value for key, value in (("executor", executor), ("host", host)) if value}
        self._local = threading.local()  # a requests.Session is not thread-safe: one per thread
        self._headers = {"Authorization": f"Token {token}", "User-Agent": USER_AGENT}

    def url(self, *parts: object) -> str:
        """An API address: `url("jobs", 4, "report")` is BASE/api/v1/jobs/4/report/."""
        return "/".join([self.base, *map(str, parts)]) + "/"

    @property
    def session(self) -> requests.Session:
        if not hasattr(self._local, "session"):
            self._local.session = requests.Session()
            self._local.session.headers.update(self._headers)
        return self._local.session

    def _ask(self, method: str, url: str, **kwargs: Any) -> Answer:
        """One request, its answer read in pieces up to the cap (`AnswerTooLarge` past it)."""
        with self.session.request(method, url, stream=True, **kwargs) as response:
            content, size = [], 0
            for piece in response.iter_content(chunk_size=64 * 1024):
                size += len(piece)
                if size > self.max_answer_bytes:
                    raise AnswerTooLarge(f"{method} {url} answered more than {self.max_answer_bytes} bytes")
                content.append(piece)
            return Answer(response.status_code, b"".join(content))

    def work(
        self,
        environment_id: int,
        instance_type: str,
        wait: int,
        free_slots: int | None = None,
        tasks: dict[str, Any] | None = None,
    ) -> dict[str, list[dict]] | None:
        """Jobs to start (claimed for this agent; with `free_slots`, only jobs that fit in them), tasks whose
        roster came (`go`) and jobs to stop; None if the server could not be asked. With `tasks` (this host's
        `slots`, `address` and `ports`) the agent asks for tasks: it may be handed part of a job."""
        params = {"instance_type": instance_type, "wait": wait, **self.identity}
        if free_slots is not None:
            params["free_slots"] = max(0, free_slots)
        if tasks is not None:
            params["gang"] = "true"
            params.update({key: value for key, value in tasks.items() if value not in (None, "")})
        try:
            response = self._ask(
                "GET",
                self.url("service-environments", environment_id, "work"),
                params=params,
                timeout=self.timeout + wait,
            )
        except (requests.RequestException, AnswerTooLarge) as error:
            log.warning("work poll failed: %s", error)
            return None
        if response.status_code != 200:
            log.warning("work poll answered %s: %s", response.status_code, response.text[:200])
            return None
        try:
            body = response.json()
            work = {"start": list(body.get("start") or []), "stop": list(body.get("stop") or [])}
            if tasks is not None:
                work["go"] = list(body.get("go") or [])
            return work
        except (
            ValueError,
            AttributeError,
            TypeError,
            RecursionError,
        ):  # RecursionError: JSON nested too deep
            log.warning("work poll answered something that is not the work document: %.200s", response.text)
            return None

    def offer(self, environment_id: int, free_slots: int) -> bool:
        """Say the agent's free slots changed (its waiting poll claims with them); False if not heard."""
        body = {"executor": self.identity.get("executor", ""), "free_slots": max(0, free_slots)}
        try:
            response = self._ask(
                "POST",
                self.url("service-environments", environment_id, "offer"),
                json=body,
                timeout=self.timeout,
            )
        except (requests.RequestException, AnswerTooLarge) as error:
            log.warning("offer failed: %s", error)
            return False
        return response.status_code == 204

    def report(self, job_id: int, body: dict[str, Any]) -> ReportOutcome:
        if "task" in body and self.identity.get("executor"):
            body = {**body, "executor": self.identity["executor"]}  # whose task: a rank may be claimed again
        try:
            response = self._ask(
                "POST", f"{self.base}/jobs/{job_id}/report/", json=body, timeout=self.timeout
            )
        except (requests.RequestException, AnswerTooLarge) as error:
            return ReportOutcome(Delivery.RETRY, str(error))
        detail = _detail(response)
        status = response.status_code
        if 200 <= status < 300:
            return ReportOutcome(Delivery.DELIVERED)
        if status == 409:
            return ReportOutcome(Delivery.CONFLICT, detail)
        if status == 404:
            return ReportOutcome(Delivery.GONE, detail)
        # A token without the permission yet, or throttling, can be fixed while we wait; a 400 cannot.
        if 400 <= status < 500 and status not in (401, 403, 408, 429):
            return ReportOutcome(Delivery.REFUSED, f"{status}: {detail}")
        return ReportOutcome(Delivery.RETRY, f"{status}: {detail}")

    def environments(self) -> list[dict] | None:
        """Every service environment (all pages), or None if the server could not be asked."""
        found, url, seen = [], self.url("service-environments"), set()
        while url:
            if url in seen or len(seen) >= MAX_ENVIRONMENT_PAGES:
                log.warning("listing service environments: the pages do not end (%s again)", url)
                return None
            seen.add(url)
            try:
                response = self._ask("GET", url, timeout=self.timeout)
            except (requests.RequestException, AnswerTooLarge) as error:
                log.warning("listing service environments failed: %s", error)
                return None
            if response.status_code in (401, 403):
                raise PermissionError(f"the server refused the token ({response.status_code})")
            if response.status_code != 200:
                log.warning("listing service environments answered %s", response.status_code)
                return None
            try:
                page = response.json()
                results, url = page["results"], page.get("next")
                if not isinstance(results, list) or not isinstance(url, str | None):
                    raise TypeError("not a page of environments")
                # An entry without a numeric id names nothing we could poll.
                found += [e for e in results if isinstance(e, dict) and str(e.get("id", "")).isdigit()]
            except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
                log.warning("listing service environments answered something else: %.200s", response.text)
                return None
        return found


def _detail(response: Answer) -> str:
    try:
        return str(response.json().get("detail", ""))[:500]
    except (ValueError, AttributeError, RecursionError):
        return response.text[:500]
