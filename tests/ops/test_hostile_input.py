"""Hostile input is refused clearly (a 4xx naming what is wrong), never a 500 nor something half-stored."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from scheduling.models import InstanceType, Job, QuotaShare, ServiceEnvironment
from scheduling.rules import JSON_TOO_DEEP, MAX_JSON_DEPTH
from tests.api.support import P5, submission

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"


def post_raw(client, url: str, body: str):
    return client.generic("POST", url, body, content_type="application/json")


def test_it_refuses_a_body_larger_than_the_upload_limit_with_413(world, client_for, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 200_000

    response = post_raw(client_for(world.ana), JOBS, json.dumps(submission(payload={"blob": "x" * 300_000})))

    assert response.status_code == 413
    assert "DATA_UPLOAD_MAX_MEMORY_SIZE" in response.json()["detail"]
    assert not Job.objects.exists()


@pytest.mark.parametrize("body", ["[" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000])
def test_it_refuses_json_nested_past_the_recursion_limit_with_400(world, client_for, body):
    response = post_raw(client_for(world.ana), JOBS, body)

    assert response.status_code == 400
    assert "nested deeper" in response.json()["non_field_errors"][0]


def test_it_refuses_json_nested_deeper_than_the_parser_allows_even_when_python_can_decode_it(
    world, client_for
):
    payload = json.loads('{"a":' * 900 + "1" + "}" * 900)

    response = post_raw(client_for(world.ana), JOBS, json.dumps(submission(payload=payload)))

    assert response.status_code == 400
    assert str(MAX_JSON_DEPTH) in response.json()["non_field_errors"][0]


def test_a_payload_nested_past_its_own_depth_limit_names_the_payload(world, client_for):
    payload = json.loads('{"a":' * 20 + "1" + "}" * 20)

    response = post_raw(client_for(world.ana), JOBS, json.dumps(submission(payload=payload)))

    assert response.status_code == 400
    assert "nested deeper than 16" in response.json()["payload"][0]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"command": "a\u0000b"}, "NUL"),
        ({"a\u0000": 1}, "NUL"),
        ({"text": "\ud800"}, "unpaired surrogate"),
        ({"nested": [{"deep": "\udfff"}]}, "unpaired surrogate"),
    ],
)
def test_a_payload_postgresql_could_not_store_is_a_400_not_a_database_error(
    world, client_for, payload, message
):
    response = post_raw(client_for(world.ana), JOBS, json.dumps(submission(payload=payload)))

    assert response.status_code == 400
    assert message in response.json()["payload"][0]
    assert not Job.objects.exists()


def test_an_infinite_number_in_the_payload_is_a_400(world, client_for):
    body = json.dumps(submission(payload={"lr": 1})).replace('"lr": 1', '"lr": 1e999')

    response = post_raw(client_for(world.ana), JOBS, body)

    assert response.status_code == 400
    assert "payload" in response.json()


def test_unicode_is_fine_in_a_payload_and_refused_in_a_name(world, client_for):
    client = client_for(world.ana)

    payload = {"note": "données d'entraînement 😀", "command": ["python3", "entraîner.py"]}
    stored = client.post(JOBS, submission(payload=payload), format="json")
    refused = client.post(JOBS, submission(name="entraînement"), format="json")

    assert stored.status_code == 201
    assert stored.json()["payload"] == payload
    assert refused.status_code == 400 and "name" in refused.json()


@pytest.mark.parametrize("name", ["", "a b", "x" * 129, "semi;colon", "ünï", "名前"])
def test_names_outside_the_pattern_are_refused_on_configuration_too(world, client_for, name):
    response = client_for(world.admin).post(
        "/api/v1/service-environments/",
        {"name": name, "capacity_limits": [{"instance_type": P5, "max_capacity": 1}]},
        format="json",
    )

    assert response.status_code == 400
    assert "name" in response.json()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("scheduling_priority", -1),
        ("scheduling_priority", 10_000),
        ("scheduling_priority", 10**40),
        ("retry_attempts", 0),
        ("retry_attempts", 11),
        ("duration_seconds", -5),
        ("duration_seconds", 10**20),
        ("max_pending_seconds", 0),
        ("preemption_retries_before_termination", -1),
        ("preemption_retries_before_termination", 10**30),
    ],
)
def test_negative_and_huge_numbers_in_a_submission_are_refused_naming_the_field(
    world, client_for, field, value
):
    response = client_for(world.ana).post(JOBS, submission(**{field: value}), format="json")

    assert response.status_code == 400
    assert field in response.json()


@pytest.mark.parametrize("count", [0, -1, 10**30])
def test_a_bad_instance_count_names_its_entry(world, client_for, count):
    body = submission(instance_preferences=[{"instance_type": P5, "instance_count": count}])

    response = client_for(world.ana).post(JOBS, body, format="json")

    assert response.status_code == 400
    assert "instance_preferences[0].instance_count" in response.json()


@pytest.mark.parametrize("capacity", [-1, 2**31, 10**30])
def test_an_environment_capacity_beyond_the_column_is_a_400_not_an_overflow(world, client_for, capacity):
    response = client_for(world.admin).post(
        "/api/v1/service-environments/",
        {"name": "big", "capacity_limits": [{"instance_type": P5, "max_capacity": capacity}]},
        format="json",
    )

    assert response.status_code == 400
    assert "capacity_limits[0].max_capacity" in response.json()
    assert not ServiceEnvironment.objects.filter(name="big").exists()


def test_unknown_fields_are_refused_by_name_on_every_write(world, client_for):
    submitted = client_for(world.ana).post(
        JOBS, submission(sheduling_priority=5, colour="red"), format="json"
    )
    nested = client_for(world.ana).post(
        JOBS,
        submission(
            instance_preferences=[{"instance_type": P5, "instance_count": 1, "plan": "nlp-p5-december"}]
        ),
        format="json",
    )
    config = client_for(world.admin).patch(
        f"/api/v1/quota-shares/{world.nlp.pk}/", {"limit": 3}, format="json"
    )

    assert submitted.status_code == 400
    assert set(submitted.json()) == {"sheduling_priority", "colour"}
    assert "scheduling_priority" in submitted.json()["colour"][0]  # it says what the body takes
    assert nested.status_code == 400 and "instance_preferences[0].plan" in nested.json()
    assert config.status_code == 400 and "limit" in config.json()
    assert not Job.objects.exists()


def test_read_only_fields_sent_back_are_ignored_not_refused(world, client_for):
    client = client_for(world.ana)
    job = client.post(JOBS, submission(), format="json").json()

    again = client.post(
        JOBS,
        {
            **job,
            "name": "again",
            "client_token": None,
            "instance_preferences": submission()["instance_preferences"],
        },
        format="json",
    )

    assert again.status_code == 201
    assert again.json()["status"] == "RUNNABLE" and again.json()["id"] != job["id"]


def test_a_non_object_body_or_payload_is_a_400(world, client_for):
    client = client_for(world.ana)

    for body in ("[]", "42", '"text"', "null"):
        assert post_raw(client, JOBS, body).status_code == 400
    assert client.post(JOBS, submission(payload=[1, 2]), format="json").status_code == 400


def test_malformed_json_and_an_unsupported_media_type_are_refused(world, client_for):
    client = client_for(world.ana)

    malformed = post_raw(client, JOBS, '{"name": ')
    assert malformed.status_code == 400
    assert malformed.json()["non_field_errors"][0].startswith("JSON parse error")
    assert post_raw(client, JOBS, '{"name": NaN}').status_code == 400
    assert client.generic("POST", JOBS, "name=x", content_type="text/plain").status_code == 415


@pytest.mark.parametrize(
    "query",
    [
        "status=BOGUS",
        "job_queue=%00",
        "quota_share=" + "x" * 5000,
        "page=0",
        "page=99999999999999999999",
        "page=abc",
    ],
)
def test_hostile_list_filters_are_refused_or_empty_never_a_500(world, client_for, query):
    response = client_for(world.admin).get(f"{JOBS}?{query}")

    assert response.status_code in (200, 400, 404)


@pytest.mark.parametrize(
    "query",
    [
        "since_id=1e400",
        "since_id=99999999999999999999999",
        "job=-1",
        "since=not-a-date",
        "kind=NOPE",
        "job=%00",
    ],
)
def test_hostile_event_filters_are_refused_or_empty_never_a_500(world, client_for, query):
    response = client_for(world.admin).get(f"/api/v1/events/?{query}")

    assert response.status_code in (200, 400)


@pytest.mark.parametrize("job_id", ["99999999999999999999999", "-1", "abc", "1.5"])
def test_hostile_ids_in_urls_are_404(world, client_for, job_id):
    assert client_for(world.admin).get(f"{JOBS}{job_id}/").status_code == 404


# --- the pages: ids and numbers from query strings and forms, JSON typed into the submit form ----------------

SUPERSCRIPT_TWO = "\u00b2"  # str.isdigit() says yes, int() says no
ODD_DIGITS = [SUPERSCRIPT_TWO, "\u0663", "-1", " 7", "1.5", "99999999999999999999", "\x00", ""]


def page_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def job_form(world, **fields) -> dict:
    """The submit form's POST body: one preference row (one P5 on demand) in share nlp."""
    data = {
        "name": "pretrain",
        "quota_share": world.nlp.pk,
        "scheduling_priority": 0,
        "retry_attempts": 1,
        "payload": "{}",
        "client_token": "token-1",
        "pref-TOTAL_FORMS": 1,
        "pref-INITIAL_FORMS": 0,
        "pref-MIN_NUM_FORMS": 1,
        "pref-MAX_NUM_FORMS": 5,
        "pref-0-instance_type": InstanceType.objects.get(name=P5).pk,
        "pref-0-instance_count": 1,
        "pref-0-training_plan": "",
    }
    data.update(fields)
    return data


