"""OpenAPI: every operation declares the errors it can answer with, in the shapes `exceptions.py` produces."""

from __future__ import annotations

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent

from api.serializers import ErrorSerializer

FIELD_ERRORS = {
    "type": "object",
    "description": "Each field at fault, nested fields as a path, with its messages; `non_field_errors` "
    "for the rest.",
    "additionalProperties": {"type": "array", "items": {"type": "string"}},
    "example": {"instance_preferences[1].instance_type": ["unknown instance type ml.x"]},
}

ERROR_DESCRIPTIONS = {
    "400": "Invalid input: field -> [messages].",
    "401": "Not signed in: send `Authorization: Token KEY`.",
    "403": "Signed in, but not allowed to do this.",
    "404": "No such object, or not one you may see.",
    "409": "The object's state does not allow this (e.g. an illegal job transition).",
    "413": "The request body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE.",
    "415": "The request body is not JSON, form data or multipart.",
    "429": "Too many requests (API_SUBMIT_RATE for submissions): retry after the Retry-After seconds.",
    "503": "The database is unavailable (a restart or failover): retry after the Retry-After seconds.",
}


class ApiAutoSchema(AutoSchema):
    """Adds 400/401/403/404/409/413/415/429/503 to the responses; a view names its 409 actions in
    `conflict_actions` and its throttled ones in `throttled_actions`."""

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        codes = ["401", "403", "503"]
        is_list = self.method == "GET" and self._is_list_view()
        if self.method != "GET" or (is_list and getattr(self.view, "filterset_class", None)):
            codes.append("400")
        if "{id}" in self.path or is_list:  # a list answers 404 for a page past its end
            codes.append("404")
        conflict_actions = getattr(self.view, "conflict_actions", ())
        if self.method == "DELETE" or getattr(self.view, "action", None) in conflict_actions:
            codes.append("409")
        if self.method in ("POST", "PATCH"):
            codes.extend(["413", "415"])
        if getattr(self.view, "action", None) in getattr(self.view, "throttled_actions", ()):
            codes.append("429")
        for code in sorted(codes):
            responses.setdefault(
                code,
                {
                    "description": ERROR_DESCRIPTIONS[code],
                    "content": {"application/json": {"schema": self._error_schema(code)}},
                },
            )
        return responses

    def _error_schema(self, code: str) -> dict:
        if code == "400":
            component = ResolvedComponent(
                name="FieldErrors", type=ResolvedComponent.SCHEMA, object="FieldErrors", schema=FIELD_ERRORS
            )
            self.registry.register_on_missing(component)
            return component.ref
        return self.resolve_serializer(ErrorSerializer, "response").ref


def request_bodies_refuse_unknown_fields(result, generator, request, public):
    """Request bodies refuse fields they do not name (serializers.RejectUnknownFields): the schema says so."""
    for name, component in result.get("components", {}).get("schemas", {}).items():
        if name.endswith("Request") and component.get("type") == "object":
            component["additionalProperties"] = False
    return result


def empty_filters_mean_no_filter(result, generator, request, public):
    """A list filter sent empty (`?job=`) filters nothing, as django-filter's forms do: the schema says so."""
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", ()):
                if parameter.get("in") == "query" and parameter.get("name") != "page":
                    parameter["allowEmptyValue"] = True
    return result
