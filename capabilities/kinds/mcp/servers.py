"""MCP servers in the registry: adding one, listing its tools, importing tools as capabilities.

A server's annotations only suggest a policy; the admin confirms it on import
and the audit event records both.
"""
from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from capabilities.egress import capability_guard, registration_refusal, server_redactor, stdio_policy
from capabilities.executors.base import CapabilityError
from capabilities.executors.secrets import ENV_VAR_NAME
from capabilities.kinds.mcp.executor import list_tools, suggested_policy
from capabilities.models import Capability, Kind, McpServer, capability_name_validator
from capabilities.policy import (
    POLICY_KEYS,
    complete_policy,
    default_policy,
    insert_capability,
    name_errors,
    version_errors,
)
from core.audit import audit
from core.errors import Conflict, FieldErrors, InvalidInput, ServiceError
from core.models import AuditAction
from core.permissions import require

STDIO_PERMISSION = "capabilities.run_stdio_mcpserver"
LIST_TIMEOUT_S = 15.0


class UpstreamError(ServiceError):
    """Something the registry must reach (an MCP server) did not answer usefully."""

    status = 502
    code = "upstream_error"


@transaction.atomic
def mcp_server_create(*, user, name: str, transport: str, command: str = "", args: list | None = None,
                      env_vars: list | None = None, url: str = "") -> McpServer:
    require(user, "capabilities.add_mcpserver", "add MCP servers")
    errors = FieldErrors()
    args = list(args or [])
    env_vars = list(env_vars or [])
    try:
        capability_name_validator(name or "")
    except ValidationError as exc:
        for message in exc.messages:
            errors.add("name", message)
    if name and McpServer.objects.filter(name=name).exists():
        errors.add("name", f"An MCP server named {name} already exists.")
    if transport == McpServer.Transport.STDIO:
        require(user, STDIO_PERMISSION, "add stdio MCP servers (they run commands on this server's hosts)")
        if not (command or "").strip():
            errors.add("command", "Enter the command that starts the server.")
        elif all(isinstance(a, str) for a in args):
            refusal = stdio_policy().refusal(command.strip(), args)
            if refusal:
                errors.add("command", refusal[0].upper() + refusal[1:] + ".")
        if url:
            errors.add("url", "A stdio server has no URL.")
        if not all(isinstance(a, str) for a in args):
            errors.add("args", "Arguments must be text.")
    elif transport == McpServer.Transport.HTTP:
        if command or args:
            errors.add("command", "A streamable HTTP server has no command.")
        if refusal := registration_refusal(url or ""):
            errors.add("url", refusal)
    else:
        errors.add("transport", "Choose stdio or http.")
    for env_var in env_vars:
        if not isinstance(env_var, str) or not ENV_VAR_NAME.match(env_var):
            errors.add("env_vars", f"{env_var!r} is not an environment variable name (like API_TOKEN).")
    if errors:
        raise InvalidInput("The MCP server is invalid; see the fields.", fields=dict(errors))
    server = McpServer.objects.create(name=name, transport=transport, command=command.strip(), args=args,
                                      env_vars=env_vars, url=url or "",
                                      created_by=user if user.is_authenticated else None)
    audit(actor=user, action=AuditAction.MCP_SERVER_ADDED, target=server,
          summary=f"Added MCP server {name} ({transport})",
          details={"transport": transport, "command": server.command, "args": args, "url": server.url,
                   "env_vars": env_vars})
    return server


def mcp_server_tools(*, user, server_id: int, timeout_s: float = LIST_TIMEOUT_S) -> list[dict[str, Any]]:
    """The server's tools, each with the policy its (untrusted) annotations suggest.

    Not in a transaction: listing starts or contacts the server and can take seconds.
    """
    require(user, "capabilities.add_capability", "import MCP tools")
    server = McpServer.objects.filter(pk=server_id).first()
    if server is None:
        raise InvalidInput(f"No MCP server with id {server_id}.")
    if server.transport == McpServer.Transport.STDIO:
        # Listing starts the server's command on this host.
        require(user, STDIO_PERMISSION, "start stdio MCP servers")
    try:
        tools = list_tools(server.client_config(), timeout_s, guard=capability_guard(),
                           stdio=stdio_policy(actor=user, context={"import": True}))
    except CapabilityError as exc:
        # The server's stderr tail may quote the secrets it was started with (its env_vars are the registry's).
        raise UpstreamError(f"Cannot list the tools of {server.name}: {server_redactor()(exc.message)}") from None
    imported = dict(Capability.objects.filter(mcp_server=server).values_list("current_version__config__tool", "name"))
    result = []
    for tool in tools:
        suggestion = suggested_policy(tool)
        result.append({**suggestion, "title": tool.title, "capability_name": _capability_name_for(tool.name),
                       "imported_as": imported.get(tool.name),
                       "annotations": {k: v for k, v in vars(tool.annotations).items()}})
    return result


