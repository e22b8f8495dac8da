from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from awsapi import pages as aws_pages
from awsapi.access_keys_api import AccessKeyDetail, AccessKeyList
from ops import views as ops

urlpatterns = [
    path("admin/", admin.site.urls),
    # Browsers ask for /favicon.ico on pages without a <link rel=icon> (the Django admin's).
    path("favicon.ico", RedirectView.as_view(url=static("portal/favicon.svg"))),
    path("healthz", ops.healthz, name="healthz"),
    path("metrics", ops.metrics, name="metrics"),
    # The access keys of the AWS-compatible API, beside /api/v1/'s resources, and the endpoint itself.
    path("api/v1/access-keys/", AccessKeyList.as_view(), name="access-key-list"),
    path("api/v1/access-keys/<str:access_key_id>/", AccessKeyDetail.as_view(), name="access-key-detail"),
    path("api/v1/", include("api.urls")),
    path("aws/batch/", include("awsapi.urls")),
    path("profile/access-keys/", aws_pages.access_keys, name="access-keys"),
    path("api/v1/", include("notifications.api_urls")),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("whatif.urls")),
    path("", include("notifications.urls")),
    path("", include("portal.urls")),
]

handler403 = "portal.views.errors.permission_denied"
handler404 = "portal.views.errors.page_not_found"
handler500 = "portal.views.errors.server_error"
