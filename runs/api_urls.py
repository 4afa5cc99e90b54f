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
