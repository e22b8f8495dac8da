"""Jobs through the API: submission (every error naming its field), client_token, priority, cancel, report."""

from __future__ import annotations

import pytest

from scheduling.models import Event, EventKind, Job, JobPreference, JobStatus, State
from tests.api.support import P4, P5, placed, submission
from tests.factories import job_in

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"


# --- submission ------------------------------------------------------------------------------------------


def test_member_submits_a_job_with_a_preference_list_and_a_plan(world, client_for):
    response = client_for(world.ana).post(JOBS, submission(scheduling_priority=50), format="json")

    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "RUNNABLE"
    assert body["team"] == "nlp"
    assert body["submitted_by"] == "ana"
    assert body["job_queue"] == "training"
    assert body["quota_share"] == "nlp"
    assert body["scheduling_priority"] == 50
    assert body["instance_preferences"] == [
        {"instance_type": P5, "instance_count": 2, "training_plan": "nlp-p5-december"},
        {"instance_type": P5, "instance_count": 2, "training_plan": None},
        {"instance_type": P4, "instance_count": 2, "training_plan": None},
    ]
    assert body["attempts"] == []
    assert body["payload"] == {
        "image": "registry.example.com/nlp/trainer:1",
        "command": ["python3", "train.py"],
    }
    job = Job.objects.get(pk=body["id"])
    assert job.instance_preferences.count() == 3
    assert Event.objects.filter(job=job, kind=EventKind.SUBMITTED).count() == 1


def test_job_body_has_exactly_the_fields_of_the_spec(world, client_for):
    body = client_for(world.ana).post(JOBS, submission(), format="json").json()

    assert set(body) == {
        "id",
        "name",
        "job_queue",
        "quota_share",
        "team",
        "submitted_by",
        "scheduling_priority",
        "instance_preferences",
        "retry_attempts",
        "retry_rules",
        "preemption_retries_before_termination",
        "max_pending_seconds",
        "duration_seconds",
        "attempt_duration_seconds",
        "relocate",
        "payload",
        "client_token",
        "submitted_via",
        "status",
        "status_reason",
        "selected_instance_type",
        "selected_instance_count",
        "selected_training_plan",
        "borrowed_instances",
        "queue_position",
        "estimated_start",
        "preemption_count",
        "attempt",
        "stop_deadline",
        "attempts",
        "created_at",
        "scheduled_at",
        "started_at",
        "stopped_at",
    }


def test_attempt_duration_seconds_is_submitted_read_back_and_bounded(world, client_for):
    client = client_for(world.ana)
    body = client.post(JOBS, submission(attempt_duration_seconds=3600), format="json").json()
    assert body["attempt_duration_seconds"] == 3600
    assert body["submitted_via"] == ""
    response = client.post(JOBS, submission(name="j2", attempt_duration_seconds=2_592_001), format="json")
    assert response.status_code == 400
    assert "attempt_duration_seconds" in response.json()


def test_retry_rules_are_submitted_read_back_and_refused_naming_the_rule(world, client_for):
    client = client_for(world.ana)
    assert client.post(JOBS, submission(), format="json").json()["retry_rules"] == []
    rules = [{"action": "EXIT", "on_exit_code": "137"}, {"action": "RETRY", "on_reason": "CUDA*"}]
    body = client.post(JOBS, submission(name="j2", retry_rules=rules), format="json").json()
    assert body["retry_rules"] == rules and Job.objects.get(pk=body["id"]).retry_rules == rules
    before = Job.objects.count()
    bad = [{"action": "RETRY"}, {"action": "MAYBE", "on_reason": "a*b"}]
    response = client.post(JOBS, submission(name="j3", retry_rules=bad), format="json")
    assert response.status_code == 400
    assert response.json()["retry_rules"] == [
        "[1].action: must be RETRY or EXIT",
        "[1].on_reason: a * may only end the pattern",
    ]
    response = client.post(JOBS, submission(name="j4", retry_rules={"action": "EXIT"}), format="json")
    assert response.status_code == 400 and response.json()["retry_rules"] == ["must be a list of rules"]
    assert Job.objects.count() == before