@pytest.mark.parametrize("raw", ODD_DIGITS)
def test_an_odd_event_cursor_is_ignored_not_a_500(world, raw):
    client = page_client(world.ana)

    older = client.get("/events/", {"before": raw})
    tail = client.get("/events/", {"after": raw}, headers={"HX-Request": "true"})

    assert older.status_code == 200 and not older.context["older"]
    assert tail.status_code == 200 and not tail.context["tail"]  # the whole page, not a tail fragment


@pytest.mark.parametrize("raw", ODD_DIGITS)
def test_removing_an_odd_preference_row_keeps_the_rows_not_a_500(world, raw):
    response = page_client(world.ana).post("/jobs/new/rows/", job_form(world, action=f"remove-{raw}"))

    assert response.status_code == 200
    assert 'name="pref-0-instance_type"' in response.content.decode()


@pytest.mark.parametrize("raw", [SUPERSCRIPT_TWO, "\u0663", "-1", "99999999999999999999", "\x00"])
def test_an_odd_preference_row_count_is_one_row_not_a_500(world, raw):
    response = page_client(world.ana).post(
        "/jobs/new/rows/", job_form(world, action="add", **{"pref-TOTAL_FORMS": raw})
    )

    assert response.status_code == 200


@pytest.mark.parametrize("raw", ODD_DIGITS)
def test_an_odd_from_run_opens_the_empty_editor_not_a_500(world, raw):
    response = page_client(world.admin).get("/manage/whatif/", {"from_run": raw})

    assert response.status_code == 200


