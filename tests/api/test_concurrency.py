"""Repeats of one client_token racing each other still create one job (PostgreSQL: concurrent writers)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from scheduling.models import Job
from tests.api.support import submission

RACERS = 8


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_repeats_of_a_client_token_create_one_job_and_all_get_it(world):
    start = threading.Barrier(RACERS)
    answers: list[tuple[int, int]] = []
    failures: list[BaseException] = []

    def submit() -> None:
        try:
            client = APIClient()
            client.force_authenticate(user=world.ana)
            start.wait(timeout=10)
            response = client.post("/api/v1/jobs/", submission(client_token="nightly-42"), format="json")
            answers.append((response.status_code, response.json()["id"]))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert failures == []
    assert sorted(status for status, _ in answers) == [200] * (RACERS - 1) + [201]
    assert len({job_id for _, job_id in answers}) == 1
    assert Job.objects.filter(submitted_by=world.ana, client_token="nightly-42").count() == 1
