"""Production settings pass `check --deploy` with no warning and send a content security policy."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_production_settings_pass_check_deploy(tmp_path):
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "quotaportal.settings",
        "QUOTAPORTAL_VAR_DIR": str(tmp_path),
        "DEBUG": "0",
        "HTTPS": "1",
        "ALLOWED_HOSTS": "quotaportal.example.com",
        "SECRET_KEY": "k3J9-production-secret-with-enough-entropy-8xQ2vLw0pZr7TnYc4sBd",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


@pytest.mark.django_db
def test_pages_carry_a_content_security_policy(client):
    response = client.get("/admin/login/")
    policy = response.headers["Content-Security-Policy"]
    assert (
        "script-src 'self'" in policy and "unsafe-eval" not in policy and "frame-ancestors 'none'" in policy
    )


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"DEBUG": "0"}, "SECRET_KEY must be set when DEBUG is off"),
        ({"DEBUG": "1", "PASS_INTERVAL_SECONDS": "abc"}, "PASS_INTERVAL_SECONDS='abc' is not a whole number"),
        ({"DEBUG": "maybe"}, "DEBUG='maybe' is not a boolean"),
    ],
)
def test_a_bad_environment_is_one_line_naming_the_variable(tmp_path, variables, named):
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "quotaportal.settings",
        "QUOTAPORTAL_VAR_DIR": str(tmp_path),
        **variables,
    }
    result = subprocess.run([sys.executable, "manage.py", "check"], env=env, capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.startswith(f"quotaportal: configuration error: {named}")
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
