"""/api/v1/: the resources, the OpenAPI schema and its browsable docs (served locally, no CDN, no inline code)."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from api import views

app_name = "api"

router = DefaultRouter()
router.include_format_suffixes = False
router.register("instance-types", views.InstanceTypeViewSet, basename="instance-type")
router.register("teams", views.TeamViewSet, basename="team")
router.register("service-environments", views.ServiceEnvironmentViewSet, basename="service-environment")
router.register("job-queues", views.JobQueueViewSet, basename="job-queue")
router.register("quota-shares", views.QuotaShareViewSet, basename="quota-share")
router.register("training-plans", views.TrainingPlanViewSet, basename="training-plan")
router.register("jobs", views.JobViewSet, basename="job")
router.register("events", views.EventViewSet, basename="event")

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves its init script from its own URL (?script), so the page runs no inline code.
    path(
        "docs/",
        SpectacularSwaggerSplitView.as_view(url_name="api:schema", template_name="api/swagger_ui.html"),
        name="docs",
    ),
    path("", include(router.urls)),
]
