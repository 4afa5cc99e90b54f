from django.urls import path

from gateway import views

app_name = "gateway"
urlpatterns = [
    path("", views.agent_list, name="agents"),
    path("<int:agent_id>/", views.agent_detail, name="agent"),
    path("<int:agent_id>/tokens/", views.agent_token_issue, name="token_issue"),
    path("<int:agent_id>/tokens/<int:token_id>/revoke/", views.agent_token_revoke, name="token_revoke"),
]
