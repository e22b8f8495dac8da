"""The agent's API client against a fake server: answers past the size cap and environment pages without end
are server faults, waited out like an outage, never held in memory or followed for ever."""

from __future__ import annotations

import json

from quotaportal_agent.client import Client, Delivery
from tests.agent.fake_server import ENVIRONMENT_ID, INSTANCE_TYPE, TOKEN

WORK = json.dumps({"start": [], "stop": [{"id": 3, "attempt": 1}]}).encode()


def test_an_answer_past_the_cap_is_a_failed_poll_and_one_within_it_is_read(server):
    padded = WORK + b" " * 5_000  # still a valid work document, only longer than the cap below
    server.garbage = padded
    capped = Client(server.url, TOKEN, max_answer_bytes=1_024)
    roomy = Client(server.url, TOKEN, max_answer_bytes=len(padded))

    assert capped.work(ENVIRONMENT_ID, INSTANCE_TYPE, wait=0) is None
    assert roomy.work(ENVIRONMENT_ID, INSTANCE_TYPE, wait=0) == {
        "start": [],
        "stop": [{"id": 3, "attempt": 1}],
    }
    assert server.garbage_answers == 2


def test_a_report_answered_past_the_cap_is_retried_later(server):
    job = server.add_job({"command": ["true"]})
    stale = {"attempt": 99, "status": "RUNNING"}

    assert Client(server.url, TOKEN, max_answer_bytes=4_096).report(job, stale).delivery == Delivery.CONFLICT
    assert Client(server.url, TOKEN, max_answer_bytes=8).report(job, stale).delivery == Delivery.RETRY


def test_environment_pages_that_lead_back_to_themselves_end_the_listing(server):
    client = Client(server.url, TOKEN)
    second = client.url("service-environments") + "?page=2"
    page = {"count": 1, "next": second, "previous": None, "results": [{"id": ENVIRONMENT_ID}]}
    server.garbage = json.dumps(page).encode()  # every page says the next one is page 2

    assert client.environments() is None
    assert server.garbage_answers == 2  # the first page and page 2, whose next is itself: then it stops

    server.garbage = None
    assert [e["id"] for e in client.environments()] == [ENVIRONMENT_ID]
