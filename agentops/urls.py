from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from core import accounts, views

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/tokens/", accounts.token_list, name="account-tokens"),
    path("account/tokens/<int:token_id>/revoke/", accounts.token_revoke, name="account-token-revoke"),
    path("account/password/", accounts.PasswordChangeView.as_view(), name="account-password"),
    path("healthz", views.healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", views.ApiDocsView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/", include("agentops.api_urls")),
    path("runs/", include("runs.web.urls")),
    path("capabilities/", include("capabilities.urls")),
    path("evaluations/", include("evaluation.urls")),
    path("notifications/", include("notifications.urls")),
    path("agents/", include("gateway.urls")),
]
