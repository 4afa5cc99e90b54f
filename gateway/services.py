"""Every change the gateway makes: agents, their tokens, sessions and the calls in them.

The pages, the API, the create_agent command and the MCP server call these; each is one
transaction that writes its audit row with the change. A session's calls go to the run
through runs.services.plan_submit, exactly as an external agent's plans do.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from capabilities.models import Capability
from core.audit import audit
from core.errors import Conflict, InvalidInput, NotAllowed, ServiceError
from core.models import AuditAction
from core.permissions import require
from core.project_access import holds
from core.projects import active_project_id, project_scope
from core.tokens import ApiToken, TokenNotFound, capped_expiry
from gateway.models import Agent, AgentToken, GatewaySession
from gateway.tokens import default_expiry, new_key
from runs import services as run_services
from runs.labels import labels_errors
from runs.models import PlanSubmission, Run, RunStatus
from runs.planners.external import awaited_revision, next_plan_revision
from runtime.completion import completion_errors
from runtime.signatures import arguments_hash
from runtime.storable import text_storable

MANAGE = "gateway.manage_agents"


class AgentNotFound(ServiceError):
    status = 404
    code = "not_found"


def _require_manager(user, action: str) -> None:
    """user None is the server's administrator at the command line (manage.py create_agent)."""
    if user is not None:
        require(user, MANAGE, action)


# -- agents and tokens -------------------------------------------------------------------------

MAX_CAPABILITIES = 200


def _agent_errors(*, name, owner, capabilities, budgets, completion, description) -> dict[str, str]:
    """Every problem with an agent's fields, by field; types are checked before anything is used."""
    errors: dict[str, str] = {}
    if not isinstance(name, str) or not name or len(name) > 100 or labels_errors({"agent": name}):
        errors["name"] = "Name the agent: 1 to 100 characters (it labels the agent's runs)."
    if (not isinstance(capabilities, list) or len(capabilities) > MAX_CAPABILITIES
            or not all(isinstance(c, str) and 0 < len(c) <= 80 for c in capabilities)):
        errors["capabilities"] = f"capabilities must be a list of at most {MAX_CAPABILITIES} capability names."
    else:
        unknown = sorted(set(capabilities) - set(Capability.objects.filter(name__in=capabilities)
                                                 .values_list("name", flat=True)))
        if unknown:
            errors["capabilities"] = f"not in the registry: {', '.join(unknown[:10])}"
    errors.update(run_services.budget_errors(budgets))
    if completion != {} and completion_errors(completion):   # [], 0, "": no criteria either, but no object
        errors["completion"] = "; ".join(completion_errors(completion))
    if not isinstance(description, str) or len(description) > 2000:
        errors["description"] = "At most 2,000 characters."
    if owner is None or not owner.is_active:
        errors["owner"] = "The owner must be an active user."
    elif not holds(owner, active_project_id() or 0):
        errors["owner"] = "The owner must hold a role in this project: the agent acts with their roles here."
    return errors


@transaction.atomic
def agent_save(*, user, name: str, owner, capabilities: list[str], budgets: dict | None = None,
               completion: dict | None = None, description: str = "", enabled: bool = True,
               agent_id: int | None = None, update_existing: bool = True) -> Agent:
    """Register an agent, or update one: the one with `agent_id` (renaming it), else the one of
    that name (create_agent's "creates or updates"); update_existing=False refuses a taken name."""
    _require_manager(user, "register agents")
    name = name.strip() if isinstance(name, str) else name
    budgets = {} if budgets is None else budgets
    completion = {} if completion is None else completion
    errors = _agent_errors(name=name, owner=owner, capabilities=capabilities, budgets=budgets,
                           completion=completion, description=description)
    if errors:
        raise InvalidInput("The agent could not be saved: " + "; ".join(f"{k}: {v}" for k, v in errors.items()),
                           fields=errors)
    namesake = Agent.objects.select_for_update().filter(name=name).first()
    if agent_id is not None:
        agent = Agent.objects.select_for_update().filter(pk=agent_id).first()
        if agent is None:
            raise AgentNotFound(f"No agent {agent_id}.")
        if namesake is not None and namesake.pk != agent.pk:
            raise Conflict(f"Another agent is named {name!r}.", fields={"name": "Another agent has this name."})
        created = False
    elif namesake is not None and not update_existing:
        raise Conflict(f"An agent named {name!r} exists; edit it instead.",
                       fields={"name": "An agent of this name exists; edit it instead."})
    else:
        agent, created = namesake or Agent(name=name, owner=owner, created_by=user), namesake is None
    agent.name, agent.owner, agent.capabilities, agent.budgets = name, owner, sorted(set(capabilities)), budgets
    agent.completion, agent.description, agent.enabled = completion, description, enabled
    try:
        with transaction.atomic():
            agent.save()
    except IntegrityError:   # registered meanwhile under that name by another request
        raise Conflict(f"An agent named {name!r} exists; edit it instead.",
                       fields={"name": "An agent of this name exists; edit it instead."}) from None
    audit(actor=user, action=AuditAction.AGENT_SAVED, target=agent,
          summary=f"Agent {name!r} {'registered' if created else 'updated'}",
          details={"owner": owner.get_username(), "capabilities": agent.capabilities, "budgets": budgets,
                   "enabled": enabled})
    return agent


