from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from scheduling import ops

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", ops.healthz, name="healthz"),
    path("metrics", ops.metrics, name="metrics"),
    path("api/v1/", include("scheduling.api.urls")),
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
]