@pytest.mark.parametrize("raw", [SUPERSCRIPT_TWO, "\u0663", "99999999999999999999", "\x00", "1.5"])
def test_an_odd_queue_in_the_whatif_editor_is_a_404_not_a_500(world, raw):
    response = page_client(world.admin).get("/manage/whatif/", {"job_queue": raw})

    assert response.status_code == 404


@pytest.mark.parametrize("raw", ODD_DIGITS)
@pytest.mark.parametrize("field", ["limit", "borrow_limit", "job_queue"])
def test_odd_numbers_in_the_live_share_check_are_skipped_not_a_500(world, raw, field):
    p5 = InstanceType.objects.get(name=P5)
    data = {"name": "new", "job_queue": world.queue.pk, "strategy": "RESERVE", "borrow_limit": "-1"}
    data[f"limit_{p5.pk}" if field == "limit" else field] = raw

    response = page_client(world.admin).post("/manage/shares/check/", data)

    assert response.status_code == 200


@pytest.mark.parametrize("raw", [SUPERSCRIPT_TWO, "99999999999999999999", "-1", "1.5", "\x00"])
def test_an_odd_limit_on_the_share_form_is_an_error_on_its_field(world, raw):
    p5 = InstanceType.objects.get(name=P5)
    data = {"name": "new", "job_queue": world.queue.pk, "team": world.team_nlp.pk, "strategy": "RESERVE"}
    data.update({"borrow_limit": "-1", "state": "ENABLED", f"limit_{p5.pk}": raw})

    response = page_client(world.admin).post("/manage/shares/new/", data)

    # The administration's forms answer 200 with the errors beside their fields (as Django's admin does).
    assert response.status_code == 200
    assert list(response.context["form"].errors) == [f"limit_{p5.pk}"]
    assert not QuotaShare.objects.filter(name="new").exists()


