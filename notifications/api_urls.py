"""The notifications' REST resource, under /api/v1/ beside the others."""

from rest_framework.routers import DefaultRouter

from notifications.api import NotificationSubscriptionViewSet

router = DefaultRouter()
router.include_format_suffixes = False
router.register(
    "notification-subscriptions", NotificationSubscriptionViewSet, basename="notification-subscription"
)
urlpatterns = router.urls
