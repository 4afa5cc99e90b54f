"""The read-only admin base every app's evidence uses, and the audit trail's admin."""
from django.contrib import admin

from core.models import AuditEvent
from core.permissions import allowed
from core.roles import VIEW_AUDIT_LOG


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "actor", "action", "target_type", "target_id", "summary")
    list_filter = ("action", "target_type")
    search_fields = ("summary", "target_id")

    # Every role holds view_auditevent (an object's page shows its own history); the whole log,
    # here as on /audit/, only those who may view the audit log.
    def has_view_permission(self, request, obj=None):
        return allowed(request.user, VIEW_AUDIT_LOG)
