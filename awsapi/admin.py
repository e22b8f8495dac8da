"""Access keys in the Django admin: listed (never their secrets) and revoked through the service."""

from django.contrib import admin

from awsapi import keys
from awsapi.models import AccessKey


@admin.register(AccessKey)
class AccessKeyAdmin(admin.ModelAdmin):
    list_display = ["access_key_id", "user", "description", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["access_key_id", "user__username", "description"]
    fields = ["access_key_id", "user", "description", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = fields
    actions = ["revoke"]

    def has_add_permission(self, request) -> bool:
        return False  # a key is made by its user (page, API) or `manage.py access_key create`

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # revoked, never deleted: its id stays in the logs' history

    @admin.action(description="Revoke the selected access keys")
    def revoke(self, request, queryset):
        for key in queryset:
            keys.access_key_revoke(access_key_id=key.access_key_id, actor=request.user)
        self.message_user(request, f"{queryset.count()} access key(s) revoked")
