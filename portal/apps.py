from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The server-rendered pages: views, forms, presenters, template tags, charts. No models."""

    name = "portal"
    verbose_name = "Pages"
