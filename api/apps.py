from django.apps import AppConfig


class ApiConfig(AppConfig):
    """REST v1: serializers, views, permissions, schema. No models."""

    name = "api"
    verbose_name = "REST API"
