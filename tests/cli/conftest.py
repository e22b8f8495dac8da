"""qp as a real process against a live server: each test runs `python -m quotaportal_cli` with its own
config folder, so nothing of the machine's own login is read or written."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token

from tests.pages.conftest import build_world

AGENT_DIR = Path(__file__).resolve().parents[2] / "agent"


@dataclass
class Qp:
    url: str
    config: Path
    token: str

    def env(self, *, signed_in: bool = True, **extra) -> dict:
        env = {
            k: v for k, v in os.environ.items() if not k.startswith("QUOTAPORTAL_") and k != "XDG_CONFIG_HOME"
        }
        env.update(PYTHONPATH=str(AGENT_DIR), QUOTAPORTAL_CONFIG=str(self.config))
        if signed_in:
            env.update(QUOTAPORTAL_URL=self.url, QUOTAPORTAL_TOKEN=self.token)
        env.update(extra)
        return env

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "quotaportal_cli", *args]

    def __call__(self, *args: str, stdin: str | None = None, signed_in: bool = True, **env):
        return subprocess.run(
            self.command(*args),
            env=self.env(signed_in=signed_in, **env),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )


@pytest.fixture
def world(db):
    return build_world()


@pytest.fixture
def qp(world, live_server, tmp_path) -> Qp:
    """qp signed in as ana (member of NLP) through QUOTAPORTAL_URL and QUOTAPORTAL_TOKEN."""
    return Qp(
        url=live_server.url,
        config=tmp_path / "qp" / "config.json",
        token=Token.objects.create(user=world.ana).key,
    )
