"""Endpoints for operators: `/healthz` (database and broker) and `/metrics` (Prometheus)."""

from __future__ import annotations

import hmac
import logging

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from ops.metrics import QuotaportalCollector

logger = logging.getLogger("quotaportal.ops")


def _database_ok() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return "ok"
    except Exception as exc:  # any failure is what this endpoint reports
        logger.warning("healthz: database check failed: %s", exc)
        return f"error: {type(exc).__name__}"


def _broker_ok() -> str:
    from quotaportal.celery import app

    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return "ok"
    except Exception as exc:  # any failure is what this endpoint reports
        logger.warning("healthz: broker check failed: %s", exc)
        return f"error: {type(exc).__name__}"


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when the database and the broker answer, 503 naming what does not."""
    checks = {"database": _database_ok(), "broker": _broker_ok()}
    healthy = all(value == "ok" for value in checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "unavailable", **checks}, status=200 if healthy else 503
    )


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition; when METRICS_TOKEN is set, scrapers send `Authorization: Bearer <token>`."""
    token = settings.METRICS_TOKEN
    if token:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), token.encode()):
            return HttpResponse(
                "metrics need the bearer token set in METRICS_TOKEN\n", status=401, content_type="text/plain"
            )
    registry = CollectorRegistry()
    registry.register(QuotaportalCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
