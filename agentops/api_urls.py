from django.urls import URLPattern, URLResolver, include, path

urlpatterns: list[URLPattern | URLResolver] = [
    path("", include("runs.api.urls")),
    path("", include("capabilities.api_urls")),
    path("notifications/", include("notifications.api_urls")),
    path("", include("evaluation.api_urls")),
    path("", include("gateway.api_urls")),
    path("review/", include("review.api_urls")),
]

# API tokens: the user's own, and the password login that issues one.
from core import api_accounts, api_audit  # noqa: E402

urlpatterns += [
    path("tokens/", api_accounts.TokenListCreateApi.as_view(), name="api-token-list"),
    path("tokens/<id:token_id>/revoke/", api_accounts.TokenRevokeApi.as_view(), name="api-token-revoke"),
    path("auth/token/", api_accounts.TokenLoginApi.as_view(), name="api-token-login"),
    path("audit/", api_audit.AuditLogApi.as_view(), name="api-audit"),
    path("audit/export/", api_audit.AuditExportApi.as_view(), name="api-audit-export"),
]

# Datasets: runs become evaluation tasks (review.datasets reads the scores, so it sits above evaluation).
from review import api_datasets  # noqa: E402

urlpatterns += [
    path("evaluation-suites/add-runs/", api_datasets.SuiteAddRunsApi.as_view(), name="api-evaluation-suite-add-runs"),
]