def test_relocate_is_submitted_and_read_back_and_defaults_to_false(world, client_for):
    client = client_for(world.ana)
    assert client.post(JOBS, submission(), format="json").json()["relocate"] is False
    body = client.post(JOBS, submission(name="j2", relocate=True), format="json").json()
    assert body["relocate"] is True and Job.objects.get(pk=body["id"]).relocate
    response = client.post(JOBS, submission(name="j3", relocate="sometimes"), format="json")
    assert response.status_code == 400 and "relocate" in response.json()


def test_unknown_names_are_400s_naming_the_exact_field_path_and_nothing_is_created(world, client_for):
    body = submission(
        instance_preferences=[
            {"instance_type": P5, "instance_count": 1},
            {"instance_type": "ml.x", "instance_count": 1},
            {"instance_type": P4, "instance_count": 1, "training_plan": "no-such-plan"},
        ]
    )

    response = client_for(world.ana).post(JOBS, body, format="json")

    assert response.status_code == 400
    assert response.json() == {
        "instance_preferences[1].instance_type": ["unknown instance type ml.x"],
        "instance_preferences[2].training_plan": ["unknown training plan no-such-plan"],
    }
    assert not Job.objects.exists()


def test_unknown_queue_is_a_400_naming_job_queue(world, client_for):
    response = client_for(world.ana).post(JOBS, submission(job_queue="nope"), format="json")

    assert response.status_code == 400
    assert response.json() == {"job_queue": ["unknown job queue nope"]}


def test_unknown_share_is_a_400_naming_quota_share(world, client_for):
    response = client_for(world.ana).post(JOBS, submission(quota_share="nope"), format="json")

    assert response.status_code == 400
    assert response.json() == {"quota_share": ["queue training has no quota share named nope"]}


def test_submitting_to_another_teams_share_is_403(world, client_for):
    body = submission(quota_share="vision", instance_preferences=[{"instance_type": P4, "instance_count": 1}])

    response = client_for(world.ana).post(JOBS, body, format="json")

    assert response.status_code == 403
    assert response.json() == {"detail": "you are not a member of team Vision, which owns share vision"}
    assert not Job.objects.exists()


def test_rule_errors_name_the_entry_at_fault(world, client_for):
    body = submission(
        instance_preferences=[
            {"instance_type": P5, "instance_count": 2},
            {"instance_type": P5, "instance_count": 2},
            {"instance_type": P4, "instance_count": 99},
        ]
    )

    response = client_for(world.ana).post(JOBS, body, format="json")

    assert response.status_code == 400
    errors = response.json()
    assert set(errors) == {"instance_preferences[1]", "instance_preferences[2].instance_count"}
    assert errors["instance_preferences[2].instance_count"] == [
        "ml.p4d.24xlarge x99 can never run: the environment has 16"
    ]
    assert not Job.objects.exists()


def test_plan_of_another_type_names_the_entrys_training_plan(world, client_for):
    body = submission(
        instance_preferences=[{"instance_type": P4, "instance_count": 1, "training_plan": "nlp-p5-december"}]
    )

    response = client_for(world.ana).post(JOBS, body, format="json")

    assert response.status_code == 400
    assert response.json() == {
        "instance_preferences[0].training_plan": [
            "plan nlp-p5-december reserves ml.p5.48xlarge, not ml.p4d.24xlarge"
        ]
    }


