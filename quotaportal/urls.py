from django.contrib import admin
from django.urls import path
from django.views.generic import RedirectView

from scheduling import ops

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", ops.healthz, name="healthz"),
    path("metrics", ops.metrics, name="metrics"),
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
]
