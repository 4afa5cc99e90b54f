from django.urls import path

from runs import api

urlpatterns = [
    path("runs/", api.RunListApi.as_view(), name="api-run-list"),
    path("runs/start/", api.RunStartApi.as_view(), name="api-run-start"),
    path("runs/<int:run_id>/", api.RunDetailApi.as_view(), name="api-run-detail"),
    path("runs/<int:run_id>/cancel/", api.RunCancelApi.as_view(), name="api-run-cancel"),
    path("runs/<int:run_id>/revisions/", api.RunRevisionsApi.as_view(), name="api-run-revisions"),
    path("runs/<int:run_id>/attempts/", api.RunAttemptsApi.as_view(), name="api-run-attempts"),
    path("approvals/", api.ApprovalListApi.as_view(), name="api-approval-list"),
    path("approvals/<int:approval_id>/decide/", api.ApprovalDecideApi.as_view(), name="api-approval-decide"),
]

# The external planner: an agent reads what the run needs and submits plans.
from runs import api_planning  # noqa: E402

urlpatterns += [
    path("runs/<int:run_id>/planning/", api_planning.RunPlanningApi.as_view(), name="api-run-planning"),
    path("runs/<int:run_id>/plans/", api_planning.RunPlanSubmitApi.as_view(), name="api-run-plan-submit"),
]

# Evaluation: planning against the direct baseline.
from runs import api_evaluation  # noqa: E402

urlpatterns += [
    path("evaluations/", api_evaluation.EvaluationListStartApi.as_view(), name="api-evaluation-list"),
    path("evaluations/<int:evaluation_id>/", api_evaluation.EvaluationDetailApi.as_view(), name="api-evaluation-detail"),
    path("evaluation-suites/", api_evaluation.EvaluationSuiteListApi.as_view(), name="api-evaluation-suite-list"),
]

# Saved views of the runs list (runs.search).
from runs import api_search  # noqa: E402

urlpatterns += [
    path("saved-views/", api_search.SavedViewListApi.as_view(), name="api-saved-view-list"),
    path("saved-views/<int:view_id>/", api_search.SavedViewDetailApi.as_view(), name="api-saved-view-detail"),
]
