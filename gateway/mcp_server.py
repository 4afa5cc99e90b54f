"""The MCP server at /mcp/: the official SDK's low-level Server over streamable HTTP.

A session is a run: `initialize` starts it (gateway.services.session_open); each
tools/call is proposed as the run's next one-step plan and a Celery worker advances the
run exactly as any other (validation, authorization, budgets, approval, intent, executor,
observation, repetition). The request here only waits for the attempt the worker
records, so nothing runs a capability in the web process: the worker's wake-up
(runs.wakeups) ends the wait, and a backing-off re-read catches a wake-up that was lost.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import anyio
import mcp_types as types
from django.conf import settings
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST
from pydantic import ValidationError

from core.db_sessions import pooled
from core.outages import DATABASE_ERRORS, Outage, outage_of
from core.projects import project_scope
from gateway import results, selectors, services
from gateway.delivery import Delivery
from gateway.models import Agent
from runs import wakeups
from runtime.signatures import arguments_hash
from runtime.validation import argument_errors

log = logging.getLogger(__name__)

# How often a held call re-reads its outcome without a wake-up: with a listener only as the net
# for a lost wake-up (from WOKEN_FIRST_S, doubling up to WOKEN_MAX_S); without one (a broker with
# no announcements) fast first, as most calls end in milliseconds, then at most every POLL_MAX_S.
# A progress notification every PROGRESS_EVERY_S keeps the stream alive.
WOKEN_FIRST_S, WOKEN_MAX_S = 0.05, 1.0
POLL_FIRST_S, POLL_MAX_S = 0.002, 0.1
PROGRESS_EVERY_S = 5.0
LIST_CHANGED_POLL_S = 2.0
MAX_BODY_BYTES = 1_048_576   # a request's body: more is answered 413


def db(fn, project_id: int | None = None):
    """A blocking ORM call off the event loop (core.db_sessions: sessions do not queue on one thread, and a
    session the database dropped is replaced). With a project: the call acts in it (a session's calls
    act in its agent's project, nowhere else)."""
    if project_id is None:
        return pooled(fn)

    def scoped(*args, **kwargs):
        with project_scope(project_id):
            return fn(*args, **kwargs)

    return pooled(scoped)


def _project(ctx) -> int:
    return _connection(ctx).state["project_id"]


def _connection(ctx):
    # The SDK keeps the per-session Connection (state, exit_stack) on the request's session.
    return ctx.session._connection  # noqa: SLF001 - no public accessor on the low-level context


def _bearer(ctx):
    request = ctx.request
    return request.scope.get("agentops.bearer") if request is not None else None


class Failures:
    """Server middleware, outermost: a request that fails unexpectedly is answered with what the client can
    act on, never the exception's text (the SDK would send a database's lock graph, a query, a path). A
    database outage says to try again shortly, as the web's 503 does; anything else is logged here."""

    async def __call__(self, ctx, call_next):
        try:
            return await call_next(ctx)
        except (MCPError, ValidationError):   # the protocol's own answers (the SDK maps a ValidationError)
            raise
        except Exception as exc:
            outage = outage_of(exc)
            if outage is not None:
                log.warning("gateway %s: %s (%s)", ctx.method, outage.summary, type(exc).__name__)
                raise MCPError(INTERNAL_ERROR, outage.message) from None
            log.exception("gateway %s failed", ctx.method)
            raise MCPError(INTERNAL_ERROR, f"The gateway could not handle {ctx.method}; the error is in its "
                                           "log. Try again; if it persists, tell the operator.") from None


class SessionRun:
    """Server middleware: an accepted `initialize` opens the session's run; the session's end stops it."""

    async def __call__(self, ctx, call_next):
        result = await call_next(ctx)
        if ctx.method != "initialize":
            return result
        bearer, conn = _bearer(ctx), _connection(ctx)
        info = (ctx.params or {}).get("clientInfo") or {}
        session = await db(services.session_open, bearer.project_id)(
            agent_id=bearer.agent_id, token_id=bearer.token_id, mcp_session_id=conn.session_id or "",
            client_name=str(info.get("name", ""))[:200], client_version=str(info.get("version", ""))[:100])
        conn.state.update(session_pk=session.pk, run_id=session.run_id, agent_id=bearer.agent_id,
                          project_id=bearer.project_id,
                          token_id=bearer.token_id, lock=anyio.Lock())
        OPEN_CONNECTIONS[conn.session_id or ""] = conn
        conn.exit_stack.push_async_callback(_session_closed, conn)
        return result


# This process's open sessions by their Mcp-Session-Id (sessions live in the process that opened them).
OPEN_CONNECTIONS: dict[str, Any] = {}

CLIENT_CLOSED = "the MCP client closed the session"
SHUT_DOWN = "the web process holding the MCP session shut down"


def idle_reason() -> str:
    return (f"the MCP session was idle for {settings.AGENTOPS_GATEWAY_IDLE_TIMEOUT_S} s "
            "(AGENTOPS_GATEWAY_IDLE_TIMEOUT_S: no request in flight, no open stream)")


def session_closing(session_id: str, token_id: int | None, reason: str) -> None:
    """Say why a session is about to end (its client's DELETE; the process shutting down), for the run's
    stop detail. Only the session's own token may close it: another one's DELETE is refused by the SDK."""
    conn = OPEN_CONNECTIONS.get(session_id)
    if conn is not None and conn.state.get("token_id") == token_id:
        conn.state.setdefault("end_reason", reason)


def sessions_closing(reason: str) -> None:
    """Every open session of this process is about to end, for this reason."""
    for conn in list(OPEN_CONNECTIONS.values()):
        conn.state.setdefault("end_reason", reason)


async def _session_closed(conn) -> None:
    OPEN_CONNECTIONS.pop(conn.session_id or "", None)
    session_pk = conn.state["session_pk"]
    # Neither closed by its client nor shut down: the SDK's idle timeout ended it.
    reason = conn.state.get("end_reason") or idle_reason()
    if not await db(services.session_end, conn.state["project_id"])(session_id=session_pk, reason=reason):
        log.warning("gateway session %s: its owner may no longer submit for its run; the deadline will stop it",
                    session_pk)


def _state(ctx) -> dict[str, Any]:
    state = _connection(ctx).state
    if "run_id" not in state:
        raise MCPError(INVALID_REQUEST, "This session has no run: initialize first.")
    return state


def _agent(agent_id: int) -> Agent:
    return Agent.objects.get(pk=agent_id)


def _tools(agent_id: int):
    return selectors.tools_for(_agent(agent_id))


def _tool(spec) -> types.Tool:
    hints = types.ToolAnnotations(read_only_hint=spec.side_effect in ("none", "read"),
                                  destructive_hint=spec.side_effect in ("write", "external"),
                                  idempotent_hint=bool(spec.idempotent))
    description = spec.description or spec.name
    if spec.requires_approval:
        description += " (needs an operator's approval: the call waits for the decision)"
    return types.Tool(name=spec.name, description=description, input_schema=spec.schema, annotations=hints)


async def list_tools(ctx, params) -> types.ListToolsResult:
    state = _state(ctx)
    return types.ListToolsResult(tools=[_tool(s) for s in await db(_tools, state["project_id"])(state["agent_id"])])


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    state = _state(ctx)
    run_id, name = state["run_id"], params.name
    arguments = params.arguments if params.arguments is not None else {}
    spec = next((s for s in await db(_tools, state["project_id"])(state["agent_id"]) if s.name == name), None)
    if spec is None:
        raise MCPError(INVALID_PARAMS, f"Unknown tool: {name!r} is not one of this agent's tools (see tools/list).")
    # Checked here with the runtime's own rules, so a malformed call is answered at once and
    # never spends the run's plan corrections (the pass checks again, as for every plan).
    problems = argument_errors(spec, arguments)
    if problems:
        return results.refused(run_id, "; ".join(str(p) for p in problems), error_code="invalid_arguments")
    lock: anyio.Lock = state["lock"]
    if lock.locked() and not _reissued(state, name, arguments):
        raise MCPError(INVALID_REQUEST, "Another tools/call of this session is in progress: one call at a time per "
                                        "session (open another session for parallel work).")
    async with lock:
        await _record_unheld(state)
        delivery = _delivery(ctx)
        state["in_flight"] = (name, arguments_hash(arguments), delivery)
        try:
            return await _call(ctx, state, spec, arguments, delivery)
        finally:
            state.pop("in_flight", None)


async def _record_unheld(state) -> None:
    """Settle what the database failed before the session's next call (until then, no call is proposed):
    a proposal that may have been stored (see _call), and a hold (see _call's hold)."""
    unsure = state.get("unsure")
    if unsure is not None:
        revision = await db(services.call_settle, state["project_id"])(**unsure)
        state.pop("unsure", None)
        if revision is not None:
            state["revision"] = max(state.get("revision", 0), revision)
    held = state.get("unheld")
    if held is not None:
        await db(services.call_hold, state["project_id"])(**held)
        state.pop("unheld", None)


def _delivery(ctx) -> Delivery:
    """The request's delivery watch (gateway.asgi); one that counts as delivered without an HTTP request."""
    request = ctx.request
    delivery = request.scope.get("agentops.delivery") if request is not None else None
    if delivery is None:
        delivery = Delivery()
        delivery.completed = True
    return delivery


def _reissued(state, name: str, arguments: dict) -> bool:
    """The call in flight is this very call, and its client went away: the re-issue waits for it and then
    picks up its outcome (it is held once concluded), instead of being refused or run twice."""
    flight = state.get("in_flight")
    return flight is not None and flight[2].lost and flight[:2] == (name, arguments_hash(arguments))


async def _call(ctx, state, spec, arguments, delivery: Delivery) -> types.CallToolResult:
    run_id, session_pk = state["run_id"], state["session_pk"]
    try:
        submitted = await _submit(ctx, state, spec.name, arguments)
    except services.CallRefused as refused:
        return results.refused(run_id, str(refused), stop_reason=refused.stop_reason, error_code=refused.error_code)
    except DATABASE_ERRORS:
        # The proposal may be stored all the same (a commit whose acknowledgement was lost): settled
        # before the session's next call, so the same call then picks it up instead of proposing it twice.
        state["unsure"] = {"session_id": session_pk, "capability": spec.name, "arguments": arguments,
                           "above": state.get("revision", 0)}
        raise
    state["revision"] = max(state.get("revision", 0), submitted.revision)

    async def hold() -> None:
        held = {"session_id": session_pk, "revision": submitted.revision, "capability": spec.name,
                "arguments": arguments}
        try:
            await db(services.call_hold, state["project_id"])(**held)
        except DATABASE_ERRORS:
            # The database failed the answer and the hold alike: remembered here, and recorded before the
            # session's next call, so the same call picks up this one's outcome instead of running again.
            state["unheld"] = held
            raise

    concluded = False
    try:
        outcome, waited = await _await_outcome(ctx, run_id, submitted.revision, fresh=submitted.new)
        if isinstance(outcome, selectors.Concluded):
            concluded = True
            if not submitted.new:   # a held call picked up: released now, so the next call starts afresh
                with anyio.CancelScope(shield=True):
                    await db(services.call_delivered, state["project_id"])(session_id=session_pk, revision=submitted.revision)
            # Its client gone mid-call (or going before the answer is sent): held again, so the same
            # call in this session picks up this outcome instead of running a second time.
            await delivery.concluded(on_lost=hold)
            return results.concluded(run_id, outcome)
        if outcome.approval is not None:
            return results.approval_pending(run_id, outcome.approval)
        return results.still_running(run_id, waited)
    finally:
        if not concluded:
            with anyio.CancelScope(shield=True):   # answered before it concluded, or cancelled: held
                await hold()


class _Wait:
    """A wait on a run: the worker's announcement ends a pause early (runs.wakeups); without one
    (lost, or a broker with none) the pause ends on a backing-off timer, and the caller re-reads."""

    def __init__(self, woken):
        self.woken = woken
        self.delay, self.most, self.factor = ((WOKEN_FIRST_S, WOKEN_MAX_S, 2.0) if woken is not None
                                              else (POLL_FIRST_S, POLL_MAX_S, 1.5))

    def reading(self) -> None:
        """Call before each read: a wake-up during the read is kept for the next pause."""
        if self.woken is not None:
            self.woken.clear()

    async def pause(self) -> None:
        if self.woken is None:
            await anyio.sleep(self.delay)
        else:
            with anyio.move_on_after(self.delay):
                await self.woken.wait()
        self.delay = min(self.delay * self.factor, self.most)


@contextlib.contextmanager
def _waiting(ctx, run_id: int):
    waiters = (ctx.lifespan_context or {}).get("waiters")
    with waiters.watch(run_id) if waiters is not None else contextlib.nullcontext() as woken:
        yield _Wait(woken)


async def _submit(ctx, state, capability: str, arguments: dict) -> services.Submitted:
    """Propose the call; a run that has not asked for its first plan yet (a call right after
    initialize, before a worker's first pass) is waited for, as a held call is, up to the call wait."""
    started = time.monotonic()
    with _waiting(ctx, state["run_id"]) as wait:
        while True:
            wait.reading()
            try:
                return await db(services.call_submit, state["project_id"])(
                    session_id=state["session_pk"], capability=capability, arguments=arguments)
            except services.CallRefused as refused:
                if not refused.busy or time.monotonic() - started >= settings.AGENTOPS_GATEWAY_CALL_WAIT_S:
                    raise
            await wait.pause()


async def _await_outcome(ctx, run_id: int, revision: int, *, fresh: bool):
    """Wait for the call's outcome. fresh: proposed just now, so a worker must act before it can be there."""
    started = time.monotonic()
    progressed, approval_seen = started, None
    with _waiting(ctx, run_id) as wait:
        if fresh and wait.woken is not None:
            await wait.pause()
        while True:
            wait.reading()
            outcome = await db(selectors.call_outcome, _project(ctx))(run_id=run_id, revision=revision)
            now = time.monotonic()
            if isinstance(outcome, selectors.Concluded):
                return outcome, now - started
            if outcome.approval is not None:
                approval_seen = approval_seen or now
                if now - approval_seen >= settings.AGENTOPS_GATEWAY_APPROVAL_HOLD_S:
                    return outcome, now - started
            elif now - started >= settings.AGENTOPS_GATEWAY_CALL_WAIT_S:
                return outcome, now - started
            if now - progressed >= PROGRESS_EVERY_S:
                progressed = now
                waiting = "an approval decision" if outcome.approval is not None else "the call's outcome"
                await ctx.session.report_progress(now - started, None, f"waiting for {waiting}")
            await wait.pause()


@contextlib.asynccontextmanager
async def _lifespan(server):
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(_announce_list_changes()), loop.create_task(_vouch_for_sessions())]
    try:
        async with wakeups.listening() as waiters:
            yield {"waiters": waiters}
    finally:
        for task in tasks:
            task.cancel()


