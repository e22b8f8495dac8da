from __future__ import annotations

import os

import pytest
from django.core.cache import caches
from django.db import connection
from hypothesis import settings as hypothesis_settings

# Property tests draw the same examples on every run and every machine (the seed is a hash of the test), so a
# failure in CI fails the same way on a laptop; the failing example is printed with a @reproduce_failure blob.
# No example database: with fixed seeds it would only replay what the seed replays already.
# HYPOTHESIS_PROFILE=explore searches fresh examples each run instead, remembering failures in .hypothesis/.
hypothesis_settings.register_profile("repeatable", derandomize=True, database=None, print_blob=True)
hypothesis_settings.register_profile("explore", derandomize=False, print_blob=True)
# HYPOTHESIS_PROFILE=fuzz is explore with many more examples (FUZZ_EXAMPLES, 20,000 by default) for the tests
# that leave the count to the profile, such as tests/engine/test_model.py: a long local search, not for CI.
hypothesis_settings.register_profile(
    "fuzz",
    parent=hypothesis_settings.get_profile("explore"),
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", 20000)),
)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


def pytest_collection_modifyitems(config, items):
    """Skip PostgreSQL-only tests on SQLite, saying why; CI sets QUOTAPORTAL_REQUIRE_POSTGRES to forbid that."""
    from django.conf import settings

    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" in engine:
        return
    if os.environ.get("QUOTAPORTAL_REQUIRE_POSTGRES"):
        raise pytest.UsageError(
            "QUOTAPORTAL_REQUIRE_POSTGRES is set but DATABASE_URL does not point at PostgreSQL"
        )
    skip = pytest.mark.skip(
        reason="needs PostgreSQL (row locks, concurrent passes): set DATABASE_URL=postgres://..."
    )
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _test_settings(settings, tmp_path_factory):
    """Tests decide when passes run (tests of the autopass switch turn it back on), and hash passwords fast."""
    settings.QUOTAPORTAL_AUTOPASS = False
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # seed_demo writes the demo agent's token: never over the one a running demo's agent reads under var/.
    settings.DEMO_AGENT_TOKEN_FILE = tmp_path_factory.getbasetemp() / "agent-token"
    # Throttle counters live in the cache: each test starts with its own, never one shared with other runs.
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    caches["default"].clear()


@pytest.fixture
def on_postgres() -> bool:
    return connection.vendor == "postgresql"
