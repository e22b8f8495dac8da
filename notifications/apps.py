from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    """Subscriptions to what matters at 3 a.m. (failed, preempted, timed-out and lost jobs, starved shares,
    budgets, silent executors), delivered to webhooks, Slack and email."""

    name = "notifications"
    verbose_name = "Notifications"
    default_auto_field = "django.db.models.BigAutoField"
