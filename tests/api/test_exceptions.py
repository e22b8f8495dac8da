"""Domain errors become HTTP in one place, with one 400 shape: field path -> [messages]."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from rest_framework import exceptions

from api.exceptions import api_exception_handler, flatten_errors
from scheduling.errors import Conflict, DomainError, NotAllowed, NotFound
from scheduling.models import Job


def answer(exc):
    response = api_exception_handler(exc, {})
    return response.status_code, response.data


def test_a_django_validation_error_dict_is_a_400_with_its_fields():
    message = "plan dec-p5 belongs to another queue"
    error = ValidationError({"instance_preferences[2].training_plan": [message]})

    assert answer(error) == (400, {"instance_preferences[2].training_plan": [message]})


def test_model_wide_errors_and_plain_messages_are_non_field_errors():
    assert answer(ValidationError({"__all__": ["ends before it starts"]})) == (
        400,
        {"non_field_errors": ["ends before it starts"]},
    )
    assert answer(ValidationError("no")) == (400, {"non_field_errors": ["no"]})


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (DomainError("bad"), 400),
        (NotAllowed("bad"), 403),
        (NotFound("bad"), 404),
        (Conflict("bad"), 409),
    ],
)
def test_domain_errors_answer_with_their_status_and_detail(error, status):
    assert answer(error) == (status, {"detail": "bad"})


def test_a_job_that_does_not_exist_is_404():
    status, _ = answer(Job.DoesNotExist())

    assert status == 404


def test_drf_errors_are_flattened_to_field_paths():
    detail = {
        "instance_preferences": [{}, {"instance_type": ["unknown instance type ml.x"]}],
        "capacity_limits": {"non_field_errors": ["This list may not be empty."]},
        "tags": {0: ["Not a valid string."]},
        "name": ["This field is required."],
    }

    assert answer(exceptions.ValidationError(detail))[1] == {
        "instance_preferences[1].instance_type": ["unknown instance type ml.x"],
        "capacity_limits": ["This list may not be empty."],
        "tags[0]": ["Not a valid string."],
        "name": ["This field is required."],
    }


def test_a_top_level_list_of_errors_becomes_non_field_errors():
    assert flatten_errors(["one", "two"]) == {"non_field_errors": ["one", "two"]}