@transaction.atomic
def agent_token_issue(*, user, agent: Agent, name: str = "", expires_in_days: int | None = None,
                      minted_by: ApiToken | None = None) -> tuple[AgentToken, str]:
    """A new token for the agent; returns the row and the key, which is never shown again.

    minted_by: the API token the request authenticated with; the agent's token never outlives it."""
    _require_manager(user, "issue agent tokens")
    days = settings.AGENTOPS_GATEWAY_TOKEN_DEFAULT_DAYS if expires_in_days is None else expires_in_days
    if not isinstance(days, int) or isinstance(days, bool) or not 1 <= days <= settings.AGENTOPS_API_TOKEN_MAX_DAYS:
        raise InvalidInput(f"A token lives 1 to {settings.AGENTOPS_API_TOKEN_MAX_DAYS} days.",
                           fields={"expires_in_days": "out of range"})
    key, key_hash, prefix = new_key()
    token = AgentToken.objects.create(agent=agent, name=(name or "token")[:100], key_hash=key_hash, prefix=prefix,
                                      created_by=user, expires_at=capped_expiry(default_expiry(days), minted_by))
    audit(actor=user, action=AuditAction.AGENT_TOKEN_CREATED, target=token,
          summary=f"Token {prefix}… issued to agent {agent.name!r}",
          details={"agent": agent.name, "prefix": prefix, "expires_at": token.expires_at.isoformat()})
    return token, key


@transaction.atomic
def agent_token_revoke(*, user, token_id: int, agent_id: int | None = None) -> AgentToken:
    """Revoke an agent token (twice is harmless). Sessions it opened are refused from then on."""
    _require_manager(user, "revoke agent tokens")
    token = AgentToken.objects.select_for_update(of=("self",)).select_related("agent").filter(pk=token_id).first()
    if token is None or (agent_id is not None and token.agent_id != agent_id):
        raise TokenNotFound("No such agent token.")
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit(actor=user, action=AuditAction.AGENT_TOKEN_REVOKED, target=token,
              summary=f"Token {token.prefix}… of agent {token.agent.name!r} revoked",
              details={"agent": token.agent.name, "prefix": token.prefix})
    return token


# -- sessions ----------------------------------------------------------------------------------

def session_open(*, agent_id: int, token_id: int | None, mcp_session_id: str, client_name: str,
                 client_version: str) -> GatewaySession:
    """An MCP client initialized a session: start its run (queued like any run) and record it."""
    agent = Agent.objects.select_related("owner").get(pk=agent_id)
    # As the client said them, each NUL character or lone surrogate as U+FFFD (runtime.storable).
    client_name, client_version = text_storable(client_name), text_storable(client_version)
    labels = {"agent": agent.name, "mcp_client": (client_name or "unknown")[:200]}
    if client_version:
        labels["mcp_client_version"] = client_version[:200]
    labels = {k: v for k, v in labels.items() if not labels_errors({k: v})}
    budgets = {**settings.AGENTOPS_GATEWAY_DEFAULT_BUDGETS, **agent.budgets}
    with transaction.atomic():
        client = f"{client_name or 'unknown client'} {client_version}".strip()
        run = run_services.run_start(owner=agent.owner, goal=f"MCP session of agent {agent.name} ({client})",
                                     completion=agent.completion, budgets=budgets, planner="gateway", labels=labels)
        return GatewaySession.objects.create(run=run, agent=agent, token_id=token_id, mcp_session_id=mcp_session_id,
                                             client_name=client_name[:200], client_version=client_version[:100],
                                             alive_at=timezone.now())


