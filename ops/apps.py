from django.apps import AppConfig


class OpsConfig(AppConfig):
    """Endpoints for operators: /healthz and /metrics. No models."""

    name = "ops"
    verbose_name = "Operations"
