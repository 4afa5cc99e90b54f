from django.contrib import admin
from django.contrib.auth.decorators import login_not_required
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView

from core import accounts, views, views_audit, views_projects, views_roles
from identity import views as identity_views
from notifications.slack import views as slack_views
from runs.web import views_projects as runs_views_projects
from runs.web import views_usage

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", identity_views.LoginView.as_view(), name="login"),
    path("logout/", identity_views.logout, name="logout"),
    path("oidc/", include("identity.urls")),
    path("account/tokens/", accounts.token_list, name="account-tokens"),
    path("account/tokens/<id:token_id>/revoke/", accounts.token_revoke, name="account-token-revoke"),
    path("account/slack/", slack_views.account_slack, name="account-slack"),
    path("account/password/", accounts.PasswordChangeView.as_view(), name="account-password"),
    path("roles/", views_roles.role_list, name="roles"),
    path("projects/", views_projects.project_list, name="projects"),
    path("projects/switch/", views_projects.project_switch, name="project-switch"),
    path("projects/<slug:slug>/limits/", runs_views_projects.project_limits, name="project-limits"),
    path("audit/", views_audit.audit_log_page, name="audit"),
    path("healthz", views.healthz, name="healthz"),
    # Browsers ask for /favicon.ico whatever the page links (downloads, the API docs): the one icon.
    path("favicon.ico", login_not_required(RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
         name="favicon"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", views.ApiDocsView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/", include("agentops.api_urls")),
    path("runs/", include("runs.web.urls")),
    path("capabilities/", include("capabilities.urls")),
    path("evaluations/", include("evaluation.urls")),
    path("notifications/", include("notifications.urls")),
    path("agents/", include("gateway.urls")),
    path("review/", include("review.urls")),
    path("usage/", views_usage.usage_page, name="usage"),
    path("usage/usage.csv", views_usage.usage_csv, name="usage_csv"),
]
