"""/api/v1/access-keys/: each user lists, creates and revokes their own access keys (staff: revoke any)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from awsapi import keys
from awsapi.models import AccessKey


class AccessKeySerializer(serializers.ModelSerializer):
    active = serializers.BooleanField(read_only=True, help_text="false once revoked")

    class Meta:
        model = AccessKey
        fields = ["access_key_id", "description", "created_at", "last_used_at", "revoked_at", "active"]
        read_only_fields = fields


class AccessKeyCreateSerializer(serializers.Serializer):
    description = serializers.CharField(required=False, allow_blank=True, default="", max_length=200)

    def to_internal_value(self, data):
        if hasattr(data, "keys"):
            unknown = sorted(set(data) - {"description"})
            if unknown:
                raise serializers.ValidationError(
                    {name: ["unknown field; this body takes description"] for name in unknown}
                )
        return super().to_internal_value(data)


class AccessKeyCreatedSerializer(AccessKeySerializer):
    secret_access_key = serializers.CharField(read_only=True, help_text="shown this once, never again")

    class Meta(AccessKeySerializer.Meta):
        fields = [*AccessKeySerializer.Meta.fields, "secret_access_key"]
        read_only_fields = fields


class AccessKeyList(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(responses=AccessKeySerializer(many=True), summary="Your access keys, newest first")
    def get(self, request):
        rows = keys.access_keys_of(user=request.user)
        return Response(AccessKeySerializer(rows, many=True).data)

    @extend_schema(
        request=AccessKeyCreateSerializer,
        responses={201: AccessKeyCreatedSerializer},
        summary="Create an access key for the AWS-compatible API; its secret is in this answer only",
    )
    def post(self, request):
        body = AccessKeyCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        key, secret = keys.access_key_create(
            user=request.user, description=body.validated_data["description"]
        )
        key.secret_access_key = secret
        return Response(AccessKeyCreatedSerializer(key).data, status=status.HTTP_201_CREATED)


class AccessKeyDetail(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(
        request=None,
        responses={204: None, 404: OpenApiResponse(description="No such access key of yours.")},
        summary="Revoke one of your access keys at once",
    )
    def delete(self, request, access_key_id: str):
        keys.access_key_revoke(access_key_id=access_key_id, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
