"""Read-only admin views: the trace is evidence, edited only by the runtime."""
from django.contrib import admin

from core.admin import ReadOnlyAdmin
from runs.models import Approval, Attempt, Decision, PlanRevision, Run, Step


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("id", "goal", "owner", "planner", "status", "stop_reason", "tool_calls", "created_at")
    list_filter = ("status", "stop_reason", "planner")
    search_fields = ("goal", "trace_id")
    date_hierarchy = "created_at"


@admin.register(PlanRevision)
class PlanRevisionAdmin(ReadOnlyAdmin):
    list_display = ("run", "number", "accepted", "reason_code", "created_at")
    list_filter = ("accepted", "reason_code")


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = ("run", "revision", "index", "key", "capability_name", "status", "approval_state")


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ("uid", "run", "capability_name", "number", "kind", "status", "error_code", "latency_s",
                    "started_at")
    list_filter = ("status", "error_code", "kind")
    search_fields = ("uid", "capability_name", "trace_id")


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdmin):
    list_display = ("run", "attempt", "decision", "created_at")
    list_filter = ("decision",)


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    list_display = ("id", "run", "kind", "capability_name", "state", "requested_at", "decided_by", "decided_at")
    list_filter = ("state", "kind")
