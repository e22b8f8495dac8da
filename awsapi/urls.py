"""The AWS-compatible endpoint, mounted at /aws/batch/ (clients use endpoint_url=<portal>/aws/batch).

No trailing slashes: botocore sends `/v1/<operation>`, and a redirect would drop a POST's body.
"""

from django.urls import path

from awsapi import views

urlpatterns = [
    path("v1/tags/<path:resource_arn>", views.batch_tags, name="aws-batch-tags"),
    path("v1/<str:operation>", views.batch_operation, name="aws-batch"),
]
