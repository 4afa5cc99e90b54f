"""What the gateway reads: the tools an agent sees, and how a proposed call turned out."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Max, Q
from django.urls import reverse
from django.utils import timezone

from capabilities.models import Capability
from gateway.models import Agent, AgentToken, GatewaySession
from runs.models import Approval, Attempt, PlanRevision, Run
from runs.worker.adapters import DjangoRegistry, OwnerAuthorizer
from runs.worker.leases import registry_version
from runtime.capability import CapabilitySpec


def registry_stamps() -> dict[int, tuple]:
    """Per project, what changes whenever one of its capabilities or agents does: when to tell that
    project's sessions (and no other's) that their tool list changed. Read across every project."""
    latest = {model: dict(model._base_manager.values("project_id").order_by().annotate(m=Max("updated_at"))
                          .values_list("project_id", "m")) for model in (Capability, Agent)}
    projects = latest[Capability].keys() | latest[Agent].keys()
    return {p: (latest[Capability].get(p), latest[Agent].get(p)) for p in projects}


def agents_list():
    """Every agent, with how many of its tokens still work (for the list page and the API)."""
    live = Q(tokens__revoked_at__isnull=True, tokens__expires_at__gt=timezone.now())
    return Agent.objects.select_related("owner").annotate(live_tokens=Count("tokens", filter=live)).order_by("name")


def agent_tokens(agent: Agent):
    return AgentToken.objects.filter(agent=agent).order_by("-created_at", "-id")


def agent_sessions(agent: Agent, limit: int = 20):
    """The agent's latest sessions and their runs (newest first)."""
    return GatewaySession.objects.filter(agent=agent).select_related("run").order_by("-opened_at", "-id")[:limit]


def ended_session(*, mcp_session_id: str, token_id: int) -> GatewaySession | None:
    """The token's session of that Mcp-Session-Id, if it has ended (to say why a later request is refused)."""
    return (GatewaySession.objects.select_related("run")
            .filter(mcp_session_id=mcp_session_id, token_id=token_id, ended_at__isnull=False).first())


def capability_names() -> list[str]:
    """Every registered capability's name: what an agent may be given (enabled or not)."""
    return list(Capability.objects.order_by("name").values_list("name", flat=True))


def tools_for(agent: Agent) -> list[CapabilitySpec]:
    """Exactly the agent's capabilities that are enabled and its owner may use (as a planner sees them)."""
    wanted = set(agent.capabilities)
    registry = DjangoRegistry()
    # The specs the process holds at the registry's version (a worker's too): one small read, not the registry.
    registry.observe_version(registry_version())
    visible = registry.visible(OwnerAuthorizer(agent.owner_id))
    return [spec for spec in visible if spec.name in wanted]


@dataclass(frozen=True)
class Pending:
    """Not concluded yet; `approval` is the request it waits on, if any."""

    approval: Approval | None = None


@dataclass(frozen=True)
class Concluded:
    """The call's step concluded (or the run stopped): its last attempt, if it got one."""

    attempt: Attempt | None
    run_status: str
    stop_reason: str
    stop_detail: str
    validation_errors: list[Any]


def call_outcome(*, run_id: int, revision: int) -> Pending | Concluded:
    """One cheap read of the run (status and the two checkpoint fields that say whether it moved on)."""
    status, stop_reason, stop_detail, plans, planning = Run.objects.filter(pk=run_id).values_list(
        "status", "stop_reason", "stop_detail", "state__usage__plans", "state__planning").get()
    finished = bool(stop_reason)
    moved_on = planning is not None and int(plans or 0) >= revision
    if not (finished or moved_on):
        if status == "awaiting_approval":
            return Pending(Approval.objects.filter(run_id=run_id, state="pending").first())
        return Pending()
    attempt = (Attempt.objects.filter(run_id=run_id, step__revision__number=revision)
               .order_by("-started_at", "-id").first())
    errors: list[Any] = []
    if attempt is None:
        rejected = PlanRevision.objects.filter(run_id=run_id, number=revision, accepted=False).first()
        errors = rejected.validation_errors if rejected else []
    return Concluded(attempt, status, stop_reason, stop_detail, errors)


def audit_agent_token_pages(ids: list[str]) -> dict[str, str]:
    """For the audit log (core.audit_log): an agent token's rows link to its agent's page."""
    found = AgentToken.objects.filter(pk__in=[int(i) for i in ids if i.isdigit()]).values_list("pk", "agent_id")
    return {str(pk): reverse("gateway:agent", kwargs={"agent_id": agent_id}) for pk, agent_id in found}
