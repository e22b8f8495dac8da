"""/api/v1/notification-subscriptions/: a signed-in user's subscriptions through the REST API, as on the
Notifications page (the same service, the same errors by field), with each one's delivery log and a test."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from api.serializers import JsonObjectField, NameField, StrictSerializer
from api.views import ApiViewSet
from notifications import services
from notifications.models import (
    MAX_AFTER_MINUTES,
    MIN_AFTER_MINUTES,
    Channel,
    Delivery,
    Subscription,
    Trigger,
)
from scheduling.models import Team


class SubscriptionSerializer(StrictSerializer):
    id = serializers.IntegerField(read_only=True)
    name = serializers.CharField(max_length=128)
    channel = serializers.ChoiceField(choices=Channel.values)
    target = serializers.CharField(max_length=2000, help_text="a webhook URL, or an email address for EMAIL")
    triggers = serializers.ListField(
        child=serializers.ChoiceField(choices=Trigger.values),
        allow_empty=False,
        max_length=len(Trigger.values),
    )
    team = NameField(
        "team",
        slug_field="slug",
        queryset=Team.objects.all(),
        allow_null=True,
        default=None,
        help_text="a team's slug for a team subscription (its managers and staff); null = personal",
    )
    only_my_jobs = serializers.BooleanField(default=False)
    after_minutes = serializers.IntegerField(
        min_value=MIN_AFTER_MINUTES, max_value=MAX_AFTER_MINUTES, default=30
    )
    secret = serializers.CharField(read_only=True, help_text="signs each webhook body (HMAC-SHA256)")
    created_at = serializers.DateTimeField(read_only=True)

    def to_input(self) -> services.SubscriptionInput:
        return services.SubscriptionInput(**self.validated_data)


class DeliverySerializer(serializers.ModelSerializer):
    payload = JsonObjectField(read_only=True, help_text="the document a webhook receives")

    class Meta:
        model = Delivery
        fields = [
            "id",
            "trigger",
            "subject",
            "status",
            "attempts",
            "response_code",
            "error",
            "created_at",
            "next_attempt_at",
            "sent_at",
            "payload",
        ]


@extend_schema_view(
    list=extend_schema(summary="Your notification subscriptions"),
    create=extend_schema(summary="Subscribe: a webhook, a Slack-compatible webhook or an email address"),
    retrieve=extend_schema(summary="One of your subscriptions"),
    update=extend_schema(summary="Change a subscription whole (its secret and delivery log stay)"),
    partial_update=extend_schema(summary="Change some of a subscription's fields"),
    destroy=extend_schema(summary="Remove a subscription and its delivery log"),
)
class NotificationSubscriptionViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    ApiViewSet,
):
    """Each user sees and changes only their own subscriptions (another's is a 404)."""

    permission_classes = [IsAuthenticated]
    serializer_class = SubscriptionSerializer
    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no user
            return Subscription.objects.none()
        return (
            Subscription.objects.filter(owner=self.request.user).select_related("team").order_by("name", "id")
        )

    def perform_create(self, serializer):
        serializer.instance = services.subscription_create(
            owner=self.request.user, data=serializer.to_input()
        )

    def perform_update(self, serializer):
        # PATCH names some fields: the others stay as they are.
        subscription = serializer.instance
        data = {name: getattr(subscription, name) for name in services.SubscriptionInput.__dataclass_fields__}
        data.update(serializer.validated_data)
        serializer.instance = services.subscription_update(
            user=self.request.user,
            subscription_id=subscription.pk,
            data=services.SubscriptionInput(**data),
        )

    def perform_destroy(self, instance):
        services.subscription_delete(user=self.request.user, subscription_id=instance.pk)

    @extend_schema(request=None, responses={202: DeliverySerializer}, summary="Send a test through it")
    @action(detail=True, methods=["post"])
    def test(self, request, pk=None):
        subscription = self.get_object()
        delivery = services.subscription_test(user=request.user, subscription_id=subscription.pk)
        return Response(DeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(responses={200: DeliverySerializer(many=True)}, summary="Its delivery log, newest first")
    @action(detail=True, methods=["get"], serializer_class=DeliverySerializer)
    def deliveries(self, request, pk=None):
        subscription = self.get_object()
        page = self.paginate_queryset(subscription.deliveries.order_by("-created_at", "-id"))
        return self.get_paginated_response(DeliverySerializer(page, many=True).data)
