from django.apps import AppConfig


class WhatIfConfig(AppConfig):
    """What-if runs: a queue's configuration replayed as it is and as proposed, side by side."""

    name = "whatif"
    verbose_name = "What-if"
    default_auto_field = "django.db.models.BigAutoField"
