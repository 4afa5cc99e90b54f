from django.urls import path

from gateway import views

app_name = "gateway"
urlpatterns = [
    path("", views.agent_list, name="agents"),
    path("<id:agent_id>/", views.agent_detail, name="agent"),
    path("<id:agent_id>/tokens/", views.agent_token_issue, name="token_issue"),
    path("<id:agent_id>/tokens/<id:token_id>/revoke/", views.agent_token_revoke, name="token_revoke"),
]