@pytest.mark.parametrize("raw", ["99999999999999999999", str(2**31)])
def test_an_environment_capacity_beyond_the_column_is_an_error_on_its_field_not_an_overflow(world, raw):
    p5 = InstanceType.objects.get(name=P5)
    data = {"name": "big", "state": "ENABLED", "executor": "SIMULATED", f"capacity_{p5.pk}": raw}

    response = page_client(world.admin).post("/manage/environments/new/", data)

    assert response.status_code == 200
    assert f"capacity_{p5.pk}" in response.context["form"].errors
    assert not ServiceEnvironment.objects.filter(name="big").exists()


@pytest.mark.parametrize("raw", ["\x00", SUPERSCRIPT_TWO, "99999999999999999999"])
@pytest.mark.parametrize("field", ["job_queue", "team"])
def test_an_odd_choice_on_the_share_form_is_an_error_on_its_field(world, raw, field):
    data = {"name": "new", "job_queue": world.queue.pk, "team": world.team_nlp.pk, "strategy": "RESERVE"}
    data.update({"borrow_limit": "-1", "state": "ENABLED", field: raw})

    response = page_client(world.admin).post("/manage/shares/new/", data)

    assert response.status_code == 200
    assert "Select a valid choice" in response.context["form"].errors[field][0]
    assert not QuotaShare.objects.filter(name="new").exists()


@pytest.mark.parametrize("raw", ["\x00", "1\x00", SUPERSCRIPT_TWO, "\u0663", "99999999999999999999", "-1"])
@pytest.mark.parametrize("url", ["/jobs/new/", "/jobs/new/validate/"])
def test_an_odd_quota_share_in_the_submit_form_is_an_error_on_the_field(world, raw, url):
    response = page_client(world.ana).post(url, job_form(world, quota_share=raw))

    assert response.status_code == (400 if url == "/jobs/new/" else 200)
    assert "Select a valid choice" in response.context["form"].errors["quota_share"][0]
    assert not Job.objects.exists()


@pytest.mark.parametrize("raw", ["\x00", SUPERSCRIPT_TWO, "99999999999999999999"])
def test_an_odd_instance_type_or_plan_in_a_preference_row_is_an_error_on_the_row(world, raw):
    client = page_client(world.ana)

    for field in ("pref-0-instance_type", "pref-0-training_plan"):
        response = client.post("/jobs/new/", job_form(world, **{field: raw}))
        assert response.status_code == 400
        assert "Select a valid choice" in str(response.context["formset"].errors[0])
    assert not Job.objects.exists()


@pytest.mark.parametrize("raw", ["\x00", SUPERSCRIPT_TWO, "99999999999999999999"])
def test_odd_list_filters_on_the_pages_are_ignored_not_a_500(world, raw):
    client = page_client(world.admin)

    for url in ("/jobs/", "/events/"):
        for field in ("job_queue", "quota_share", "team", "job", "page"):
            assert client.get(url, {field: raw}).status_code == 200


@pytest.mark.parametrize("url", ["/jobs/new/", "/jobs/new/validate/"])
@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 1_000, 100_000])
def test_a_payload_nested_too_deep_in_the_submit_form_is_refused_like_the_api(world, url, depth):
    response = page_client(world.ana).post(url, job_form(world, payload="[" * depth + "]" * depth))

    assert response.status_code == (400 if url == "/jobs/new/" else 200)
    assert response.context["form"].errors["payload"] == [JSON_TOO_DEEP]
    assert JSON_TOO_DEEP in response.content.decode()
    assert not Job.objects.exists()
