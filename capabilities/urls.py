from django.urls import path

app_name = "capabilities"
urlpatterns = []
