from django.urls import path

from notifications import views

app_name = "notifications"
urlpatterns = [
    path("", views.rule_list, name="rules"),
    path("rules/<int:rule_id>/toggle/", views.rule_toggle, name="rule_toggle"),
    path("rules/<int:rule_id>/delete/", views.rule_delete, name="rule_delete"),
    path("channels/<int:channel_id>/delete/", views.channel_delete, name="channel_delete"),
    path("deliveries/", views.delivery_list, name="deliveries"),
]