def sessions_vouch(*, session_ids: list[int]) -> int:
    """The web process holding these open sessions is alive: the lost-session sweep leaves them be."""
    if not session_ids:
        return 0
    return GatewaySession.objects.filter(pk__in=session_ids, ended_at__isnull=True).update(alive_at=timezone.now())


LOST_REASON = "the MCP session was lost: the web process holding it stopped (killed or restarted)"


def sessions_lost_end() -> int:
    """End every open session its web process has not vouched for in AGENTOPS_GATEWAY_SESSION_LOST_S
    (the process was killed or restarted: the session died with its memory), so its run stops
    session_ended as a closed session's does, instead of waiting for its deadline."""
    cutoff = timezone.now() - timedelta(seconds=settings.AGENTOPS_GATEWAY_SESSION_LOST_S)
    lost = list(GatewaySession.objects.filter(ended_at__isnull=True, alive_at__lt=cutoff)
                .values_list("pk", flat=True)[:500])
    for session_id in lost:
        session_end(session_id=session_id, reason=LOST_REASON)
    return len(lost)


@dataclass(frozen=True)
class Submitted:
    """The revision whose outcome answers this call, and whether it was proposed just now."""

    revision: int
    new: bool


class CallRefused(Exception):
    """The call was not proposed: the run stopped, or it waits on something else. The message says why."""

    def __init__(self, message: str, *, stop_reason: str = "", approval_id: int | None = None, busy: bool = False,
                 error_code: str = "refused"):
        super().__init__(message)
        self.stop_reason, self.error_code = stop_reason, error_code
        self.approval_id = approval_id
        # The run will want this call shortly (it has not asked for its first plan yet): worth waiting for.
        self.busy = busy


def _locked_session(session_id: int) -> GatewaySession:
    """The session and its run, their rows locked for this transaction (calls of one session take
    turns; the run is read as it stands), without the key (FOR NO KEY UPDATE: inserts that refer to
    them are not held up). Not the agent's and its owner's rows, which a plain FOR UPDATE over the
    join locked too: every session of one agent took turns, and a session opening (its insert checks
    the agent's key) deadlocked with them."""
    return (GatewaySession.objects.select_for_update(of=("self", "run"), no_key=True)
            .select_related("run", "agent__owner").get(pk=session_id))


