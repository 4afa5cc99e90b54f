"""Gateway agents and their tokens over the API (the same services as the pages and create_agent).

Reading needs gateway.view_agent (every role); changing needs gateway.manage_agents.
"""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from core.api import PAGE_PARAMETERS, ApiView, page_response, paginated, validated
from core.api_accounts import TokenCreateInput, TokenOutput, new_token_body
from core.permissions import MethodPermission
from core.tokens import minting_token
from gateway import selectors, services
from gateway.models import Agent

VIEW = "gateway.view_agent"


class AgentOutput(serializers.ModelSerializer):
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Agent
        fields = ["id", "name", "description", "owner", "capabilities", "budgets", "completion", "enabled",
                  "created_at", "updated_at"]


class AgentInput(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    description = serializers.CharField(max_length=2000, allow_blank=True, required=False, default="")
    owner = serializers.CharField(max_length=150, help_text="The username whose permissions the agent acts with.")
    capabilities = serializers.ListField(child=serializers.CharField(max_length=80), max_length=200,
                                         help_text="Names of registered capabilities the agent may see and call.")
    budgets = serializers.JSONField(required=False, default=dict,
                                    help_text="Budgets of each session's run (as a run's budgets); omitted ones "
                                              "take AGENTOPS_GATEWAY_DEFAULT_BUDGETS.")
    completion = serializers.JSONField(required=False, default=dict,
                                       help_text="Completion criteria a session's run is checked against; {} for none.")
    enabled = serializers.BooleanField(required=False, default=True)

    def validate_owner(self, username: str):
        owner = get_user_model().objects.filter(username=username, is_active=True).first()
        if owner is None:
            raise serializers.ValidationError("No active user of that name.")
        return owner


class AgentTokenOutput(TokenOutput):
    """An API token's fields (core.api_accounts), but for the revocation reason agent tokens do not keep;
    its project is its agent's."""

    revoked_reason = None
    project = serializers.CharField(source="agent.project.slug", help_text="The project of the token's agent.")


class NewAgentTokenOutput(AgentTokenOutput):
    key = serializers.CharField(help_text="The token itself; shown only in this answer. "
                                          "The agent sends it as 'Authorization: Bearer <key>' to /mcp/.")


class AgentTokenInput(TokenCreateInput):
    name = serializers.CharField(max_length=100, required=False, default="token")
    expires_in_days = serializers.IntegerField(min_value=1, required=False,
                                               help_text="1 to AGENTOPS_API_TOKEN_MAX_DAYS; default "
                                                         "AGENTOPS_GATEWAY_TOKEN_DEFAULT_DAYS (90).")


def _agent_fields(agent: Agent) -> dict:
    return {"name": agent.name, "description": agent.description, "owner": agent.owner,
            "capabilities": agent.capabilities, "budgets": agent.budgets, "completion": agent.completion,
            "enabled": agent.enabled}


class AgentListApi(ApiView):
    permission_classes = [MethodPermission]
    required_perms = {"GET": VIEW, "POST": services.MANAGE}

    @extend_schema(operation_id="agents_list", parameters=PAGE_PARAMETERS, responses=paginated(AgentOutput))
    def get(self, request):
        return page_response(self, request, selectors.agents_list(), AgentOutput)

    @extend_schema(request=AgentInput, responses={201: AgentOutput})
    def post(self, request):
        agent = services.agent_save(user=request.user, update_existing=False, **validated(AgentInput, request.data))
        return Response(AgentOutput(agent).data, status=201)


class AgentDetailApi(ApiView):
    permission_classes = [MethodPermission]
    required_perms = {"GET": VIEW, "PUT": services.MANAGE, "PATCH": services.MANAGE}

    @extend_schema(responses=AgentOutput)
    def get(self, request, agent_id: int):
        return Response(AgentOutput(get_object_or_404(Agent, pk=agent_id)).data)

    @extend_schema(request=AgentInput, responses=AgentOutput)
    def put(self, request, agent_id: int):
        get_object_or_404(Agent, pk=agent_id)
        agent = services.agent_save(user=request.user, agent_id=agent_id, **validated(AgentInput, request.data))
        return Response(AgentOutput(agent).data)

    @extend_schema(request=AgentInput(partial=True), responses=AgentOutput)
    def patch(self, request, agent_id: int):
        agent = get_object_or_404(Agent.objects.select_related("owner"), pk=agent_id)
        changes = validated(AgentInput, request.data, partial=True)
        agent = services.agent_save(user=request.user, agent_id=agent_id, **{**_agent_fields(agent), **changes})
        return Response(AgentOutput(agent).data)


class AgentTokenListApi(ApiView):
    permission_classes = [MethodPermission]
    required_perms = {"GET": VIEW, "POST": services.MANAGE}

    @extend_schema(operation_id="agent_tokens_list", parameters=PAGE_PARAMETERS,
                   responses=paginated(AgentTokenOutput))
    def get(self, request, agent_id: int):
        return page_response(self, request, selectors.agent_tokens(get_object_or_404(Agent, pk=agent_id)),
                             AgentTokenOutput)

    @extend_schema(request=AgentTokenInput, responses={201: NewAgentTokenOutput})
    def post(self, request, agent_id: int):
        agent = get_object_or_404(Agent, pk=agent_id)
        token, key = services.agent_token_issue(user=request.user, agent=agent, minted_by=minting_token(request),
                                                **validated(AgentTokenInput, request.data))
        return Response(new_token_body(token, key, AgentTokenOutput), status=201)


class AgentTokenRevokeApi(ApiView):
    permission_classes = [MethodPermission]
    required_perms = {"POST": services.MANAGE}

    @extend_schema(request=None, responses=AgentTokenOutput)
    def post(self, request, agent_id: int, token_id: int):
        token = services.agent_token_revoke(user=request.user, agent_id=agent_id, token_id=token_id)
        return Response(AgentTokenOutput(token).data)
