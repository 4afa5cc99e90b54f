from django.urls import path

from runs.api import bulk as api_bulk
from runs.api import compare as api_compare
from runs.api import projects as api_projects
from runs.api import runs as api

urlpatterns = [
    path("projects/", api_projects.ProjectListApi.as_view(), name="api-project-list"),
    path("projects/<slug:slug>/limits/", api_projects.ProjectLimitsApi.as_view(), name="api-project-limits"),
    path("runs/", api.RunListApi.as_view(), name="api-run-list"),
    path("runs/start/", api.RunStartApi.as_view(), name="api-run-start"),
    path("runs/bulk/", api_bulk.BulkStartApi.as_view(), name="api-run-bulk"),
    path("runs/bulk/preview/", api_bulk.BulkPreviewApi.as_view(), name="api-run-bulk-preview"),
    path("runs/bulk/<id:job_id>/", api_bulk.BulkDetailApi.as_view(), name="api-run-bulk-detail"),
    path("runs/compare/", api_compare.RunCompareApi.as_view(), name="api-run-compare"),
    path("runs/<id:run_id>/", api.RunDetailApi.as_view(), name="api-run-detail"),
    path("runs/<id:run_id>/cancel/", api.RunCancelApi.as_view(), name="api-run-cancel"),
    path("runs/<id:run_id>/reconcile/", api.RunReconcileApi.as_view(), name="api-run-reconcile"),
    path("runs/<id:run_id>/fork/", api.RunForkApi.as_view(), name="api-run-fork"),
    path("runs/<id:run_id>/revisions/", api.RunRevisionsApi.as_view(), name="api-run-revisions"),
    path("runs/<id:run_id>/attempts/", api.RunAttemptsApi.as_view(), name="api-run-attempts"),
    path("approvals/", api.ApprovalListApi.as_view(), name="api-approval-list"),
    path("approvals/<id:approval_id>/decide/", api.ApprovalDecideApi.as_view(), name="api-approval-decide"),
]

# The external planner: an agent reads what the run needs and submits plans.
from runs.api import planning as api_planning  # noqa: E402

urlpatterns += [
    path("runs/<id:run_id>/planning/", api_planning.RunPlanningApi.as_view(), name="api-run-planning"),
    path("runs/<id:run_id>/plans/", api_planning.RunPlanSubmitApi.as_view(), name="api-run-plan-submit"),
]

# Saved views of the runs list (runs.search).
from runs.api import search as api_search  # noqa: E402

urlpatterns += [
    path("saved-views/", api_search.SavedViewListApi.as_view(), name="api-saved-view-list"),
    path("saved-views/<id:view_id>/", api_search.SavedViewDetailApi.as_view(), name="api-saved-view-detail"),
]

# Usage and cost across runs (runs.dashboard.usage).
from runs.api import usage as api_usage  # noqa: E402

urlpatterns += [
    path("usage/", api_usage.UsageApi.as_view(), name="api-usage"),
]

# Across runs: the tool-call explorer and failure groups (runs.explorer, runs.failures).
from runs.api import explorer as api_explorer  # noqa: E402

urlpatterns += [
    path("calls/", api_explorer.CallListApi.as_view(), name="api-call-list"),
    path("failure-groups/", api_explorer.FailureGroupListApi.as_view(), name="api-failure-group-list"),
]
