"""factory_boy factories for the configuration and jobs the tests build on."""

from __future__ import annotations

from datetime import timedelta

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from scheduling.models import (
    EnvironmentCapacity,
    InstanceType,
    Job,
    JobPreference,
    JobQueue,
    Membership,
    QuotaShare,
    ServiceEnvironment,
    ShareCapacityLimit,
    Team,
    TrainingPlan,
)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.django.Password("pw-for-tests-1")


class InstanceTypeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = InstanceType
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"ml.t{n}.xlarge")
    gpu_count = 8


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team
        django_get_or_create = ("slug",)

    name = factory.Sequence(lambda n: f"Team {n}")
    slug = factory.Sequence(lambda n: f"team-{n}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    team = factory.SubFactory(TeamFactory)
    user = factory.SubFactory(UserFactory)
    role = Membership.Role.MEMBER


class ServiceEnvironmentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ServiceEnvironment

    name = factory.Sequence(lambda n: f"env-{n}")
    executor = ServiceEnvironment.Executor.EXTERNAL


class JobQueueFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = JobQueue

    name = factory.Sequence(lambda n: f"queue-{n}")
    service_environment = factory.SubFactory(ServiceEnvironmentFactory)


class QuotaShareFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = QuotaShare

    name = factory.Sequence(lambda n: f"share-{n}")
    job_queue = factory.SubFactory(JobQueueFactory)
    team = factory.SubFactory(TeamFactory)
    strategy = QuotaShare.Strategy.RESERVE


def environment_with(queue: JobQueue, capacities: dict[str, int]) -> dict[str, InstanceType]:
    """Give the queue's environment these capacities; returns the instance types by name."""
    types = {}
    for name, maximum in capacities.items():
        types[name] = InstanceTypeFactory(name=name)
        EnvironmentCapacity.objects.update_or_create(
            service_environment=queue.service_environment,
            instance_type=types[name],
            defaults={"max_capacity": maximum},
        )
    return types


def share_with(queue: JobQueue, name: str, limits: dict[str, int], **fields) -> QuotaShare:
    share = QuotaShareFactory(job_queue=queue, name=name, **fields)
    for type_name, maximum in limits.items():
        ShareCapacityLimit.objects.create(
            quota_share=share, instance_type=InstanceTypeFactory(name=type_name), max_capacity=maximum
        )
    return share


def plan_for(
    queue: JobQueue,
    name: str,
    type_name: str,
    count: int,
    *,
    starts_in=timedelta(days=-1),
    lasts=timedelta(days=10),
    shares=(),
) -> TrainingPlan:
    start = timezone.now() + starts_in
    plan = TrainingPlan.objects.create(
        name=name,
        job_queue=queue,
        instance_type=InstanceTypeFactory(name=type_name),
        instance_count=count,
        start_time=start,
        end_time=start + lasts,
    )
    plan.quota_shares.set(shares)
    return plan


def job_in(
    share: QuotaShare,
    entries: list[tuple[str, int] | tuple[str, int, TrainingPlan | None]],
    *,
    user=None,
    **fields,
) -> Job:
    """A RUNNABLE job written straight to the database (submission rules are tested through job_submit)."""
    job = Job.objects.create(
        name=fields.pop("name", "job"),
        job_queue=share.job_queue,
        job_queue_name=share.job_queue.name,
        quota_share=share,
        quota_share_name=share.name,
        team=share.team,
        submitted_by=user,
        **fields,
    )
    for position, entry in enumerate(entries):
        type_name, count, plan = (*entry, None)[:3]
        JobPreference.objects.create(
            job=job,
            position=position,
            instance_type=InstanceTypeFactory(name=type_name),
            instance_count=count,
            training_plan=plan,
        )
    return job
