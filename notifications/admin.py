from django.contrib import admin

from notifications.models import Delivery, Subscription
from scheduling.admin import ReadOnlyAdmin


@admin.register(Subscription)
class SubscriptionAdmin(ReadOnlyAdmin):
    """Subscriptions are made and removed on the Notifications page or the API, where their rules are checked."""

    list_display = ("id", "name", "owner", "team", "channel", "target", "created_at")
    list_filter = ("channel", "team")
    list_select_related = ("owner", "team")
    search_fields = ("name", "target", "owner__username")
    exclude = ("secret",)


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    """Every notification and what became of it: the delivery log of all subscriptions."""

    list_display = ("id", "created_at", "subscription", "trigger", "status", "attempts", "response_code")
    list_filter = ("status", "trigger")
    list_select_related = ("subscription",)
    raw_id_fields = ("subscription", "event")
