"""Schemathesis against the OpenAPI schema, in process through WSGI, as staff: no 500, no schema violation.

Each operation gets a few schema-valid and a few schema-breaking requests (bounded, derandomized, so a run
is repeatable and quick). Schemathesis's pytest plugin is not used: its lazy fixture loader does not run
under pytest 9, and driving its Hypothesis strategies directly keeps the database fixture ours.
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, given, settings
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

pytestmark = pytest.mark.django_db

# QUOTAPORTAL_FUZZ_SCALE=10 runs ten times as many examples, for a deeper look than CI's.
SCALE = int(os.environ.get("QUOTAPORTAL_FUZZ_SCALE", "1"))
EXAMPLES = {GenerationMode.POSITIVE: 4 * SCALE, GenerationMode.NEGATIVE: 3 * SCALE}


def _fuzz(operation, mode: GenerationMode, headers: dict) -> str | None:
    """Run one operation's examples in one mode; the first failure, reported, or None."""

    @given(case=operation.as_strategy(generation_mode=mode, headers=headers))
    @settings(
        max_examples=EXAMPLES[mode],
        deadline=None,
        derandomize=SCALE == 1,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
    )
    def run(case):
        # Left out: "schema-valid data is accepted" (valid bodies name queues, shares and types at random, and
        # an unknown name is rightly a 400) and "schema-breaking data is refused" (DRF reads a number sent for
        # a string, or "5" for an integer, as the value it means, by design). Every other check applies: no
        # 5xx, documented status codes, content types and headers, responses that match their schemas.
        case.call_and_validate(excluded_checks=[positive_data_acceptance, negative_data_rejection])

    try:
        run()
    except Exception as exc:  # a check failed: report it with the others
        return f"{operation.label} ({mode.value}): {exc}"
    return None


@pytest.fixture
def wsgi_app():
    """The real WSGI handler, minus what Django's test client also turns off: closing the database connection
    at the end of each request (it would close the test's transaction)."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield get_wsgi_application()
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


def test_the_api_answers_generated_requests_within_its_schema_and_never_500(world, wsgi_app):
    token = Token.objects.create(user=world.admin)
    schema = schemathesis.openapi.from_wsgi("/api/v1/schema/", wsgi_app)
    headers = {"Authorization": f"Token {token.key}"}

    failures, operations = [], 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode in EXAMPLES:
            if mode is GenerationMode.NEGATIVE and not (len(operation.query) or len(operation.body)):
                continue  # an integer id in the path is the only input: nothing schema-breaking to send
            if failure := _fuzz(operation, mode, headers):
                failures.append(failure)

    assert operations >= 30
    assert not failures, "\n\n".join(failures)
