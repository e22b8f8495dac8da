"""Every list reads a constant number of queries whatever the page holds: one bound for 5 and 50 items."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.models import EnvironmentCapacity, Event, EventKind, Job, Membership, TrainingPlan
from tests.api.support import P4, P5, placed, submission
from tests.factories import (
    InstanceTypeFactory,
    JobQueueFactory,
    MembershipFactory,
    ServiceEnvironmentFactory,
    TeamFactory,
    UserFactory,
    job_in,
    share_with,
)

pytestmark = pytest.mark.django_db


def many_instance_types(world, n):
    for _ in range(n):
        InstanceTypeFactory()


def many_teams(world, n):
    for _ in range(n):
        team = TeamFactory()
        MembershipFactory(team=team, user=UserFactory(), role=Membership.Role.MANAGER)
        MembershipFactory(team=team, user=UserFactory())


def many_environments(world, n):
    p5, p4 = world.plan.instance_type, world.nlp.capacity_limits.get(instance_type__name=P4).instance_type
    for _ in range(n):
        environment = ServiceEnvironmentFactory()
        EnvironmentCapacity.objects.create(service_environment=environment, instance_type=p5, max_capacity=2)
        EnvironmentCapacity.objects.create(service_environment=environment, instance_type=p4, max_capacity=2)


def many_queues(world, n):
    for _ in range(n):
        JobQueueFactory()


def many_shares(world, n):
    for i in range(n):
        share_with(JobQueueFactory(), f"s{i}", {P5: 1, P4: 1}, team=world.team_nlp)


def many_plans(world, n):
    now = timezone.now()
    for i in range(n):
        plan = TrainingPlan.objects.create(
            name=f"plan-{i}",
            job_queue=world.queue,
            instance_type=world.plan.instance_type,
            instance_count=4,
            start_time=now - timedelta(days=1),
            end_time=now + timedelta(days=1),
        )
        plan.quota_shares.set([world.nlp, world.vision])
        placed(job_in(world.nlp, [(P5, 1, plan)]), P5, 1, plan=plan)


def many_jobs(world, n):
    for i in range(n):
        job = job_in(world.nlp, [(P5, 1, world.plan), (P5, 1), (P4, 1)], user=world.ana, name=f"job-{i}")
        if i % 2:
            placed(job, P4, 1)


def many_events(world, n):
    job = job_in(world.nlp, [(P5, 1)], user=world.ana)
    other = job_in(world.vision, [(P4, 1)])
    for i in range(n):
        Event.objects.create(
            kind=EventKind.PREEMPTED_RECLAIM,
            job=job,
            team=world.team_nlp,
            other_job=other,
            quota_share=world.nlp,
            other_share=world.vision,
            job_queue=world.queue,
            instance_type=world.plan.instance_type,
            instances=1,
            actor=world.admin,
            message=f"event {i}",
        )


def many_runnable_jobs(world, n):
    for i in range(n):
        job_in(world.nlp if i % 2 else world.vision, [(P4, 1)], name=f"r{i}")


def many_runnable_and_placed_jobs(world, n):
    """The snapshot's order reads the queue as a pass does: placed jobs, plans and preference lists too."""
    many_runnable_jobs(world, n)
    for i in range(n):
        placed(job_in(world.vision, [(P4, 1), (P5, 1)], name=f"p{i}", scheduling_priority=i), P4, 1)
        placed(job_in(world.nlp, [(P5, 1, world.plan)], name=f"q{i}"), P5, 1, plan=world.plan)


# (url, who reads it, how to make n items, the most queries it may take)
BUDGETS = {
    "instance-types": ("/api/v1/instance-types/", "ana", many_instance_types, 2),
    "teams": ("/api/v1/teams/", "ana", many_teams, 3),
    "service-environments": ("/api/v1/service-environments/", "ana", many_environments, 3),
    "job-queues": ("/api/v1/job-queues/", "ana", many_queues, 2),
    "quota-shares": ("/api/v1/quota-shares/", "ana", many_shares, 3),
    "training-plans": ("/api/v1/training-plans/", "ana", many_plans, 3),
    "jobs as a member": ("/api/v1/jobs/", "ana", many_jobs, 6),
    "jobs as staff": ("/api/v1/jobs/?quota_share=nlp&job_queue=training", "admin", many_jobs, 4),
    # the viewer's teams, whether they read everything (their permissions, 2), the count, the page
    "events": ("/api/v1/events/", "chen", many_events, 5),
    "events tailing": ("/api/v1/events/?since_id=0&kind=PREEMPTED_RECLAIM", "chen", many_events, 5),
    # 7 usage, 8 the pass's own snapshot load (for the engine's head order), the queue, the jobs, the teams,
    # who reads (their teams, whether they read everything: their permissions, 2), and the words of the
    # clauses of the jobs' reasons (none when this process has read them all before).
    "snapshot": ("/api/v1/job-queues/{queue}/snapshot/", "ana", many_runnable_jobs, 22),
    "snapshot of a busy queue": (
        "/api/v1/job-queues/{queue}/snapshot/",
        "ana",
        many_runnable_and_placed_jobs,
        22,
    ),
}


@pytest.mark.parametrize("n", [5, 50])
@pytest.mark.parametrize("endpoint", list(BUDGETS))
def test_list_query_count_does_not_grow_with_items(
    world, client_for, django_assert_max_num_queries, endpoint, n
):
    url, who, make, budget = BUDGETS[endpoint]
    make(world, n)
    client = client_for(world.users[who])

    with django_assert_max_num_queries(budget):
        response = client.get(url.format(queue=world.queue.pk))

    assert response.status_code == 200
    body = response.json()
    items = body["jobs"] if "jobs" in body else body["results"]
    assert len(items) >= min(n, 50)


def queue_holding(world, n: int) -> None:
    """n unfinished jobs in the queue (copies of one, written at once: the count is what matters here)."""
    job = job_in(world.vision, [(P4, 1)], name="seed")
    copies = []
    for i in range(n - 1):
        job.pk, job.name = None, f"j{i}"
        copies.append(copy.copy(job))
    Job.objects.bulk_create(copies, batch_size=500)


def submission_statements(world, client_for, n: int) -> int:
    queue_holding(world, n)
    client = client_for(world.users["ana"])
    with CaptureQueriesContext(connection) as captured:
        response = client.post("/api/v1/jobs/", submission(name=f"into-{n}"), format="json")
    assert response.status_code == 201, response.content
    return len(captured)


def test_a_submission_issues_the_same_statements_into_a_queue_of_10_or_1000_jobs(world, client_for):
    small = submission_statements(world, client_for, 10)
    large = submission_statements(world, client_for, 1_000)
    assert small == large <= 25
