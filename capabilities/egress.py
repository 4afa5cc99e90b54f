"""What may leave the server, from settings: the egress guard, the stdio MCP policy, the redactor.

One place builds them, for the capability executor (runs, try it, evaluation),
registration checks, MCP import and notifications alike, so they can never
disagree about what is allowed.
"""
from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

import requests
from django.conf import settings

from capabilities.executors.secrets import Redactor, secret_env_names
from capabilities.kinds.mcp.executor import StdioPolicy
from capabilities.models import Capability, McpServer
from capabilities.netguard import GuardedTransport, NetGuard, URLRefused, validate_url
from core.models import AuditAction, AuditEvent

log = logging.getLogger(__name__)


def capability_guard(extra_hosts: tuple[str, ...] = ()) -> NetGuard:
    """HTTP capabilities, MCP over HTTP and notifications: AGENTOPS_HTTP_ALLOWED_HOSTS / _ALLOW_PRIVATE.

    `extra_hosts`: a notification sender's fixed vendor host (hooks.slack.com), still resolved,
    checked and pinned like any other."""
    return NetGuard([*settings.AGENTOPS_HTTP_ALLOWED_HOSTS, *extra_hosts],
                    allow_private=settings.AGENTOPS_HTTP_ALLOW_PRIVATE)


def registration_refusal(url: str) -> str | None:
    """Why a URL cannot be registered (its scheme, the allowlist), or None; each call checks again,
    on the resolved addresses."""
    try:
        validate_url(url, capability_guard(), resolve=False)
    except URLRefused as exc:
        return f"{exc} (outbound allowlist: AGENTOPS_HTTP_ALLOWED_HOSTS)"
    return None


def guarded_client(guard: NetGuard | None = None, **kw: Any):
    """An httpx.Client for anything new that must leave the server (notifications...): every request
    is checked by the guard and sent to the checked address; no redirects, no environment proxies."""
    import httpx


    return httpx.Client(transport=GuardedTransport(guard or capability_guard()), follow_redirects=False,
                        trust_env=False, **kw)


def guarded_session(guard: NetGuard) -> requests.Session:
    """A requests.Session for a library that takes one (the OTLP exporter): each request is sent as by
    guarded_client, so it is checked and goes to the checked address, no redirects, no environment proxies."""
    class NoRedirects(requests.Session):
        def send(self, request, **kwargs):
            return super().send(request, **{**kwargs, "allow_redirects": False})

    session = NoRedirects()
    session.trust_env = False
    adapter = _GuardedAdapter(guard)
    for prefix in ("http://", "https://"):
        session.mount(prefix, adapter)
    return session


class _GuardedAdapter(requests.adapters.BaseAdapter):
    """requests' transport adapter over the guarded transport; a refusal or a network failure is
    requests' ConnectionError, as the library expects of any adapter."""

    def __init__(self, guard: NetGuard) -> None:
        super().__init__()
        self.guard = guard
        self.clients: dict[Any, Any] = {}

    def _client(self, verify: Any, cert: Any):
        """One client per TLS setting the library asks for (a CA file, a client certificate)."""
        import ssl

        import httpx

        key = (verify, cert if not isinstance(cert, list) else tuple(cert))
        if key not in self.clients:
            context = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
            if verify is False:
                context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            if cert:
                context.load_cert_chain(*([cert] if isinstance(cert, str) else cert))
            inner = httpx.HTTPTransport(verify=context, trust_env=False)
            self.clients[key] = httpx.Client(transport=GuardedTransport(self.guard, inner), follow_redirects=False,
                                             trust_env=False)
        return self.clients[key]

    def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
        import httpx

        connect, read = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        try:
            answer = self._client(verify, cert).request(
                request.method, request.url, headers=dict(request.headers), content=request.body,
                timeout=httpx.Timeout(read, connect=connect))
        except (URLRefused, httpx.HTTPError, OSError) as exc:
            raise requests.exceptions.ConnectionError(str(exc), request=request) from None
        response = requests.Response()
        response.status_code, response.reason = answer.status_code, answer.reason_phrase
        response.headers = requests.structures.CaseInsensitiveDict(answer.headers)
        response._content = answer.content
        response.url, response.request, response.encoding = request.url, request, answer.encoding
        return response

    def close(self) -> None:
        for client in self.clients.values():
            client.close()
        self.clients.clear()