def test_more_than_five_preferences_is_a_400_naming_instance_preferences(world, client_for):
    entries = [{"instance_type": P4, "instance_count": n} for n in range(1, 7)]

    response = client_for(world.ana).post(JOBS, submission(instance_preferences=entries), format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["instance_preferences"]


def test_an_empty_preference_list_is_a_400(world, client_for):
    response = client_for(world.ana).post(JOBS, submission(instance_preferences=[]), format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["instance_preferences"]


def test_bad_numbers_are_400s_naming_each_field_at_once(world, client_for):
    body = submission(
        scheduling_priority=10000,
        retry_attempts=0,
        instance_preferences=[{"instance_type": P5, "instance_count": 0}],
    )

    response = client_for(world.ana).post(JOBS, body, format="json")

    assert response.status_code == 400
    assert set(response.json()) == {
        "scheduling_priority",
        "retry_attempts",
        "instance_preferences[0].instance_count",
    }


def test_durations_and_counts_past_an_integer_column_are_400s_on_every_database(world, client_for):
    # SQLite stores 64 bits: 10**14 seconds used to be kept, and every pass of the queue then overflowed.
    body = submission(
        duration_seconds=10**14,
        max_pending_seconds=2**31,
        preemption_retries_before_termination=2**40,
    )

    response = client_for(world.ana).post(JOBS, body, format="json")

    assert response.status_code == 400
    assert set(response.json()) == {
        "duration_seconds",
        "max_pending_seconds",
        "preemption_retries_before_termination",
    }
    assert not Job.objects.exists()


def test_the_longest_duration_a_column_holds_is_accepted_and_scheduled(world, client_for):
    body = submission(duration_seconds=2**31 - 1, max_pending_seconds=2**31 - 1)

    response = client_for(world.ana).post(JOBS, body, format="json")

    assert response.status_code == 201, response.json()
    assert client_for(world.admin).post(f"/api/v1/job-queues/{world.queue.pk}/schedule/").status_code == 200


def test_a_payload_that_is_not_an_object_is_a_400_naming_payload(world, client_for):
    response = client_for(world.ana).post(JOBS, submission(payload=[1, 2]), format="json")

    assert response.status_code == 400
    assert response.json() == {"payload": ["payload must be a JSON object"]}


def test_a_disabled_share_accepts_no_jobs(world, client_for):
    world.nlp.state = State.DISABLED
    world.nlp.save()

    response = client_for(world.ana).post(JOBS, submission(), format="json")

    assert response.status_code == 400
    assert response.json() == {"quota_share": ["share nlp is disabled and accepts no jobs"]}


def test_a_bad_name_is_a_400_naming_name(world, client_for):
    response = client_for(world.ana).post(JOBS, submission(name="has spaces"), format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["name"]


# --- client_token ----------------------------------------------------------------------------------------


def test_a_repeated_client_token_returns_the_first_job_with_200(world, client_for):
    client = client_for(world.ana)
    first = client.post(JOBS, submission(client_token="batch-1"), format="json")
    again = client.post(JOBS, submission(client_token="batch-1", name="other-name"), format="json")

    assert first.status_code == 201
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["name"] == "pretrain"
    assert Job.objects.count() == 1


def test_client_tokens_are_per_user(world, client_for):
    first = client_for(world.ana).post(JOBS, submission(client_token="t"), format="json")
    other = client_for(world.ben).post(JOBS, submission(client_token="t"), format="json")

    assert (first.status_code, other.status_code) == (201, 201)
    assert first.json()["id"] != other.json()["id"]


# --- reading ---------------------------------------------------------------------------------------------


def test_members_see_their_teams_jobs_only(world, client_for):
    mine = job_in(world.nlp, [(P5, 1)], name="mine")
    job_in(world.vision, [(P4, 1)], name="theirs")

    body = client_for(world.ana).get(JOBS).json()

    assert [job["id"] for job in body["results"]] == [mine.pk]
    assert set(body) == {"next", "previous", "results"}


def test_another_teams_job_is_404(world, client_for):
    theirs = job_in(world.vision, [(P4, 1)], name="theirs")

    response = client_for(world.ana).get(f"{JOBS}{theirs.pk}/")

    assert response.status_code == 404


def test_staff_and_executors_see_every_job(world, client_for):
    job_in(world.nlp, [(P5, 1)])
    job_in(world.vision, [(P4, 1)])

    assert len(client_for(world.admin).get(JOBS).json()["results"]) == 2
    assert len(client_for(world.executor).get(JOBS).json()["results"]) == 2


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("status=RUNNABLE", {"a", "b"}),
        ("status=SCHEDULED", {"c"}),
        ("quota_share=nlp", {"a", "c"}),
        ("quota_share=vision", {"b"}),
        ("job_queue=training", {"a", "b", "c"}),
        ("job_queue=other", set()),
        ("team=vision", {"b"}),
        ("team=nlp&status=RUNNABLE", {"a"}),
    ],
)
def test_job_filters(world, client_for, query, names):
    job_in(world.nlp, [(P5, 1)], name="a")
    job_in(world.vision, [(P4, 1)], name="b")
    placed(job_in(world.nlp, [(P5, 1)], name="c"), count=1)

    body = client_for(world.admin).get(f"{JOBS}?{query}").json()

    assert {job["name"] for job in body["results"]} == names


def test_an_unknown_status_filter_is_a_400(world, client_for):
    response = client_for(world.admin).get(f"{JOBS}?status=NOPE")

    assert response.status_code == 400
    assert list(response.json()) == ["status"]


def test_a_placed_job_shows_its_selection_and_attempts(world, client_for):
    job = placed(job_in(world.nlp, [(P5, 2)], user=world.ana))

    body = client_for(world.ana).get(f"{JOBS}{job.pk}/").json()

    assert body["status"] == "SCHEDULED"
    assert body["selected_instance_type"] == P5
    assert body["selected_instance_count"] == 2
    assert body["selected_training_plan"] is None
    assert len(body["attempts"]) == 1
    assert set(body["attempts"][0]) == {
        "attempt",
        "instance_type",
        "training_plan",
        "scheduled_at",
        "started_at",
        "stopped_at",
        "status_reason",
        "exit_code",
        "output_tail",
        "tasks",
    }
    assert body["attempts"][0]["tasks"] == []  # not taken by anyone yet
    assert body["attempt"] == body["attempts"][0]["attempt"] == 1


# --- priority --------------------------------------------------------------------------------------------


def test_submitter_changes_the_priority(world, client_for):
    job = job_in(world.nlp, [(P5, 1)], user=world.ana)

    response = client_for(world.ana).patch(f"{JOBS}{job.pk}/", {"scheduling_priority": 70}, format="json")

    assert response.status_code == 200
    assert response.json()["scheduling_priority"] == 70
    job.refresh_from_db()
    assert job.scheduling_priority == 70
    assert Event.objects.filter(job=job, kind=EventKind.CONFIG_CHANGED).count() == 1


def test_patching_any_other_field_is_a_400_naming_it(world, client_for):
    job = job_in(world.nlp, [(P5, 1)], user=world.ana)

    response = client_for(world.ana).patch(
        f"{JOBS}{job.pk}/", {"scheduling_priority": 5, "name": "x", "status": "RUNNING"}, format="json"
    )

    assert response.status_code == 400
    assert set(response.json()) == {"name", "status"}
    job.refresh_from_db()
    assert (job.scheduling_priority, job.name) == (0, "job")


def test_a_priority_out_of_range_is_a_400(world, client_for):
    job = job_in(world.nlp, [(P5, 1)], user=world.ana)

    response = client_for(world.ana).patch(f"{JOBS}{job.pk}/", {"scheduling_priority": 10000}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["scheduling_priority"]


def test_changing_the_priority_of_a_finished_job_is_409(world, client_for):
    job = job_in(world.nlp, [(P5, 1)], user=world.ana, status=JobStatus.SUCCEEDED)

    response = client_for(world.ana).patch(f"{JOBS}{job.pk}/", {"scheduling_priority": 5}, format="json")

    assert response.status_code == 409
    assert "SUCCEEDED" in response.json()["detail"]


def test_put_is_not_allowed(world, client_for):
    job = job_in(world.nlp, [(P5, 1)], user=world.ana)

    response = client_for(world.ana).put(f"{JOBS}{job.pk}/", submission(), format="json")

    assert response.status_code == 405


# --- cancel ----------------------------------------------------------------------------------------------


def test_submitter_cancels_a_job_with_a_reason(world, client_for):
    job = placed(job_in(world.nlp, [(P5, 2)], user=world.ana))

    response = client_for(world.ana).post(f"{JOBS}{job.pk}/cancel/", {"reason": "wrong data"}, format="json")

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "CANCELLED"
    assert body["status_reason"] == "cancelled by ana: wrong data"
    assert body["attempts"][0]["stopped_at"] is not None


def test_cancelling_a_finished_job_is_409(world, client_for):
    job = job_in(world.nlp, [(P5, 1)], user=world.ana, status=JobStatus.CANCELLED)

    response = client_for(world.ana).post(f"{JOBS}{job.pk}/cancel/")

    assert response.status_code == 409


def test_another_member_of_the_team_may_not_cancel(world, client_for):
    job = job_in(world.nlp, [(P5, 1)], user=world.ben)

    response = client_for(world.ana).post(f"{JOBS}{job.pk}/cancel/")

    assert response.status_code == 403
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNABLE


# --- report ----------------------------------------------------------------------------------------------


def test_executor_reports_a_placed_job_through_its_lifecycle(world, client_for):
    job = placed(job_in(world.nlp, [(P5, 2)], user=world.ana))
    executor = client_for(world.executor)

    for status in ("STARTING", "RUNNING", "SUCCEEDED"):
        response = executor.post(f"{JOBS}{job.pk}/report/", {"status": status, "reason": "ok"}, format="json")
        assert response.status_code == 200, response.json()
        assert response.json()["status"] == status

    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert job.started_at is not None and job.stopped_at is not None


def test_an_illegal_transition_is_409(world, client_for):
    job = job_in(world.nlp, [(P5, 1)], user=world.ana)  # RUNNABLE: not placed

    response = client_for(world.executor).post(f"{JOBS}{job.pk}/report/", {"status": "RUNNING"})

    assert response.status_code == 409
    assert response.json() == {"detail": f"{job.name} (#{job.pk}) is RUNNABLE; it cannot move to RUNNING"}


def test_an_unknown_reported_status_is_a_400_naming_status(world, client_for):
    job = placed(job_in(world.nlp, [(P5, 2)]))

    response = client_for(world.executor).post(f"{JOBS}{job.pk}/report/", {"status": "RUNNABLE"})

    assert response.status_code == 400
    assert list(response.json()) == ["status"]


def test_a_failure_with_retries_left_returns_the_job_to_runnable(world, client_for):
    job = placed(job_in(world.nlp, [(P5, 2)], retry_attempts=2))

    response = client_for(world.admin).post(
        f"{JOBS}{job.pk}/report/", {"status": "FAILED", "reason": "oom"}, format="json"
    )

    assert response.status_code == 200
    assert response.json()["status"] == "RUNNABLE"


def test_report_on_a_missing_job_is_404(world, client_for):
    response = client_for(world.executor).post(f"{JOBS}999999/report/", {"status": "RUNNING"}, format="json")

    assert response.status_code == 404


def test_job_preferences_stay_untouched_by_a_failed_patch(world, client_for):
    job = job_in(world.nlp, [(P5, 1), (P4, 1)], user=world.ana)

    client_for(world.ana).patch(f"{JOBS}{job.pk}/", {"instance_preferences": []}, format="json")

    assert JobPreference.objects.filter(job=job).count() == 2


def test_an_external_environment_refuses_a_job_without_payload_command_and_places_nothing(world, client_for):
    client = client_for(world.ana)
    response = client.post(JOBS, submission(payload={}), format="json")
    assert response.status_code == 400
    (message,) = response.json()["payload.command"]
    assert message.startswith("payload.command is required: environment gpu-fleet runs jobs with an external")
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "payload,field",
    [
        ({"command": "python3 train.py"}, "payload.command"),
        ({"command": []}, "payload.command"),
        ({"command": ["python3", 3]}, "payload.command"),
        ({"command": ["python3"], "env": {"SEED": 1}}, "payload.env"),
    ],
)
def test_a_command_the_agent_could_not_run_is_a_400_naming_the_field(world, client_for, payload, field):
    response = client_for(world.ana).post(JOBS, submission(payload=payload), format="json")
    assert response.status_code == 400 and list(response.json()) == [field]
    assert not Job.objects.exists()


def test_a_simulated_environment_takes_any_payload(world, client_for):
    environment = world.queue.service_environment
    environment.executor = "simulated"
    environment.save()
    response = client_for(world.ana).post(JOBS, submission(payload={}), format="json")
    assert response.status_code == 201, response.json()
