"""Helpers for the operations tests that run real processes against the test database."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from django.conf import settings
from django.db import connection

BASE_DIR = Path(settings.BASE_DIR)
# The Redis database the operations tests may use (CI's own tests use 0); QUOTAPORTAL_TEST_BROKER_DB gives
# another, for developers who share one Redis server.
TEST_BROKER_DB = int(os.environ.get("QUOTAPORTAL_TEST_BROKER_DB", "3"))


def child_database_url() -> str:
    """The URL of the database pytest-django made, for child processes."""
    db = connection.settings_dict
    credentials = quote(db["USER"] or "") + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    return f"postgres://{credentials}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def ops_broker_url() -> str:
    """CELERY_BROKER_URL's Redis server (or the local one) with the database number the ops tests own."""
    url = settings.CELERY_BROKER_URL
    if not url.startswith("redis://"):
        url = "redis://127.0.0.1:6379/0"
    parts = urlsplit(url)
    return f"redis://{parts.netloc}/{TEST_BROKER_DB}"


def require_redis(url: str) -> None:
    """Skip, saying why, when Redis does not answer; CI (QUOTAPORTAL_REQUIRE_POSTGRES set) fails instead."""
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port or 6379), timeout=1) as probe:
            probe.sendall(b"PING\r\n")
            if probe.recv(16).startswith(b"+PONG"):
                return
    except OSError:
        pass
    if os.environ.get("QUOTAPORTAL_REQUIRE_POSTGRES"):
        pytest.fail(f"Redis does not answer at {url} (CI starts it in .ci/run)")
    pytest.skip(f"needs Redis at {url}: start redis-server, or set CELERY_BROKER_URL=redis://...")


def child_env(**overrides: str) -> dict:
    env = os.environ.copy()
    env.update(
        {
            "DATABASE_URL": child_database_url(),
            "SECRET_KEY": settings.SECRET_KEY,
            "DEBUG": "0",
            "QUOTAPORTAL_AUTOPASS": "0",
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(overrides)
    return env


def start(argv: list[str], env: dict, log: Path) -> subprocess.Popen:
    """A child in its own session, so it is stopped with its own children and nothing else."""
    return subprocess.Popen(
        argv,
        env=env,
        cwd=BASE_DIR,
        stdin=subprocess.DEVNULL,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    try:
        os.killpg(process.pid, signal.SIGKILL)  # a pool child its parent left behind
    except ProcessLookupError:
        pass


def wait_for(condition, seconds: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {seconds} s")


PYTHON = sys.executable