class _Rounds:
    """A background loop's failed rounds, logged: an outage once, as a warning, and again when it ends
    (the loop retries every round, so a line per round would flood the log); a bug with its traceback."""

    def __init__(self, what: str):
        self.what = what
        self.outage: Outage | None = None

    def failed(self, exc: Exception) -> None:
        outage = outage_of(exc)
        if outage is None:
            log.error("could not %s", self.what, exc_info=exc)
        elif self.outage is None:
            self.outage = outage
            log.warning("could not %s: %s (%s); trying again each round", self.what, outage.summary,
                        type(exc).__name__)

    def succeeded(self) -> None:
        if self.outage is not None:
            log.warning("%s again: the %s is back", self.what, self.outage.down)
            self.outage = None


async def _vouch_for_sessions() -> None:
    """Tell the lost-session sweep, every quarter of its patience, that this process's sessions live."""
    rounds = _Rounds("vouch for this process's gateway sessions")
    while True:
        try:
            open_sessions = [c.state["session_pk"] for c in list(OPEN_CONNECTIONS.values())]
            await db(services.sessions_vouch)(session_ids=open_sessions)
            rounds.succeeded()
        except Exception as exc:   # noqa: BLE001 - the next round vouches again
            rounds.failed(exc)
        await asyncio.sleep(settings.AGENTOPS_GATEWAY_SESSION_LOST_S / 4)


