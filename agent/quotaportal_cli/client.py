"""The REST API as qp uses it: a session with the token, and errors read into words with their field names."""

from __future__ import annotations

from typing import Any

import requests

from quotaportal_cli import __version__

USER_AGENT = f"qp/{__version__}"
TIMEOUT_SECONDS = 30


class ApiError(Exception):
    """The portal refused (4xx/5xx) or could not be reached; `str()` is what to show."""

    def __init__(self, message: str, *, status: int | None = None, body: Any = None):
        super().__init__(message)
        self.status = status
        self.body = body


def error_lines(body: Any) -> list[str]:
    """The API's error body as lines: `{"detail": "..."}`, or field -> [messages] (nested fields already
    flattened by the server to `instance_preferences[1].instance_type`)."""
    if isinstance(body, dict):
        if set(body) == {"detail"}:
            return [str(body["detail"])]
        lines = []
        for field, messages in body.items():
            messages = messages if isinstance(messages, list) else [messages]
            label = "" if field == "non_field_errors" else f"{field}: "
            lines += [f"{label}{message}" for message in messages]
        return lines
    if isinstance(body, list):
        return [str(item) for item in body]
    return [str(body)] if body else []


class Client:
    def __init__(self, url: str, token: str):
        self.base = url.rstrip("/") + "/api/v1"
        self.session = requests.Session()
        self.session.headers.update(
            {"Authorization": f"Token {token}", "Accept": "application/json", "User-Agent": USER_AGENT}
        )

    def request(self, method: str, path: str, *, json: Any = None, params: dict | None = None) -> Any:
        url = f"{self.base}{path}"
        try:
            response = self.session.request(method, url, json=json, params=params, timeout=TIMEOUT_SECONDS)
        except requests.Timeout:
            raise ApiError(f"no answer from {self.base} within {TIMEOUT_SECONDS} s") from None
        except requests.ConnectionError:
            raise ApiError(f"cannot reach {self.base}: no server answers there (check --url)") from None
        except requests.RequestException as exc:
            raise ApiError(f"cannot reach {self.base}: {exc}") from None
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = response.text[:500]
        if response.status_code >= 400:
            reason = {
                401: "the token was refused: run `qp login` with a valid token",
                403: "not allowed",
                404: "not found (or not visible to you)",
                429: f"too many requests: retry after {response.headers.get('Retry-After', 'a while')} s",
            }.get(response.status_code, response.reason or "error")
            lines = error_lines(body)
            message = f"HTTP {response.status_code}: {reason}" + "".join(f"\n  {line}" for line in lines)
            raise ApiError(message, status=response.status_code, body=body)
        return body

    def job(self, job_id: int) -> dict:
        return self.request("GET", f"/jobs/{job_id}/")

    def jobs(self, *, filters: dict, limit: int) -> list[dict]:
        """Newest first, following the list's `next` links until `limit` jobs."""
        found: list[dict] = []
        body = self.request("GET", "/jobs/", params={k: v for k, v in filters.items() if v})
        while True:
            found += body.get("results", [])
            if len(found) >= limit or not body.get("next"):
                return found[:limit]
            body = self.request("GET", body["next"].split("/api/v1", 1)[1])

    def submit(self, document: dict) -> dict:
        return self.request("POST", "/jobs/", json=document)

    def cancel(self, job_id: int, reason: str = "") -> dict:
        return self.request("POST", f"/jobs/{job_id}/cancel/", json={"reason": reason})

    def check(self) -> dict:
        """Whether the URL is the portal's and the token good: a small list any signed-in user may read."""
        return self.request("GET", "/instance-types/")