def _capability_name_for(tool_name: str) -> str:
    name = re.sub(r"[^a-z0-9_]+", "_", tool_name.lower()).strip("_")
    if not name or not name[0].isalpha():
        name = "tool_" + name
    return name[:80]


IMPORT_OVERRIDES = frozenset(POLICY_KEYS) - {"schema"}


def _without_read_only_inference(tool: dict[str, Any], suggested: dict[str, Any],
                                 overrides: dict[str, Any]) -> dict[str, Any]:
    """idempotent=true inferred from readOnlyHint does not survive an override of the side
    effect to a state-changing one: a write is idempotent only if the server says so
    (idempotentHint) or the admin changes the flag themselves."""
    side_effect = overrides.get("side_effect", suggested["side_effect"])
    inferred = suggested["idempotent"] and not tool.get("idempotent_hint")
    changes_state = side_effect in ("write", "external")
    if (inferred and changes_state and suggested["side_effect"] not in ("write", "external")
            and "idempotent" not in overrides):
        return {**overrides, "idempotent": False}
    return overrides


def mcp_tools_import(*, user, server_id: int, tools: list[dict[str, Any]],
                     available: list[dict[str, Any]] | None = None) -> list[Capability]:
    """Create one mcp capability per chosen tool, with the policy the admin confirmed.

    Each item: {"name": tool name, "capability_name"?: registry name, and any
    policy overrides (side_effect, requires_approval, idempotent, permission,
    timeout_s...)}. The argument schema is the server's inputSchema, listed
    again here rather than trusted from the request. All or nothing.
    """
    require(user, "capabilities.add_capability", "import MCP tools")
    if not isinstance(tools, list) or not tools:
        raise InvalidInput("Choose at least one tool to import.", fields={"tools": ["Choose at least one tool."]})
    listed = available if available is not None else mcp_server_tools(user=user, server_id=server_id)
    by_name = {t["name"]: t for t in listed}
    server = McpServer.objects.get(pk=server_id)
    errors = FieldErrors()
    plans = []
    seen_names: set[str] = set()
    for i, item in enumerate(tools):
        prefix = f"tools.{i}"
        tool = by_name.get(item.get("name")) if isinstance(item, dict) else None
        if tool is None:
            errors.add(f"{prefix}.name", f"The server has no tool {item.get('name') if isinstance(item, dict) else item!r}.")
            continue
        cap_name = item.get("capability_name") or tool["capability_name"]
        for message in name_errors(cap_name):
            errors.add(f"{prefix}.capability_name", message)
        if cap_name in seen_names:
            errors.add(f"{prefix}.capability_name", f"{cap_name} is chosen twice.")
        seen_names.add(cap_name)
        overrides = {k: v for k, v in item.items() if k not in ("name", "capability_name")}
        bad = sorted(set(overrides) - IMPORT_OVERRIDES)
        if bad:
            errors.add(prefix, f"Cannot set {', '.join(bad)} on import.")
            overrides = {k: v for k, v in overrides.items() if k in IMPORT_OVERRIDES}
        suggested = {k: tool[k] for k in ("description", "schema", "side_effect", "requires_approval", "idempotent")}
        policy = complete_policy({**suggested, **_without_read_only_inference(tool, suggested, overrides)},
                                 default_policy())
        config = {"tool": tool["name"]}
        problems = version_errors(kind=Kind.MCP, policy=policy, config=config, mcp_server=server)
        for key, messages in problems.items():
            for message in messages:
                errors.add(f"{prefix}.{key}", message)
        plans.append((cap_name, tool, suggested, policy, config))
    if errors:
        raise InvalidInput("Some tools cannot be imported; see the fields.", fields=dict(errors))
    created = []
    try:
        with transaction.atomic():
            for cap_name, tool, suggested, policy, config in plans:
                capability = insert_capability(user=user, name=cap_name, kind=Kind.MCP, policy=policy,
                                               config=config, mcp_server=server,
                                               change_note=f"Imported from MCP server {server.name}")
                confirmed = {k: policy[k] for k in ("side_effect", "requires_approval", "idempotent", "permission")}
                audit(actor=user, action=AuditAction.CAPABILITY_CREATED, target=capability,
                      summary=f"Imported MCP tool {tool['name']} from {server.name} as {cap_name} (v1)",
                      details={"version": 1, "kind": "mcp", "mcp_server": server.name, "tool": tool["name"],
                               "suggested": {k: suggested[k] for k in ("side_effect", "requires_approval", "idempotent")},
                               "confirmed": confirmed, "hints": tool.get("annotations", {})})
                created.append(capability)
    except IntegrityError:
        raise Conflict("A capability with one of these names was created meanwhile; reload and try again.") from None
    return created


