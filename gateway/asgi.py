"""The /mcp/ endpoint in front of the SDK's session manager: who is calling, and which protocol.

An agent token (`Authorization: Bearer aog_...`) is resolved here; the SDK then binds each
session to the token that opened it (another token using the session's id gets 404). The
gateway speaks the session protocol (initialize, Mcp-Session-Id), because a session is a
run: a client probing for the sessionless 2026 protocol is answered so it falls back. It also
watches each request for the gateway's bookkeeping: whether the answer reached the client
(gateway.delivery), a client's DELETE (so the run says the client closed its session), a
request in a session that has ended (answered 404 with why, instead of the SDK's bare one), and
JSON-RPC the SDK would mistake (a batch, a request id neither a string nor an integer: 400).
"""
from __future__ import annotations

import json

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from core.db_sessions import pooled
from core.outages import DATABASE_ERRORS, DATABASE_UNAVAILABLE, outage_of
from gateway import mcp_server, selectors
from gateway.delivery import Delivery
from gateway.tokens import TokenRefused, bearer_for
from runtime.stop import StopKind


async def _json_error(send, status: int, code: int, message: str, headers: list | None = None) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


async def _unavailable(send, scope, exc: BaseException) -> None:
    """The database failed a lookup before the SDK took the request: a 503 saying so, as the web's (its
    internals stay out of the answer)."""
    outage = outage_of(exc) or DATABASE_UNAVAILABLE
    mcp_server.log.warning("gateway %s %s: %s (%s)", scope.get("method"), scope.get("path"), outage.summary,
                           type(exc).__name__)
    await _json_error(send, 503, -32603, outage.message, [(b"retry-after", b"5")])


class _Unavailable(Exception):
    """A lookup before the SDK takes the request failed on the database."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


async def _looked_up(fn, *args, **kwargs):
    """A lookup of the gateway's own, before the SDK: a database failure in it is answered 503 (only
    these: the SDK answers its own failures, and a failure after it started answering cannot be)."""
    try:
        return await pooled(fn)(*args, **kwargs)
    except DATABASE_ERRORS as exc:
        raise _Unavailable(exc) from exc


def _header(scope, name: bytes) -> str | None:
    return next((v.decode("latin-1") for k, v in scope["headers"] if k == name), None)


async def _buffered(receive, limit: int):
    """A POST's body, read ahead (up to just past `limit`: the SDK answers a larger one 413), and a
    receive that hands the SDK the same messages, then the rest."""
    messages, size = [], 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if not message.get("more_body", False) or size > limit:
            break
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")

    async def replay():
        return messages.pop(0) if messages else await receive()

    return body, replay


def _malformed(body: bytes) -> str | None:
    """What the SDK would take for something else: a batch (MCP has none since 2025-06-18; the SDK answers
    a pydantic dump) and a request whose id is neither a string nor an integer (the SDK takes it for a
    notification and never answers). None for everything else, the SDK's own checks included."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None   # the SDK answers a parse error
    if isinstance(message, list):
        return "Invalid Request: a JSON-RPC batch; send one message per request (MCP has no batches)."
    if isinstance(message, dict) and "method" in message and "id" in message:
        request_id = message["id"]
        if isinstance(request_id, bool) or not isinstance(request_id, str | int):
            return "Invalid Request: a request's id must be a string or an integer."
    return None


class McpEndpoint:
    def __init__(self, session_manager):
        self.session_manager = session_manager

    async def __call__(self, scope, receive, send) -> None:
        try:
            await self._answer(scope, receive, send)
        except _Unavailable as unavailable:
            await _unavailable(send, scope, unavailable.error)

    async def _answer(self, scope, receive, send) -> None:
        version = _header(scope, b"mcp-protocol-version")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await _json_error(send, 400, -32600, "This gateway speaks the session protocol (initialize and "
                                                 "Mcp-Session-Id): each session is a governed run.")
            return
        authorization = (_header(scope, b"authorization") or "").split()
        if len(authorization) != 2 or authorization[0].lower() != "bearer":
            await _json_error(send, 401, -32001, "Send the agent's token: 'Authorization: Bearer <token>'.",
                              [(b"www-authenticate", b'Bearer realm="agentops-mcp"')])
            return
        try:
            bearer = await _looked_up(bearer_for, authorization[1])
        except TokenRefused as refused:
            await _json_error(send, 401, -32001, str(refused), [(b"www-authenticate", b'Bearer error="invalid_token"')])
            return
        # The principal the SDK compares a session's requests against: the token, never its key.
        principal = AccessToken(token=f"agent-token-{bearer.token_id}", client_id=f"agent-token-{bearer.token_id}",
                                scopes=[])
        session_id = _header(scope, b"mcp-session-id")
        if (session_id is not None and session_id not in mcp_server.OPEN_CONNECTIONS
                and await self._refuse_ended(send, session_id, bearer.token_id)):
            return
        if session_id is not None and scope.get("method") == "DELETE":
            mcp_server.session_closing(session_id, bearer.token_id, mcp_server.CLIENT_CLOSED)
        if scope.get("method") == "POST":
            body, receive = await _buffered(receive, mcp_server.MAX_BODY_BYTES)
            malformed = _malformed(body) if len(body) <= mcp_server.MAX_BODY_BYTES else None
            if malformed is not None:
                await _json_error(send, 400, -32600, malformed)
                return
        # Whether this request's answer reached the client (a tools/call's handler reads it: gateway.delivery).
        delivery = Delivery()
        # No stream is resumable here (the SDK has no event store): given a Last-Event-ID, the SDK's GET
        # would answer nothing at all (a 500), so the GET opens the session's stream as without one.
        headers = [(k, v) for k, v in scope["headers"] if k != b"last-event-id"]
        scope = {**scope, "headers": headers, "user": AuthenticatedUser(principal), "agentops.bearer": bearer,
                 "agentops.delivery": delivery}
        receive, send = delivery.wrap(receive, send)
        try:
            await self.session_manager.handle_request(scope, receive, send)
        finally:
            await delivery.settle()

    async def _refuse_ended(self, send, session_id: str, token_id: int) -> bool:
        """A request in a session that has ended (idle, closed, lost): the 404 the protocol asks for, saying
        why and how its run stopped, so the agent learns more than "not found" (only its own token does)."""
        session = await _looked_up(selectors.ended_session, mcp_session_id=session_id, token_id=token_id)
        if session is None:
            return False
        run = session.run
        stopped = f"stopped {run.stop_reason}: {run.stop_detail}" if run.stop_reason else f"stops {StopKind.SESSION_ENDED}"
        await _json_error(send, 404, -32600, f"Session not found: it ended ({session.end_reason}); its run {run.pk} "
                                             f"{stopped}. Initialize a new session (a new run).")
        return True
