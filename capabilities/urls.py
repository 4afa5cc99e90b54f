from django.urls import path

from capabilities import views

app_name = "capabilities"
urlpatterns = [
    path("", views.capability_list, name="list"),
]