async def _announce_list_changes() -> None:
    """notifications/tools/list_changed on the open sessions of a project whose registry or agents changed."""
    stamps: dict[int, tuple] | None = None
    rounds = _Rounds("read the registry's version")
    while True:
        try:
            latest = await db(selectors.registry_stamps)()
            changed = set() if stamps is None else {p for p in latest.keys() | stamps.keys()
                                                    if latest.get(p) != stamps.get(p)}
            for conn in list(OPEN_CONNECTIONS.values()):
                if conn.state.get("project_id") in changed:
                    with contextlib.suppress(Exception):   # a session without a GET stream cannot be told
                        await conn.send_tool_list_changed()
            stamps = latest
            rounds.succeeded()
        except Exception as exc:  # noqa: BLE001 - a database blip must not end the announcements
            rounds.failed(exc)
        await asyncio.sleep(LIST_CHANGED_POLL_S)


def build_server() -> Server:
    server = Server("agentops-gateway", version="1", on_list_tools=list_tools, on_call_tool=call_tool,
                    lifespan=_lifespan,
                    instructions="AgentOps governs these tools: every call goes through its runtime's policy "
                                 "(budgets, approvals, stall detection) and is recorded as a run.")
    server.middleware.extend([Failures(), SessionRun()])   # outermost first
    return server


def build_session_manager() -> StreamableHTTPSessionManager:
    return StreamableHTTPSessionManager(build_server(), session_idle_timeout=settings.AGENTOPS_GATEWAY_IDLE_TIMEOUT_S,
                                        max_request_body_size=MAX_BODY_BYTES)

