"""The queue most pass tests here start from (a module that needs another defines its own `queue`)."""

from __future__ import annotations

import pytest

from tests.factories import JobQueueFactory, environment_with
from tests.scheduling.support import P4, P5


@pytest.fixture
def queue():
    """Queue `training` on an environment with 8 of each instance type."""
    queue = JobQueueFactory(name="training")
    environment_with(queue, {P5: 8, P4: 8})
    return queue
