"""The AWS API's lists read a constant number of queries whatever their size (called in-process: the
operation functions are what the endpoint runs, after the signature check's two queries)."""

from __future__ import annotations

import pytest

from awsapi.operations import config, jobs
from awsapi.protocol import Members
from tests.api.support import P4
from tests.factories import job_in, share_with

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("count", [1, 30])
def test_list_service_jobs_reads_a_constant_number_of_queries(world, count, django_assert_max_num_queries):
    for index in range(count):
        job_in(world.nlp, [(P4, 1)], name=f"j{index}")
    with django_assert_max_num_queries(4):
        body = jobs.list_service_jobs(world.ana, Members({"jobStatus": "RUNNABLE"}))
    assert len(body["jobSummaryList"]) == count


@pytest.mark.parametrize("count", [1, 10])
def test_list_quota_shares_and_describe_queues_read_a_constant_number_of_queries(
    world, count, django_assert_max_num_queries
):
    for index in range(count):
        share_with(world.queue, f"extra-{index}", {"ml.m5.xlarge": 1})
    with django_assert_max_num_queries(4):
        body = config.list_quota_shares(world.ana, Members({"jobQueue": "training"}))
    assert len(body["quotaShares"]) == count + 2
    with django_assert_max_num_queries(3):
        config.describe_job_queues(world.ana, Members({}))


def test_describe_service_job_reads_a_constant_number_of_queries(world, django_assert_max_num_queries):
    job = job_in(world.nlp, [(P4, 1)], name="j")
    with django_assert_max_num_queries(6):
        jobs.describe_service_job(world.ana, Members({"jobId": str(job.pk)}))
