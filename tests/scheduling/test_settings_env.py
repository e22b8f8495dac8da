"""Settings come from the environment; a bad value is refused with a message naming the variable."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from quotaportal.env import envbool, envint, envlist, envurl


def test_envbool_reads_the_usual_spellings(monkeypatch):
    monkeypatch.setenv("FLAG", "Yes")
    assert envbool("FLAG", False) is True
    monkeypatch.setenv("FLAG", "0")
    assert envbool("FLAG", True) is False


def test_envbool_refuses_anything_else(monkeypatch):
    monkeypatch.setenv("QUOTAPORTAL_AUTOPASS", "maybe")
    with pytest.raises(ImproperlyConfigured, match="QUOTAPORTAL_AUTOPASS='maybe' is not a boolean"):
        envbool("QUOTAPORTAL_AUTOPASS", True)


def test_envint_refuses_text_and_out_of_range(monkeypatch):
    monkeypatch.setenv("PLAN_DRAIN_SECONDS", "half an hour")
    with pytest.raises(ImproperlyConfigured, match="PLAN_DRAIN_SECONDS='half an hour' is not a whole number"):
        envint("PLAN_DRAIN_SECONDS", 1800, minimum=0)
    monkeypatch.setenv("PLAN_DRAIN_SECONDS", "-5")
    with pytest.raises(ImproperlyConfigured, match="PLAN_DRAIN_SECONDS=-5 is below its minimum 0"):
        envint("PLAN_DRAIN_SECONDS", 1800, minimum=0)
    monkeypatch.setenv("PLAN_DRAIN_SECONDS", "600")
    assert envint("PLAN_DRAIN_SECONDS", 1800, minimum=0) == 600


def test_envurl_refuses_an_unknown_database(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "mysql://root@localhost/db")
    with pytest.raises(
        ImproperlyConfigured, match="DATABASE_URL='mysql://root@localhost/db' has an unsupported scheme"
    ):
        envurl("DATABASE_URL", "sqlite:///x", schemes=("sqlite", "postgres"))


def test_envlist_refuses_an_empty_list(monkeypatch):
    monkeypatch.setenv("ALLOWED_HOSTS", " , ")
    with pytest.raises(ImproperlyConfigured, match="ALLOWED_HOSTS is set but empty"):
        envlist("ALLOWED_HOSTS", ["localhost"])


def test_settings_refuse_to_start_without_a_secret_key_in_production(tmp_path):
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", "DEBUG": "0", "QUOTAPORTAL_VAR_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", "import django; from django.conf import settings; django.setup()"],
        env={**env, "DJANGO_SETTINGS_MODULE": "quotaportal.settings"},
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off" in result.stderr


def test_settings_switch_to_postgres_and_redis_from_urls_alone(tmp_path):
    import subprocess
    import sys

    env = {
        "PATH": "/usr/bin:/bin",
        "DEBUG": "1",
        "QUOTAPORTAL_VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "quotaportal.settings",
        "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/test",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
    }
    code = (
        "import django; from django.conf import settings; django.setup(); "
        "print(settings.DATABASES['default']['ENGINE'], settings.CELERY_BROKER_URL)"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.stdout.split() == ["django.db.backends.postgresql", "redis://127.0.0.1:6379/0"], (
        result.stderr
    )


def start(tmp_path, **variables):
    """Load the settings in a fresh process with these variables; returns it finished."""
    import subprocess
    import sys

    env = {
        "PATH": "/usr/bin:/bin",
        "DEBUG": "1",
        "QUOTAPORTAL_VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "quotaportal.settings",
        **variables,
    }
    code = "import django; django.setup(); from django.conf import settings; print(settings.LOGGING['root'])"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


@pytest.mark.parametrize(
    "variable,value,message",
    [
        ("LOG_LEVEL", "LOUD", "LOG_LEVEL='LOUD' is not a level"),
        (
            "DATABASE_URL",
            "postgres://app:s3cret@db:notaport/app",
            "DATABASE_URL='postgres://app:***@db:notaport/app'",
        ),
        (
            "DATABASE_URL",
            "postgres://app@db:99999/app",
            "DATABASE_URL='postgres://app@db:99999/app' is not a valid",
        ),
        ("DATABASE_URL", "postgres://app@db:5432", "DATABASE_URL names no database"),
        (
            "CELERY_BROKER_URL",
            "redis://cache:six/0",
            "CELERY_BROKER_URL='redis://cache:six/0' is not a valid",
        ),
        ("CACHE_URL", "redis://cache:70000/1", "CACHE_URL='redis://cache:70000/1' is not a valid"),
        ("CELERY_QUEUE", "passes for team a", "CELERY_QUEUE='passes for team a' is not a usable name"),
        ("CACHE_KEY_PREFIX", "x" * 65, "CACHE_KEY_PREFIX='" + "x" * 65 + "' is not a usable name"),
        ("EVENT_RETENTION_DAYS", "99999999", "EVENT_RETENTION_DAYS=99999999 is above its maximum"),
        ("HISTORY_DAYS", "4000000", "HISTORY_DAYS=4000000 is above its maximum"),
        (
            "SIMULATED_STARTUP_SECONDS",
            "100000000000000",
            "SIMULATED_STARTUP_SECONDS=100000000000000 is above",
        ),
        ("LOGIN_LOCKOUT_SECONDS", "10000000000000", "LOGIN_LOCKOUT_SECONDS=10000000000000 is above"),
        (
            "QUOTAPORTAL_VAR_DIR",
            "/proc/quotaportal",
            "QUOTAPORTAL_VAR_DIR='/proc/quotaportal': cannot create",
        ),
    ],
)
def test_a_bad_setting_stops_the_start_with_a_message_naming_its_variable(tmp_path, variable, value, message):
    result = start(tmp_path, **{variable: value})

    last_line = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0
    assert last_line.startswith("django.core.exceptions.ImproperlyConfigured: ") and message in last_line
    assert "s3cret" not in result.stderr


def test_log_level_is_read_in_any_case(tmp_path):
    result = start(tmp_path, LOG_LEVEL="warning")

    assert result.returncode == 0, result.stderr
    assert "'level': 'WARNING'" in result.stdout


def test_two_deployments_on_one_redis_name_their_own_queue_and_key_prefix(tmp_path):
    import subprocess
    import sys

    env = {
        "PATH": "/usr/bin:/bin",
        "DEBUG": "1",
        "QUOTAPORTAL_VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "quotaportal.settings",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
    }
    code = (
        "import django; from django.conf import settings; django.setup(); "
        "from quotaportal.celery import app; "
        "print(app.conf.task_default_queue, settings.CACHES['default']['KEY_PREFIX'])"
    )
    default = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert default.stdout.split() == ["celery", "quotaportal"], default.stderr
    env |= {"CELERY_QUEUE": "soak-1", "CACHE_KEY_PREFIX": "soak-1"}
    own = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert own.stdout.split() == ["soak-1", "soak-1"], own.stderr


@pytest.mark.django_db
def test_a_sqlite_connection_has_the_larger_page_cache():
    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("the page cache is set on SQLite connections only; this run's database is not SQLite")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA cache_size")
        assert cursor.fetchone()[0] == -65536  # KiB, as settings.py sets it
