from django.apps import AppConfig


class AwsApiConfig(AppConfig):
    name = "awsapi"
    verbose_name = "AWS-compatible API"
    default_auto_field = "django.db.models.BigAutoField"
