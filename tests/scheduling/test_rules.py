"""Each validation rule of behaviour.md (what there is, capacity, submission): a bad value gets a message naming the
field, and nothing is saved."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError
from django.utils import timezone

from scheduling import rules
from scheduling.errors import NotAllowed
from scheduling.models import Job, JobPreference, QuotaShare, ShareCapacityLimit, State
from scheduling.services import configuration as config_services
from scheduling.services import jobs as job_services
from tests.factories import (
    InstanceTypeFactory,
    JobQueueFactory,
    MembershipFactory,
    QuotaShareFactory,
    TeamFactory,
    environment_with,
    plan_for,
    share_with,
)

pytestmark = pytest.mark.django_db

P5, P4 = "ml.p5.48xlarge", "ml.p4d.24xlarge"


@pytest.fixture
def queue():
    queue = JobQueueFactory(name="training")
    environment_with(queue, {P5: 8, P4: 16})
    return queue


def limits(**by_type):
    return [
        rules.LimitInput(InstanceTypeFactory(name=name.replace("_", ".")), n) for name, n in by_type.items()
    ]


def share_errors(queue, *, share=None, name="new", strategy="RESERVE", borrow_limit=-1, limit_list=None):
    with pytest.raises(ValidationError) as exc:
        rules.validate_quota_share(
            share=share,
            job_queue=queue,
            name=name,
            strategy=strategy,
            borrow_limit=borrow_limit,
            limits=limit_list if limit_list is not None else [],
        )
    return exc.value.message_dict


def test_share_limits_may_not_exceed_environment_capacity(queue):
    share_with(queue, "nlp", {P5: 6})
    errors = share_errors(queue, limit_list=[rules.LimitInput(InstanceTypeFactory(name=P5), 3)])
    assert errors["capacity_limits"] == [
        "ml.p5.48xlarge: limits would total 9 but the environment has 8 (other shares hold 6, so at most 2 is left)"
    ]


def test_share_limits_exactly_filling_capacity_are_accepted(queue):
    share_with(queue, "nlp", {P5: 6})
    rules.validate_quota_share(
        share=None,
        job_queue=queue,
        name="vision",
        strategy="RESERVE",
        borrow_limit=-1,
        limits=[rules.LimitInput(InstanceTypeFactory(name=P5), 2)],
    )


def test_changing_a_share_does_not_count_its_own_old_limits(queue):
    nlp = share_with(queue, "nlp", {P5: 6})
    rules.validate_quota_share(
        share=nlp,
        job_queue=queue,
        name="nlp",
        strategy="RESERVE",
        borrow_limit=-1,
        limits=[rules.LimitInput(InstanceTypeFactory(name=P5), 8)],
    )


def test_share_needs_one_to_five_limits(queue):
    assert share_errors(queue, limit_list=[])["capacity_limits"] == [
        "a quota share needs 1 to 5 capacity limits, got 0"
    ]
    six = [rules.LimitInput(InstanceTypeFactory(name=f"ml.x{i}"), 1) for i in range(6)]
    assert (
        "a quota share needs 1 to 5 capacity limits, got 6"
        in share_errors(queue, limit_list=six)["capacity_limits"]
    )


def test_share_limit_for_a_type_the_environment_lacks_is_refused(queue):
    errors = share_errors(queue, limit_list=[rules.LimitInput(InstanceTypeFactory(name="ml.g5.xlarge"), 1)])
    assert errors["capacity_limits"] == [
        "ml.g5.xlarge: the environment of queue training offers no ml.g5.xlarge capacity"
    ]


def test_share_limit_repeated_type_is_refused(queue):
    p5 = InstanceTypeFactory(name=P5)
    errors = share_errors(queue, limit_list=[rules.LimitInput(p5, 1), rules.LimitInput(p5, 2)])
    assert "instance type ml.p5.48xlarge is listed more than once" in errors["capacity_limits"]


def test_borrow_limit_only_with_lend_and_borrow(queue):
    errors = share_errors(
        queue,
        strategy="LEND",
        borrow_limit=50,
        limit_list=[rules.LimitInput(InstanceTypeFactory(name=P5), 1)],
    )
    assert errors["borrow_limit"] == [
        "borrow_limit applies only to LEND_AND_BORROW shares (LEND never borrows): leave it at -1"
    ]
    rules.validate_quota_share(
        share=None,
        job_queue=queue,
        name="ok",
        strategy="LEND_AND_BORROW",
        borrow_limit=50,
        limits=[rules.LimitInput(InstanceTypeFactory(name=P5), 1)],
    )


def test_borrow_limit_below_minus_one_is_refused(queue):
    errors = share_errors(
        queue,
        strategy="LEND_AND_BORROW",
        borrow_limit=-5,
        limit_list=[rules.LimitInput(InstanceTypeFactory(name=P5), 1)],
    )
    assert errors["borrow_limit"] == ["borrow_limit is a percentage >= 0, or -1 for unlimited"]


def test_database_refuses_borrow_limit_without_lend_and_borrow(queue):
    with pytest.raises(IntegrityError):
        QuotaShareFactory(job_queue=queue, strategy=QuotaShare.Strategy.RESERVE, borrow_limit=20)


def test_at_most_twenty_shares_per_queue(queue):
    for i in range(20):
        QuotaShareFactory(job_queue=queue, name=f"s{i}")
    errors = share_errors(queue, limit_list=[rules.LimitInput(InstanceTypeFactory(name=P5), 1)])
    assert errors["job_queue"] == ["queue training already has 20 quota shares; at most 20 are allowed"]


def test_share_name_unique_in_its_queue(queue):
    share_with(queue, "nlp", {P5: 1})
    errors = share_errors(queue, name="nlp", limit_list=[rules.LimitInput(InstanceTypeFactory(name=P5), 1)])
    assert errors["name"] == ["queue training already has a quota share named nlp"]


def test_environment_capacity_cannot_drop_below_share_limits(queue):
    share_with(queue, "nlp", {P5: 6})
    p5 = InstanceTypeFactory(name=P5)
    with pytest.raises(ValidationError) as exc:
        rules.validate_environment_capacity(job_queue=queue, capacities={p5: 5})
    assert exc.value.message_dict["capacity_limits"] == [
        "ml.p5.48xlarge: the shares of queue training hold limits totalling 6, so capacity cannot be 5; "
        "lower those limits first"
    ]
    rules.validate_environment_capacity(job_queue=queue, capacities={p5: 6})


def test_environment_capacity_removing_a_type_in_use_by_limits_is_refused(queue):
    share_with(queue, "nlp", {P4: 2})
    with pytest.raises(ValidationError) as exc:
        rules.validate_environment_capacity(job_queue=queue, capacities={InstanceTypeFactory(name=P5): 8})
    assert "ml.p4d.24xlarge" in exc.value.message_dict["capacity_limits"][0]


def test_training_plan_must_end_after_it_starts_and_open_only_to_its_queue(queue):
    other = share_with(JobQueueFactory(name="other"), "elsewhere", {})
    now = timezone.now()
    with pytest.raises(ValidationError) as exc:
        rules.validate_training_plan(
            plan=None,
            job_queue=queue,
            instance_count=0,
            start_time=now,
            end_time=now - timedelta(hours=1),
            quota_shares=[other],
        )
    errors = exc.value.message_dict
    assert errors["end_time"] == ["end_time must be after start_time"]
    assert errors["instance_count"] == ["a training plan reserves at least 1 instance"]
    assert errors["quota_shares"] == ["share elsewhere is not in queue training"]


# --- submission ------------------------------------------------------------------------------------------


@pytest.fixture
def nlp(queue):
    return share_with(queue, "nlp", {P5: 4, P4: 4}, strategy=QuotaShare.Strategy.RESERVE)


@pytest.fixture
def member(nlp):
    return MembershipFactory(team=nlp.team).user


def submit(member, queue, share, entries, **fields):
    return job_services.job_submit(
        user=member,
        submission=job_services.JobSubmission(
            name=fields.pop("name", "train"),
            job_queue=queue,
            quota_share=share,
            instance_preferences=[
                rules.PreferenceInput(InstanceTypeFactory(name=t), n, p) for t, n, p in entries
            ],
            **{"payload": {"command": ["python3", "train.py"]}, **fields},
        ),
    )


def submit_errors(member, queue, share, entries, **fields):
    with pytest.raises(ValidationError) as exc:
        submit(member, queue, share, entries, **fields)
    assert Job.objects.count() == 0 and JobPreference.objects.count() == 0
    return exc.value.message_dict


def test_submission_creates_job_and_its_preference_list(member, queue, nlp):
    job, created = submit(member, queue, nlp, [(P5, 2, None), (P4, 4, None)])
    assert created and job.status == "RUNNABLE" and job.team_id == nlp.team_id
    assert [(p.instance_type.name, p.instance_count) for p in job.instance_preferences.all()] == [
        (P5, 2),
        (P4, 4),
    ]
    assert job.events.get().kind == "SUBMITTED"


def test_submission_needs_one_to_five_entries(member, queue, nlp):
    assert submit_errors(member, queue, nlp, [])["instance_preferences"] == [
        "give 1 to 5 instance preferences, got 0"
    ]
    six = [(f"ml.t{i}", 1, None) for i in range(6)]
    assert submit_errors(member, queue, nlp, six)["instance_preferences"] == [
        "give 1 to 5 instance preferences, got 6"
    ]


def test_submission_refuses_a_repeated_type_and_plan_pair(member, queue, nlp):
    errors = submit_errors(member, queue, nlp, [(P5, 1, None), (P4, 1, None), (P5, 2, None)])
    assert errors["instance_preferences[2]"] == [
        "repeats entry 0 (ml.p5.48xlarge on-demand); each (instance type, training plan) pair may appear once"
    ]


def test_submission_refuses_an_entry_above_what_the_share_could_ever_hold(member, queue, nlp):
    errors = submit_errors(member, queue, nlp, [(P5, 5, None)])
    assert errors["instance_preferences[0].instance_count"] == [
        "ml.p5.48xlarge x5 can never run: share nlp may hold at most 4 (limit 4, RESERVE cannot borrow)"
    ]


def test_submission_refuses_an_entry_above_environment_capacity(member, queue, nlp):
    errors = submit_errors(member, queue, nlp, [(P5, 9, None)])
    assert errors["instance_preferences[0].instance_count"] == [
        "ml.p5.48xlarge x9 can never run: the environment has 8"
    ]


def test_borrowing_share_may_ask_up_to_lendable_capacity(queue, nlp):
    vision = share_with(
        queue, "vision", {P5: 2}, strategy=QuotaShare.Strategy.LEND_AND_BORROW, borrow_limit=100
    )
    user = MembershipFactory(team=vision.team).user
    errors = submit_errors(user, queue, vision, [(P5, 5, None)])
    assert errors["instance_preferences[0].instance_count"] == [
        "ml.p5.48xlarge x5 can never run: share vision may hold at most 4 (limit 2 plus borrow limit 100%)"
    ]
    vision.borrow_limit = -1
    vision.save()
    job, _ = submit(user, queue, vision, [(P5, 4, None)])  # 8 minus nlp's 4 RESERVEd
    assert job.pk
    with pytest.raises(ValidationError) as exc:
        submit(user, queue, vision, [(P5, 5, None)], name="too-big")
    assert exc.value.message_dict["instance_preferences[0].instance_count"] == [
        "ml.p5.48xlarge x5 can never run: share vision may hold at most 4 (limit 2 plus borrowing, and 4 of 8 "
        "are kept by other shares)"
    ]


def test_submission_plan_rules(member, queue, nlp):
    other_queue = JobQueueFactory(name="other")
    foreign = plan_for(other_queue, "foreign", P5, 4)
    wrong_type = plan_for(queue, "p4-plan", P4, 4)
    expired = plan_for(queue, "old", P5, 4, starts_in=timedelta(days=-10), lasts=timedelta(days=1))
    closed = plan_for(queue, "vision-only", P5, 4, shares=[share_with(queue, "vision", {P4: 1})])
    small = plan_for(queue, "small", P5, 2)
    errors = submit_errors(
        member,
        queue,
        nlp,
        [(P5, 1, foreign), (P5, 1, wrong_type), (P5, 1, expired), (P5, 1, closed), (P5, 3, small)],
    )
    assert errors["instance_preferences[0].training_plan"] == ["plan foreign belongs to another queue"]
    assert errors["instance_preferences[1].training_plan"] == [
        "plan p4-plan reserves ml.p4d.24xlarge, not ml.p5.48xlarge"
    ]
    assert errors["instance_preferences[2].training_plan"][0].startswith("plan old expired at ")
    assert errors["instance_preferences[3].training_plan"] == ["plan vision-only is not open to share nlp"]
    assert errors["instance_preferences[4].instance_count"] == [
        "ml.p5.48xlarge x3 can never run on plan small, which reserves 2"
    ]


def test_submission_to_a_disabled_share_or_queue_is_refused(member, queue, nlp):
    nlp.state = State.DISABLED
    nlp.save()
    assert submit_errors(member, queue, nlp, [(P5, 1, None)])["quota_share"] == [
        "share nlp is disabled and accepts no jobs"
    ]
    nlp.state = State.ENABLED
    nlp.save()
    queue.state = State.DISABLED
    queue.save()
    assert submit_errors(member, queue, nlp, [(P5, 1, None)])["job_queue"] == [
        "queue training is disabled and accepts no jobs"
    ]


def test_submission_to_another_teams_share_is_not_allowed(queue, nlp):
    outsider = MembershipFactory(team=TeamFactory(slug="vision")).user
    with pytest.raises(NotAllowed):
        submit(outsider, queue, nlp, [(P5, 1, None)])
    assert Job.objects.count() == 0


def test_submission_payload_must_be_a_small_object(member, queue, nlp):
    assert submit_errors(member, queue, nlp, [(P5, 1, None)], payload=[1, 2])["payload"] == [
        "payload must be a JSON object"
    ]
    big = {"blob": "x" * (64 * 1024)}
    assert submit_errors(member, queue, nlp, [(P5, 1, None)], payload=big)["payload"][0].endswith(
        "the limit is 65536"
    )


def test_submission_refuses_bad_numbers(member, queue, nlp):
    errors = submit_errors(member, queue, nlp, [(P5, 1, None)], scheduling_priority=10000, retry_attempts=11)
    assert "scheduling_priority" in errors and "retry_attempts" in errors
    errors = submit_errors(member, queue, nlp, [(P5, 0, None)])
    assert errors["instance_preferences[0].instance_count"] == ["instance_count must be at least 1"]


def test_client_token_repeat_returns_the_first_job(member, queue, nlp):
    first, created = submit(member, queue, nlp, [(P5, 1, None)], client_token="abc")
    again, created_again = submit(member, queue, nlp, [(P4, 2, None)], client_token="abc")
    assert created and not created_again and again.pk == first.pk
    assert Job.objects.count() == 1


def test_deleting_a_share_needs_it_disabled_and_cancels_its_jobs(member, queue, nlp):
    job, _ = submit(member, queue, nlp, [(P5, 1, None)])
    with pytest.raises(ValidationError) as exc:
        config_services.quota_share_delete(share=nlp, actor=None)
    assert exc.value.message_dict["state"] == ["disable share nlp before deleting it"]
    nlp.state = State.DISABLED
    nlp.save()
    config_services.quota_share_delete(share=nlp, actor=None)
    assert not QuotaShare.objects.filter(pk=nlp.pk).exists()
    assert not ShareCapacityLimit.objects.filter(quota_share_id=nlp.pk).exists()


def test_submission_reports_every_failing_rule_at_once(member, queue, nlp):
    errors = submit_errors(member, queue, nlp, [(P5, 9, None)], payload=[1], scheduling_priority=10000)
    assert set(errors) == {"instance_preferences[0].instance_count", "payload", "scheduling_priority"}
