from django.urls import path

from gateway import api

urlpatterns = [
    path("agents/", api.AgentListApi.as_view(), name="api-agent-list"),
    path("agents/<id:agent_id>/", api.AgentDetailApi.as_view(), name="api-agent-detail"),
    path("agents/<id:agent_id>/tokens/", api.AgentTokenListApi.as_view(), name="api-agent-token-list"),
    path("agents/<id:agent_id>/tokens/<id:token_id>/revoke/", api.AgentTokenRevokeApi.as_view(),
         name="api-agent-token-revoke"),
]
