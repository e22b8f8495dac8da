"""What the web server's entry point (`quotaportal.wsgi`) does before the first request."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_web_worker_has_loaded_the_views_before_its_first_request():
    """Else each gunicorn worker's first request imports the URLconf and every view: 0.5-1 s, after every
    start or restart of a worker, that the clients of its first requests wait for."""
    probe = "import sys, quotaportal.wsgi; print(sorted({'api.views', 'portal.urls'} - set(sys.modules)))"
    env = {**os.environ, "DEBUG": "1", "DJANGO_SETTINGS_MODULE": "quotaportal.settings"}
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
