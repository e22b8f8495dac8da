"""The tools write and delete rows of their own (users, teams, queues): never on a database that holds real
data. A database is a scratch one when its name says so, or when QUOTAPORTAL_SCRATCH_DATABASE names it."""

from __future__ import annotations

import os
import re
from pathlib import Path

from django.core.management.base import CommandError
from django.db import connection

# Names that say "throw me away": test databases (Django's own test_<name> included), scratch, soak, bench.
SCRATCH_NAME = re.compile(r"(^|[_\-.])(test|tests|scratch|soak|bench|tmp)([_\-.]|$)|^test", re.IGNORECASE)


def scratch_database_problem(settings_dict: dict) -> str | None:
    """Why this database is not clearly a scratch one, or None when it is."""
    name = str(settings_dict.get("NAME") or "")
    label = Path(name).stem if settings_dict.get("ENGINE", "").endswith("sqlite3") else name
    if name in ("", ":memory:") or "mode=memory" in name:
        return None
    if SCRATCH_NAME.search(label):
        return None
    if os.environ.get("QUOTAPORTAL_SCRATCH_DATABASE") == label:
        return None
    return (
        f"database {label!r} is not clearly a scratch one: this tool creates and deletes users, teams and "
        f"queues. Point DATABASE_URL at a database whose name says test, scratch, soak or bench, or set "
        f"QUOTAPORTAL_SCRATCH_DATABASE={label} to say that this one may be written"
    )


def require_scratch_database() -> None:
    """Raise CommandError unless the default database is clearly a scratch one."""
    problem = scratch_database_problem(connection.settings_dict)
    if problem:
        raise CommandError(problem)
