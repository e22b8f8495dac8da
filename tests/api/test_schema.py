"""The OpenAPI schema generates without a warning and validates; the docs page serves its JavaScript locally;
tokens come from `manage.py drf_create_token`."""

from __future__ import annotations

import io

import pytest
import yaml
from django.contrib.staticfiles import finders
from django.core.management import call_command
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.api.support import submission


def test_schema_generates_without_warnings_and_validates(tmp_path):
    target = tmp_path / "schema.yaml"

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target))

    schema = yaml.safe_load(target.read_text())
    validate_schema(schema)
    assert schema["openapi"].startswith("3.")


def test_every_operation_declares_its_errors_with_the_shared_bodies():
    schema = SchemaGenerator().get_schema(request=None, public=True)

    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert {"401", "403"} <= set(responses), f"{method} {path}"
            assert responses["403"]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/Error"
            }
            if "{id}" in path:
                assert "404" in responses, f"{method} {path}"
            if method in ("post", "patch"):
                assert responses["400"]["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/FieldErrors"
                }
    for path in ("/api/v1/jobs/{id}/cancel/", "/api/v1/jobs/{id}/report/"):
        assert "409" in schema["paths"][path]["post"]["responses"]
    assert "409" in schema["paths"]["/api/v1/jobs/{id}/"]["patch"]["responses"]


def test_every_schema_property_is_typed():
    schema = SchemaGenerator().get_schema(request=None, public=True)

    untyped = [
        f"{name}.{prop}"
        for name, component in schema["components"]["schemas"].items()
        for prop, spec in component.get("properties", {}).items()
        if not ({"type", "$ref", "allOf", "oneOf", "anyOf"} & set(spec))
    ]
    assert untyped == []


@pytest.mark.django_db
def test_the_schema_is_served_and_the_docs_page_uses_local_assets():
    client = APIClient()

    schema = client.get("/api/v1/schema/")
    docs = client.get("/api/v1/docs/")

    assert schema.status_code == 200
    assert docs.status_code == 200
    page = docs.content.decode()
    assert "cdn.jsdelivr.net" not in page
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page
    assert finders.find("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")


@pytest.mark.django_db
def test_the_docs_page_runs_no_inline_code_and_its_script_comes_from_its_own_url():
    client = APIClient()

    page = client.get("/api/v1/docs/").content.decode()
    script = client.get("/api/v1/docs/?script=")

    assert "<style" not in page and "<script>" not in page
    assert 'src="/api/v1/docs/?script="' in page
    assert script.status_code == 200 and script["Content-Type"].startswith("application/javascript")
    assert "/api/v1/schema/" in script.content.decode()


@pytest.mark.django_db
def test_drf_create_token_makes_a_token_the_api_accepts(world):
    out = io.StringIO()

    call_command("drf_create_token", "ana", stdout=out)

    key = Token.objects.get(user=world.ana).key
    assert key in out.getvalue()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    submitted = client.post("/api/v1/jobs/", submission(), format="json")
    assert submitted.status_code == 201
    assert len(client.get("/api/v1/jobs/").json()["results"]) == 1


@pytest.mark.django_db
def test_a_bad_token_is_401(world):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-token")

    response = client.get("/api/v1/jobs/")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
