from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from ops import views as ops

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", ops.healthz, name="healthz"),
    path("metrics", ops.metrics, name="metrics"),
    path("api/v1/", include("api.urls")),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("whatif.urls")),
    path("", include("portal.urls")),
]
