from django.urls import include, path

urlpatterns = [
    path("", include("runs.api_urls")),
    path("", include("capabilities.api_urls")),
    path("notifications/", include("notifications.api_urls")),
]