def call_submit(*, session_id: int, capability: str, arguments: dict) -> Submitted:
    """Propose one tools/call as the plan the run waits for, or pick up the call already proposed.

    A call answered before it concluded (approval pending, still running) is held: the same
    call again waits on that revision instead of being proposed twice."""
    with transaction.atomic():
        session = _locked_session(session_id)
        run = session.run
        if session.ended_at is not None:
            raise CallRefused(f"This session ended ({session.end_reason}); open a new one.")
        if run.is_finished:
            raise CallRefused(f"Run {run.pk} has stopped ({run.stop_reason}): {run.stop_detail}",
                              stop_reason=run.stop_reason)
        args_hash = arguments_hash(arguments)
        if session.held_revision is not None:
            if (session.held_capability, session.held_arguments_hash) == (capability, args_hash):
                return Submitted(session.held_revision, new=False)
            awaited = awaited_revision(run)
            if awaited is None or awaited <= session.held_revision:
                # Still awaiting its approval: only the same call gets its answer. Decided and being
                # carried out, or not yet taken up by a worker: the run wants this call shortly (worth
                # waiting for, as for any busy run).
                raise CallRefused(f"The earlier call of {session.held_capability} (revision {session.held_revision}) "
                                  "has not concluded (it may await an approval): repeat that call with the same "
                                  "arguments to get its result.", busy=run.status != RunStatus.AWAITING_APPROVAL)
        revision = awaited_revision(run)
        if revision is None:
            raise CallRefused(f"Run {run.pk} is still busy with the previous call; call again when it has answered.",
                              busy=True)
        step = {"id": f"call{revision}", "capability": capability, "arguments": arguments,
                "expected_outcome": "the MCP client's tools/call"}
        owner = session.agent.owner
        try:
            run_services.plan_submit(run_id=run.pk, user=owner, revision=revision, steps=[step],
                                     reason="tools/call", planner="gateway")
        except NotAllowed:
            # The owner lost the role this run's calls are made with (runs.start_run) since the session
            # opened: no call of it can be proposed until an operator restores it; trying again won't help.
            raise CallRefused(f"The agent's owner ({owner.get_username()}) may no longer start runs or propose "
                              "calls in this project, so no call can be made for it: an operator must restore "
                              "the owner's role, or give the agent another owner.",
                              error_code="permission_denied") from None
        if session.held_revision is not None:   # the held call concluded: this one replaces it
            GatewaySession.objects.filter(pk=session.pk).update(held_revision=None, held_capability="",
                                                                held_arguments_hash="")
        return Submitted(revision, new=True)


def call_settle(*, session_id: int, capability: str, arguments: dict, above: int) -> int | None:
    """A call_submit the database failed: was its proposal stored anyway (the commit's acknowledgement
    lost)? If the run holds a plan above revision `above` (the last one the session knew) proposing this
    call, it is held, so the same call picks up its outcome instead of being proposed twice, and the run
    is woken (the commit's wake-up was lost with it). Returns that revision; None if nothing was stored."""
    with transaction.atomic():
        session = _locked_session(session_id)
        stored = (PlanSubmission.objects.filter(run_id=session.run_id, revision__gt=above, no_further_plan=False)
                  .order_by("revision").values_list("revision", "plan").first())
        if stored is None:
            return None
        revision, steps = stored
        args_hash = arguments_hash(arguments)
        if not (isinstance(steps, list) and len(steps) == 1 and steps[0].get("capability") == capability
                and arguments_hash(steps[0].get("arguments")) == args_hash):
            return None
        GatewaySession.objects.filter(pk=session.pk).update(held_revision=revision, held_capability=capability,
                                                            held_arguments_hash=args_hash)
        if awaited_revision(session.run) == revision:
            run_services.run_wake(run_id=session.run_id)
        return revision


def call_hold(*, session_id: int, revision: int, capability: str, arguments: dict) -> None:
    """The call was answered before it concluded: the same call later picks up this revision."""
    GatewaySession.objects.filter(pk=session_id).update(held_revision=revision, held_capability=capability,
                                                        held_arguments_hash=arguments_hash(arguments))


def call_delivered(*, session_id: int, revision: int) -> None:
    GatewaySession.objects.filter(pk=session_id, held_revision=revision).update(
        held_revision=None, held_capability="", held_arguments_hash="")


def session_end(*, session_id: int, reason: str) -> bool:
    """The client closed the session, or it went idle: the run stops `session_ended` when it next
    needs a call. Stored with the run ("no further plan" for that revision), so it holds however
    long a call in flight or a pending approval takes, and whichever process is then running:
    an approved call runs once and the run stops after it; a rejection or an expiry stops it as
    for any run. False when the run's owner may no longer submit for it (the deadline stops it)."""
    with transaction.atomic():
        session = _locked_session(session_id)
        if session.ended_at is None:
            GatewaySession.objects.filter(pk=session.pk).update(ended_at=timezone.now(), end_reason=reason[:200])
        run = Run.objects.get(pk=session.run_id)
        if run.is_finished:
            return True
        try:
            # In the agent's project, with its owner's roles there: the lost-session sweep runs in none.
            with project_scope(session.agent.project_id):
                run_services.plan_submit(run_id=run.pk, user=session.agent.owner, revision=next_plan_revision(run),
                                         no_further_plan=True, reason=reason, planner="gateway", ahead=True)
        except (Conflict, NotAllowed):
            return False
        return True
