"""Agent pages: the list, one agent (edit, tokens, recent sessions). Viewing needs gateway.view_agent;
changing needs gateway.manage_agents, checked again by the services."""
from __future__ import annotations

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from core.errors import ServiceError
from core.permissions import allowed, forbidden, permission_needed
from gateway import selectors, services
from gateway.forms import AgentForm, AgentTokenForm
from gateway.models import Agent

VIEW = "gateway.view_agent"


@permission_needed(VIEW, "view gateway agents")
@require_http_methods(["GET", "POST"])
def agent_list(request):
    can_manage = allowed(request.user, services.MANAGE)
    form = AgentForm(request.POST or None) if can_manage else None
    if request.method == "POST":
        if not can_manage:
            return forbidden(request, "You do not have permission to register agents.")
        agent = _saved(request, form, update_existing=False)
        if agent is not None:
            return redirect("gateway:agent", agent_id=agent.pk)
    return render(request, "gateway/agents.html", {"agents": selectors.agents_list(), "form": form,
                                                   "can_manage": can_manage},
                  status=400 if request.method == "POST" else 200)


@permission_needed(VIEW, "view gateway agents")
@require_http_methods(["GET", "POST"])
def agent_detail(request, agent_id: int):
    agent = get_object_or_404(Agent.objects.select_related("owner"), pk=agent_id)
    can_manage = allowed(request.user, services.MANAGE)
    form = AgentForm(request.POST or None, agent=agent) if can_manage else None
    if request.method == "POST":
        if not can_manage:
            return forbidden(request, "You do not have permission to edit agents.")
        if _saved(request, form, agent_id=agent.pk) is not None:
            return redirect("gateway:agent", agent_id=agent.pk)
        return _detail(request, agent, form=form, status=400)
    return _detail(request, agent, form=form)


def _saved(request, form, **options) -> Agent | None:
    """The agent the form saved through the service, or None with the errors on the form."""
    if not form.is_valid():
        return None
    try:
        agent = services.agent_save(user=request.user, **form.agent_arguments(), **options)
    except ServiceError as exc:
        form.add_service_errors(exc.fields or {"__all__": exc.message})
        return None
    messages.success(request, f"Saved the agent “{agent.name}”.")
    return agent


def _detail(request, agent, *, form=None, token_form=None, new_key=None, notice=None, status=200):
    """The agent's page, or to htmx only its tokens section (what issuing and revoking change)."""
    context = {"agent": agent, "form": form, "token_form": token_form or AgentTokenForm(), "new_key": new_key,
               "tokens": selectors.agent_tokens(agent), "sessions": selectors.agent_sessions(agent),
               "can_manage": allowed(request.user, services.MANAGE), "now": timezone.now(), "notice": notice,
               "mcp_url": request.build_absolute_uri("/mcp/")}
    template = "gateway/agent.html#tokens" if request.htmx else "gateway/agent.html"
    return render(request, template, context, status=status)


@permission_needed(services.MANAGE, "issue agent tokens")
@require_POST
def agent_token_issue(request, agent_id: int):
    agent = get_object_or_404(Agent.objects.select_related("owner"), pk=agent_id)
    token_form = AgentTokenForm(request.POST)
    if not token_form.is_valid():
        return _detail(request, agent, token_form=token_form, status=400)
    try:
        _, key = services.agent_token_issue(user=request.user, agent=agent, **token_form.cleaned_data)
    except ServiceError as exc:
        token_form.add_error(None, exc.message)
        return _detail(request, agent, token_form=token_form, status=400)
    # The key is shown in this answer only: no redirect, nothing kept to show it again.
    return _detail(request, agent, new_key=key, form=AgentForm(agent=agent))


@permission_needed(services.MANAGE, "revoke agent tokens")
@require_POST
def agent_token_revoke(request, agent_id: int, token_id: int):
    agent = get_object_or_404(Agent.objects.select_related("owner"), pk=agent_id)
    try:
        token = services.agent_token_revoke(user=request.user, agent_id=agent.pk, token_id=token_id)
        level, notice = messages.SUCCESS, f"Token {token.prefix}… is revoked; its sessions are refused from now on."
    except ServiceError as exc:
        level, notice = messages.ERROR, exc.message
    if request.htmx:   # the swapped section says it; a message would wait for the next full page
        return _detail(request, agent, notice=notice)
    messages.add_message(request, level, notice)
    return redirect("gateway:agent", agent_id=agent.pk)
