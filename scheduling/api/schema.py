"""OpenAPI: every operation declares the errors it can answer with, in the shapes `exceptions.py` produces."""

from __future__ import annotations

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent

from scheduling.api.serializers import ErrorSerializer

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
}


class ApiAutoSchema(AutoSchema):
    """Adds 400/401/403/404/409 to the responses; a view names its 409 actions in `conflict_actions`."""

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        codes = ["401", "403"]
        is_list = self.method == "GET" and self._is_list_view()
        if self.method != "GET" or (is_list and getattr(self.view, "filterset_class", None)):
            codes.append("400")
        if "{id}" in self.path or is_list:  # a list answers 404 for a page past its end
            codes.append("404")
        conflict_actions = getattr(self.view, "conflict_actions", ())
        if self.method == "DELETE" or getattr(self.view, "action", None) in conflict_actions:
            codes.append("409")
        for code in sorted(codes):
            responses.setdefault(code, {
                "description": ERROR_DESCRIPTIONS[code],
                "content": {"application/json": {"schema": self._error_schema(code)}},
            })
        return responses

    def _error_schema(self, code: str) -> dict:
        if code == "400":
            component = ResolvedComponent(name="FieldErrors", type=ResolvedComponent.SCHEMA,
                                          object="FieldErrors", schema=FIELD_ERRORS)
            self.registry.register_on_missing(component)
            return component.ref
        return self.resolve_serializer(ErrorSerializer, "response").ref
