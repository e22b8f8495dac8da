"""Run one of the tools (not the product) as `python -m tools.<name>`: Django set up, then its command."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager


def run_command(module: str, name: str, *, own_services: bool = False) -> None:
    """Set Django up on the environment's settings and run `module.Command` with the process's arguments.

    `own_services`: the tool starts web processes, workers and a beat of its own. They and the tool then name a
    broker queue and cache key prefix of their own (CELERY_QUEUE, CACHE_KEY_PREFIX, unless set), so a worker
    of another deployment or test run on the same Redis database never takes the tool's passes, nor the tool's
    workers theirs."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "quotaportal.settings")
    if own_services:
        own = f"{name}-{os.getpid()}"
        os.environ.setdefault("CELERY_QUEUE", own)
        os.environ.setdefault("CACHE_KEY_PREFIX", own)
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    try:
        settings.INSTALLED_APPS  # noqa: B018 (reading a setting loads them all)
    except ImproperlyConfigured as exc:
        sys.stderr.write(f"quotaportal: configuration error: {exc}\n")
        sys.exit(2)
    import django

    django.setup()
    command = importlib.import_module(module).Command()
    command.run_from_argv([f"python -m tools.{name}", name, *sys.argv[1:]])


@contextmanager
def log_quieted(name: str, level: int) -> Iterator[None]:
    """The logger `name` at `level` for the block (a bench's line per decision, or per expected error, would
    bury its figures), and as it was after: the tools also run inside the test suite, where later tests read
    those lines."""
    log = logging.getLogger(name)
    before = log.level
    log.setLevel(level)
    try:
        yield
    finally:
        log.setLevel(before)
