from django.urls import path

from notifications import views

urlpatterns = [
    path("notifications/", views.notifications, name="notifications"),
    path("notifications/<int:subscription_id>/", views.subscription, name="notification_subscription"),
    path("notifications/<int:subscription_id>/test/", views.subscription_test, name="notification_test"),
    path("notifications/<int:subscription_id>/edit/", views.subscription_edit, name="notification_edit"),
    path(
        "notifications/<int:subscription_id>/delete/", views.subscription_delete, name="notification_delete"
    ),
]
