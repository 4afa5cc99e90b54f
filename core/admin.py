"""The read-only admin base every app's evidence uses, and the audit trail's admin."""
from django.contrib import admin

from core.models import AuditEvent, Project, ProjectMembership
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


class MembershipInline(admin.TabularInline):
    model = ProjectMembership
    extra = 0
    autocomplete_fields = ("user",)


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    """Projects for superusers (the Projects page creates them and sets their limits, audited)."""

    list_display = ("name", "slug", "quota_runs_per_day", "quota_tokens_per_day", "quota_cost_per_day", "created_at")
    search_fields = ("name", "slug")
    inlines = [MembershipInline]

    def _superuser(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_superuser

    has_module_permission = has_view_permission = has_change_permission = _superuser
    has_add_permission = has_delete_permission = _superuser