def server_redactor(registry_version: Any = None) -> Redactor:
    """The secrets the server itself holds: removed from every error text we store or show.

    `registry_version` (the registry's latest change, which a worker's slice knows): the
    variable names the registry reads secrets from are read once at that version, not by
    every run a worker starts; their values are always read now."""
    values = [settings.SECRET_KEY]
    if settings.AGENTOPS_OIDC_CLIENT_SECRET:
        values.append(settings.AGENTOPS_OIDC_CLIENT_SECRET)  # single sign-on's client secret (identity/)
    # The Slack app's (notifications.slack): a token or signing secret is no less one for living elsewhere.
    values.extend(v for v in (settings.AGENTOPS_SLACK_BOT_TOKEN, settings.AGENTOPS_SLACK_SIGNING_SECRET) if v)
    for name in ("DATABASE_URL", "DATABASE_REPLICA_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
        password = urlsplit(os.environ.get(name, "")).password
        if password:
            values.append(unquote(password))  # as the server sends it (its quoted form is one of the forms)
    names = [endpoint.get("api_key_env") for endpoint in settings.AGENTOPS_LLM_ENDPOINTS.values()]
    names.extend(_registry_secret_names(registry_version))
    values.extend(os.environ[name] for name in names if name and os.environ.get(name))
    return Redactor(values)


_names_at: tuple[Any, list[str]] | None = None


def forget_registry_secret_names() -> None:
    global _names_at
    _names_at = None


def _registry_secret_names(registry_version: Any = None) -> list[str]:
    """Every variable a registered capability or MCP server of any project reads a secret from (one
    query each): the same for every run whatever project it is in, so kept once per version.

    Kept for one registry version: a capability's config moving moves the version, and MCP
    servers are never edited (a new one's variables arrive with the tools imported from it)."""
    global _names_at
    cached = _names_at
    if registry_version is not None and cached is not None and cached[0] == registry_version:
        return cached[1]
    names: list[str] = []
    for config in Capability._base_manager.exclude(current_version=None).values_list("current_version__config", flat=True):
        if isinstance(config, dict):
            names.extend(secret_env_names(config))
    for env_vars in McpServer._base_manager.values_list("env_vars", flat=True):
        names.extend(str(v) for v in env_vars or [])
    if registry_version is not None:
        _names_at = (registry_version, names)
    return names


def stdio_policy(*, actor=None, context: Mapping[str, Any] | None = None) -> StdioPolicy:
    """The stdio allowlist; each server start writes an audit event naming its command line."""
    def audited(config: Mapping[str, Any], purpose: str) -> None:

        command = [str(config.get("command", "")), *[str(a) for a in config.get("args") or []]]
        server = str(config.get("server") or "")
        AuditEvent.objects.create(
            actor=actor if actor is not None and getattr(actor, "is_authenticated", False) else None,
            action=AuditAction.MCP_SERVER_STARTED, target_type="mcpserver",
            target_id=str(config.get("server_id") or ""),
            summary=f"Started stdio MCP server {server or command[0]} ({purpose}) on {socket.gethostname()}"[:300],
            details={"command": command, "server": server, "purpose": purpose, "host": socket.gethostname(),
                     "pid": os.getpid(), "env_vars": [str(v) for v in config.get("env") or []]
                     if isinstance(config.get("env"), list) else [], **dict(context or {})})
        log.info("starting stdio MCP server %s: %s", server, command)

    return StdioPolicy(commands=tuple(settings.AGENTOPS_MCP_STDIO_COMMANDS), on_start=audited)
