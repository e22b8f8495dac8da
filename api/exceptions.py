"""Domain errors to HTTP, in one place: the API's DRF exception handler.

Every 400 has one shape, field -> [messages], with nested fields flattened to the path a person would write
(`instance_preferences[1].instance_type`, `capacity_limits[0].max_capacity`), the same keys `scheduling.rules`
uses. Other errors are `{"detail": message}` with the status of the error.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import NON_FIELD_ERRORS, RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import OperationalError
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from scheduling.errors import DomainError
from scheduling.models import Job

logger = logging.getLogger("quotaportal.api")


def api_exception_handler(exc: Exception, context: dict) -> Response | None:
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return Response(
            {"detail": f"request body larger than {limit} bytes (DATA_UPLOAD_MAX_MEMORY_SIZE)"},
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, OperationalError):
        # The database went away mid-request (a restart, a failover, a terminated connection): nothing was
        # committed, and the next request reconnects. Say so, rather than a bare 500.
        set_rollback()
        logger.warning("database unavailable: %s", exc)
        response = Response(
            {
                "detail": "the database is unavailable; retry shortly (a submission with a "
                "client_token is safe to repeat)"
            },
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
        )
        response["Retry-After"] = "1"
        return response
    if isinstance(exc, DjangoValidationError):
        set_rollback()
        if hasattr(exc, "error_dict"):
            errors = {
                api_settings.NON_FIELD_ERRORS_KEY if field == NON_FIELD_ERRORS else field: messages
                for field, messages in exc.message_dict.items()
            }
            return Response(errors, status=status.HTTP_400_BAD_REQUEST)
        return Response({api_settings.NON_FIELD_ERRORS_KEY: exc.messages}, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, DomainError):
        set_rollback()
        return Response({"detail": exc.message}, status=exc.status_code)
    if isinstance(exc, Job.DoesNotExist):
        # A job that went away between the lookup and the service call (or was never visible).
        exc = exceptions.NotFound("No Job matches the given query.")
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, exceptions.ValidationError):
        response.data = flatten_errors(response.data)
    elif response is not None and isinstance(exc, exceptions.ParseError):
        # A body that is not JSON is a 400 like any other: the one shape, not {"detail"}.
        response.data = {api_settings.NON_FIELD_ERRORS_KEY: [str(exc.detail)]}
    return response


def flatten_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error detail as {"a[1].b": [messages]}; top-level lists become non_field_errors."""
    if not prefix and not isinstance(detail, dict):
        return {api_settings.NON_FIELD_ERRORS_KEY: [str(message) for message in _as_list(detail)]}
    errors: dict[str, list[str]] = {}
    _flatten(detail, prefix, errors)
    return errors


def _flatten(detail: Any, path: str, errors: dict[str, list[str]]) -> None:
    if isinstance(detail, dict):
        for key, value in detail.items():
            if isinstance(key, int):  # a ListField child's errors are keyed by index
                _flatten(value, f"{path}[{key}]", errors)
            elif key == api_settings.NON_FIELD_ERRORS_KEY and path:  # a nested object's own errors
                _flatten(value, path, errors)
            else:
                _flatten(value, f"{path}.{key}" if path else str(key), errors)
    elif isinstance(detail, list) and any(isinstance(item, (dict, list)) for item in detail):
        for index, item in enumerate(detail):
            if item:
                _flatten(item, f"{path}[{index}]", errors)
    else:
        errors.setdefault(path, []).extend(str(message) for message in _as_list(detail))


def _as_list(detail: Any) -> list:
    return detail if isinstance(detail, list) else [detail]
