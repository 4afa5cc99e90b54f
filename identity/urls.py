from django.urls import path

from identity import views

urlpatterns = [
    path("authenticate/", views.OidcStartView.as_view(), name="oidc-start"),
    path("callback/", views.OidcCallbackView.as_view(), name="oidc-callback"),
]
