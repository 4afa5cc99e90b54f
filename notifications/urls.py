from django.urls import path

from notifications import email_views, views
from notifications.slack import views as slack_views

app_name = "notifications"
urlpatterns = [
    path("", views.rule_list, name="rules"),
    path("rules/<id:rule_id>/toggle/", views.rule_toggle, name="rule_toggle"),
    path("rules/<id:rule_id>/delete/", views.rule_delete, name="rule_delete"),
    path("channels/<id:channel_id>/delete/", views.channel_delete, name="channel_delete"),
    path("deliveries/", views.delivery_list, name="deliveries"),
    path("decide/<str:token>/", email_views.email_decide, name="email_decide"),
    path("slack/interactions/", slack_views.slack_interactions, name="slack_interactions"),
    path("slack/commands/", slack_views.slack_commands, name="slack_commands"),
]
