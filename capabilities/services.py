"""Every change to the capability registry goes through these functions.

Pages, the API, the sync command and the post_migrate hook all call them. Each
write is one atomic transaction that writes its audit row with the change;
editing a capability never edits a version, it appends one.
"""
from __future__ import annotations

import json
import logging
import math
import re
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from capabilities.egress import capability_guard, stdio_policy
from capabilities.executors.base import CapabilityError
from capabilities.executors.secrets import has_line_break, is_credential_header
from capabilities.kinds.mcp.executor import list_tools, suggested_policy
from capabilities.kinds.python.registry import autodiscover
from capabilities.models import (
    Capability,
    CapabilityVersion,
    Kind,
    McpServer,
    capability_name_validator,
)
from capabilities.netguard import URLRefused, validate_url
from capabilities.ratelimit import as_observation, rate_limited_executor
from capabilities.selectors import capability_version_diff  # noqa: F401 - part of this module's API
from core import queue
from core.audit import audit
from core.choices import SideEffect
from core.errors import Conflict, InvalidInput, NotAllowed, ServiceError
from core.models import AuditAction, AuditEvent
from core.permissions import allowed, require
from runs.runtime import schemas
from runs.runtime.completion import condition_errors
from runs.runtime.observation import RETRYABLE_CODES, ErrorCode, Observation
from runs.runtime.validation import argument_problems

log = logging.getLogger(__name__)

POLICY_KEYS = tuple(f for f in CapabilityVersion.POLICY_FIELDS if f != "config")
SIDE_EFFECTS = tuple(c.value for c in SideEffect)
CHANGES_STATE = ("write", "external")
ERROR_CODES = tuple(c.value for c in ErrorCode)
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
ENV_VAR_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
PERMISSION = re.compile(r"^[A-Za-z0-9_]+\.[A-Za-z0-9_.-]+$")
STDIO_PERMISSION = "capabilities.run_stdio_mcpserver"
HTTP_CONFIG_KEYS = frozenset({"url", "method", "headers", "secret_headers", "status_url", "allow_redirects",
                              "max_response_bytes"})
SYNC_NOTE = "Synced from code"
CODE_POLICY = "code_policy"  # audit detail: the policy the code declared at a sync
MCP_LIST_TIMEOUT_S = 15.0
MAX_SIZE_BYTES = 100_000_000
VOLATILE_PATH = re.compile(r"^[^.\s]+(\.[^.\s]+)*$")


class UpstreamError(ServiceError):
    """Something the registry must reach (an MCP server) did not answer usefully."""

    status = 502
    code = "upstream_error"


def _defaults() -> dict[str, Any]:
    return {f: CapabilityVersion._meta.get_field(f).get_default() for f in CapabilityVersion.POLICY_FIELDS}



def http_guard():
    return capability_guard()


# -- validation -------------------------------------------------------------------------------

class _Errors(dict):
    def add(self, key: str, message: str) -> None:
        self.setdefault(key, []).append(message)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def schema_problems(schema: Any) -> list[str]:
    """Why `schema` cannot be a capability's argument schema ([] when it can)."""
    found = schemas.problems(schema)
    if found:
        return found
    if schema.get("type") != "object":
        return ['The schema must describe an object: set "type": "object".']
    return []


def policy_errors(policy: dict[str, Any]) -> dict[str, list[str]]:
    """Field-keyed problems with a complete policy (every POLICY_KEYS entry present)."""
    errors = _Errors()
    unknown = sorted(set(policy) - set(POLICY_KEYS))
    if unknown:
        errors.add("policy", f"Unknown policy fields: {', '.join(unknown)}.")
    if not isinstance(policy["description"], str):
        errors.add("description", "Must be text.")
    elif len(policy["description"]) > 5000:
        errors.add("description", "At most 5000 characters.")
    for problem in schema_problems(policy["schema"]):
        errors.add("schema", problem)
    for key in ("max_argument_bytes", "max_output_bytes"):
        value = policy[key]
        if not _is_int(value) or not 1 <= value <= MAX_SIZE_BYTES:
            errors.add(key, f"Must be a whole number of bytes from 1 to {MAX_SIZE_BYTES:,}.")
    timeout = policy["timeout_s"]
    if not _is_number(timeout) or not 0 < timeout <= 3600:
        errors.add("timeout_s", "Must be more than 0 and at most 3600 seconds.")
    attempts = policy["retry_max_attempts"]
    if not _is_int(attempts) or not 1 <= attempts <= 20:
        errors.add("retry_max_attempts", "Must be a whole number from 1 to 20 (1 means never retry).")
    for key in ("retry_backoff_base_s", "retry_backoff_cap_s"):
        value = policy[key]
        if not _is_number(value) or not 0 <= value <= 86_400:
            errors.add(key, "Must be a number of seconds from 0 to 86400.")
    if ("retry_backoff_base_s" not in errors and "retry_backoff_cap_s" not in errors
            and policy["retry_backoff_cap_s"] < policy["retry_backoff_base_s"]):
        errors.add("retry_backoff_cap_s", "The cap must not be below the base.")
    retry_on = policy["retry_on"]
    if not isinstance(retry_on, list) or not all(isinstance(c, str) for c in retry_on):
        errors.add("retry_on", "Must be a list of error codes.")
    else:
        unknown_codes = [c for c in retry_on if c not in ERROR_CODES]
        if unknown_codes:
            errors.add("retry_on", f"Unknown error codes: {', '.join(unknown_codes)}. Known: {', '.join(ERROR_CODES)}.")
        if len(set(retry_on)) != len(retry_on):
            errors.add("retry_on", "Each error code may appear once.")
    if policy["side_effect"] not in SIDE_EFFECTS:
        errors.add("side_effect", f"Must be one of {', '.join(SIDE_EFFECTS)}.")
    for key in ("requires_approval", "idempotent", "status_lookup", "distinct_calls"):
        if not isinstance(policy[key], bool):
            errors.add(key, "Must be true or false.")
    permission = policy["permission"]
    if not isinstance(permission, str):
        errors.add("permission", "Must be text.")
    elif permission and (len(permission) > 150 or not PERMISSION.match(permission)):
        errors.add("permission", 'Use the form "app_label.codename" (for example capabilities.create_ticket).')
    _pair(errors, policy, "rate_limit_calls", "rate_limit_period_s", "rate limit", max_count=2_147_483_647)
    _pair(errors, policy, "polling_max_attempts", "polling_interval_s", "polling", max_count=32_767)
    _polling_until_errors(errors, policy)
    paths = policy["volatile_paths"]
    if (not isinstance(paths, list) or len(paths) > 50
            or not all(isinstance(p, str) and VOLATILE_PATH.match(p) for p in paths)):
        errors.add("volatile_paths", 'A list of at most 50 dotted output paths, e.g. ["request_id", '
                                     '"meta.generated_at", "items.*.etag"].')
    return dict(errors)


def _polling_until_errors(errors: _Errors, policy: dict) -> None:
    until = policy["polling_until"]
    if until is None:
        return
    if policy["polling_max_attempts"] is None:
        errors.add("polling_until", "A polling condition needs a polling policy (max attempts and interval).")
    for problem in condition_errors(until, "polling_until"):
        errors.add("polling_until", problem)


def _pair(errors: _Errors, policy: dict, count_key: str, seconds_key: str, what: str, *, max_count: int) -> None:
    count, seconds = policy[count_key], policy[seconds_key]
    if (count is None) != (seconds is None):
        missing = seconds_key if seconds is None else count_key
        errors.add(missing, f"Set both {what} fields or neither.")
        return
    if count is None:
        return
    if not _is_int(count) or not 1 <= count <= max_count:
        errors.add(count_key, f"Must be a whole number from 1 to {max_count:,}.")
    if not _is_number(seconds) or not 0 < seconds <= 86_400:
        errors.add(seconds_key, "Must be more than 0 and at most 86400 seconds.")


def config_errors(*, kind: str, config: Any, policy: dict[str, Any], mcp_server: McpServer | None) -> dict[str, list[str]]:
    """Problems with a kind's config, keyed "config.<key>" (or "config", "mcp_server")."""
    errors = _Errors()
    if not isinstance(config, dict):
        errors.add("config", "Must be a JSON object.")
        return dict(errors)
    if kind == Kind.HTTP:
        _http_config_errors(errors, config, policy)
    elif kind == Kind.MCP:
        if mcp_server is None:
            errors.add("mcp_server", "Choose the MCP server that provides this tool.")
        tool = config.get("tool")
        if not isinstance(tool, str) or not tool.strip():
            errors.add("config.tool", "Name the server's tool to call.")
        extra = sorted(set(config) - {"tool"})
        if extra:
            errors.add("config", f"Unknown config keys for an MCP tool: {', '.join(extra)}.")
        if policy.get("status_lookup"):
            errors.add("status_lookup", "MCP tools cannot look up the status of a call.")
    elif kind == Kind.PYTHON:
        if not isinstance(config.get("function"), str) or ":" not in config.get("function", ""):
            errors.add("config.function", 'Must name the function as "module:qualname".')
        if policy.get("status_lookup") and not config.get("status_lookup"):
            errors.add("status_lookup", "The function registers no status lookup.")
    return dict(errors)


def _http_config_errors(errors: _Errors, config: dict, policy: dict) -> None:
    extra = sorted(set(config) - HTTP_CONFIG_KEYS)
    if extra:
        errors.add("config", f"Unknown config keys: {', '.join(extra)}. Known: {', '.join(sorted(HTTP_CONFIG_KEYS))}.")
    guard = http_guard()
    for key in ("url", "status_url"):
        url = config.get(key)
        if key == "status_url" and not url:
            continue
        if not isinstance(url, str) or not url.strip():
            errors.add(f"config.{key}", "Enter the URL to call.")
            continue
        try:
            # Registration checks scheme and allowlist; each call re-checks resolved addresses.
            validate_url(url, guard, resolve=False)
        except URLRefused as exc:
            errors.add(f"config.{key}", f"{exc} (outbound allowlist: AGENTOPS_HTTP_ALLOWED_HOSTS)")
    method = config.get("method", "GET")
    if not isinstance(method, str) or method.upper() not in HTTP_METHODS:
        errors.add("config.method", f"Must be one of {', '.join(HTTP_METHODS)}.")
    headers = config.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        errors.add("config.headers", "Must be an object of header names to text values.")
    else:
        for name in headers:
            if not HEADER_NAME.match(name):
                errors.add("config.headers", f"{name!r} is not a valid header name.")
            elif is_credential_header(name):
                errors.add("config.headers", f"{name} carries a credential: put the name of the environment "
                                             "variable that holds it in secret headers instead.")
            elif has_line_break(headers[name]):
                errors.add("config.headers", f"The value of {name} contains a line break (CR or LF).")
    secret_headers = config.get("secret_headers") or {}
    if not isinstance(secret_headers, dict):
        errors.add("config.secret_headers", "Must be an object of header names to environment variable names.")
    else:
        for name, env_var in secret_headers.items():
            if not isinstance(name, str) or not HEADER_NAME.match(name):
                errors.add("config.secret_headers", f"{name!r} is not a valid header name.")
            if not isinstance(env_var, str) or not ENV_VAR_NAME.match(env_var):
                errors.add("config.secret_headers",
                           f"The value for {name} must be an environment variable NAME (like TICKETS_API_TOKEN), "
                           "never the secret itself.")
    if "allow_redirects" in config and not isinstance(config["allow_redirects"], bool):
        errors.add("config.allow_redirects", "Must be true or false.")
    if "max_response_bytes" in config:
        value = config["max_response_bytes"]
        if not _is_int(value) or value < 1:
            errors.add("config.max_response_bytes", "Must be a whole number of bytes, at least 1.")
    if policy.get("status_lookup") and not config.get("status_url"):
        errors.add("status_lookup", "Set a status URL to look up whether a call committed.")


def _normalize_config(kind: str, config: dict) -> dict:
    if kind == Kind.HTTP and isinstance(config.get("method"), str):
        return {**config, "method": config["method"].upper()}
    return config


def name_errors(name: Any, *, exclude_pk: int | None = None) -> list[str]:
    if not isinstance(name, str) or not name:
        return ["Enter a name."]
    try:
        capability_name_validator(name)
    except ValidationError as exc:
        return list(exc.messages)
    taken = Capability.objects.filter(name=name)
    if exclude_pk is not None:
        taken = taken.exclude(pk=exclude_pk)
    if taken.exists():
        return [f"A capability named {name} already exists."]
    return []


def _validate(*, kind: str, policy: dict, config: dict, mcp_server: McpServer | None) -> None:
    errors = policy_errors(policy)
    for key, messages in config_errors(kind=kind, config=config, policy=policy, mcp_server=mcp_server).items():
        errors.setdefault(key, []).extend(messages)
    if errors:
        raise InvalidInput("The capability is invalid; see the fields.", fields=errors)


def _complete(policy: dict | None, base: dict[str, Any]) -> dict[str, Any]:
    """`base` (the defaults or the current version) with `policy`'s fields over it."""
    policy = dict(policy or {})
    policy.pop("config", None)
    merged = {k: v for k, v in base.items() if k in POLICY_KEYS}
    merged.update(policy)
    return merged


# -- writes ----------------------------------------------------------------------------------------

def _insert(*, user, name: str, kind: str, policy: dict, config: dict, mcp_server: McpServer | None,
            change_note: str) -> Capability:
    """Create the capability and its version 1. Inside a transaction; values already validated."""
    capability = Capability.objects.create(name=name, kind=kind, mcp_server=mcp_server)
    version = CapabilityVersion.objects.create(
        capability=capability, number=1, config=config, change_note=change_note[:300],
        created_by=user if user is not None and user.is_authenticated else None,
        **{k: policy[k] for k in POLICY_KEYS})
    capability.current_version = version
    capability.save(update_fields=["current_version", "updated_at"])
    return capability


@transaction.atomic
def capability_create(*, user, name: str, kind: str, policy: dict | None = None, config: dict | None = None,
                      mcp_server: McpServer | int | None = None, change_note: str = "") -> Capability:
    """Register an http or mcp capability (python ones come from code, by sync) with version 1."""
    require(user, "capabilities.add_capability", "register capabilities")
    errors = _Errors()
    for message in name_errors(name):
        errors.add("name", message)
    if kind not in (Kind.HTTP, Kind.MCP):
        errors.add("kind", "Choose http or mcp: python capabilities are registered in code and synced.")
    if isinstance(mcp_server, int):
        mcp_server = McpServer.objects.filter(pk=mcp_server).first()
        if mcp_server is None:
            errors.add("mcp_server", "No such MCP server.")
    if kind != Kind.MCP and mcp_server is not None:
        errors.add("mcp_server", "Only MCP capabilities name a server.")
    full = _complete(policy, _defaults())
    config = _normalize_config(kind, config or {})
    try:
        _validate(kind=kind, policy=full, config=config, mcp_server=mcp_server)
    except InvalidInput as exc:
        for key, messages in exc.fields.items():
            errors.setdefault(key, []).extend(messages)
    if errors:
        raise InvalidInput("The capability is invalid; see the fields.", fields=dict(errors))
    try:
        with transaction.atomic():
            capability = _insert(user=user, name=name, kind=kind, policy=full, config=config,
                                 mcp_server=mcp_server, change_note=change_note or "Created")
    except IntegrityError:
        raise InvalidInput("The capability is invalid; see the fields.",
                           fields={"name": [f"A capability named {name} already exists."]}) from None
    audit(actor=user, action=AuditAction.CAPABILITY_CREATED, target=capability,
          summary=f"Created {kind} capability {name} (v1)",
          details={"version": 1, "kind": kind, "side_effect": full["side_effect"], "change_note": change_note})
    return capability


@transaction.atomic
def capability_update(*, user, capability_id: int, policy: dict | None = None, config: dict | None = None,
                      change_note: str = "", expected_version: int | None = None) -> CapabilityVersion:
    """Append a new version with the given policy fields (others kept) and, if given, a new config.

    expected_version is the version the editor started from; if someone saved
    another version since, the edit is refused (Conflict) instead of silently
    overwriting theirs.
    """
    require(user, "capabilities.change_capability", "edit capabilities")
    capability = _locked(capability_id)
    current = capability.current_version
    if expected_version is not None and current.number != expected_version:
        raise Conflict(f"{capability.name} was changed by someone else: you edited version {expected_version}, "
                       f"the current version is {current.number}. Reload and apply your change again.")
    full = _complete(policy, current.policy())
    new_config = current.config if config is None else _normalize_config(capability.kind, config)
    errors = {}
    if capability.kind == Kind.PYTHON and new_config != current.config:
        errors["config"] = ["A python capability's function is set by its code (and synced), not here."]
    try:
        _validate(kind=capability.kind, policy=full, config=new_config, mcp_server=capability.mcp_server)
    except InvalidInput as exc:
        errors.update(exc.fields)
    if errors:
        raise InvalidInput("The capability is invalid; see the fields.", fields=errors)
    version = _append_version(capability=capability, current=current, policy=full, config=new_config, user=user,
                              change_note=change_note)
    if version is None:
        raise InvalidInput("No changes: the new version would equal the current one.", fields={})
    return version


def _locked(capability_id: int) -> Capability:
    try:
        return (Capability.objects.select_for_update(of=("self",)).select_related("current_version", "mcp_server")
                .get(pk=capability_id))
    except Capability.DoesNotExist:
        raise InvalidInput(f"No capability with id {capability_id}.") from None


def _append_version(*, capability: Capability, current: CapabilityVersion, policy: dict, config: dict, user,
                    change_note: str, audit_details: dict | None = None) -> CapabilityVersion | None:
    """Write version current+1 and point the capability at it; None when nothing changed. In a transaction."""
    new_policy = {**policy, "config": config}
    changes = capability_version_diff(current, new_policy)
    if not changes:
        return None
    try:
        with transaction.atomic():
            version = CapabilityVersion.objects.create(
                capability=capability, number=current.number + 1, config=config, change_note=change_note[:300],
                created_by=user if user is not None and user.is_authenticated else None,
                **{k: policy[k] for k in POLICY_KEYS})
    except IntegrityError:
        # Another writer took this number between our read and our insert.
        raise Conflict(f"{capability.name} was changed by someone else; reload and try again.") from None
    capability.current_version = version
    capability.save(update_fields=["current_version", "updated_at"])
    audit(actor=user, action=AuditAction.CAPABILITY_UPDATED, target=capability,
          summary=f"{capability.name} v{current.number} → v{version.number}: "
                  + ", ".join(sorted({c[0].split(".")[0] for c in changes})),
          details={"from_version": current.number, "version": version.number, "change_note": change_note,
                   "changes": [[f, _jsonable(o), _jsonable(n)] for f, o, n in changes], **(audit_details or {})})
    return version


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value


@transaction.atomic
def capability_set_enabled(*, user, capability_id: int, enabled: bool) -> Capability:
    """Switch a capability on or off (no new version: enabled is not policy). A no-op writes nothing."""
    require(user, "capabilities.change_capability", "enable or disable capabilities")
    capability = _locked(capability_id)
    if capability.enabled == enabled:
        return capability
    capability.enabled = enabled
    capability.save(update_fields=["enabled", "updated_at"])
    audit(actor=user, action=AuditAction.CAPABILITY_ENABLED if enabled else AuditAction.CAPABILITY_DISABLED,
          target=capability, summary=f"{capability.name} {'enabled' if enabled else 'disabled'}",
          details={"enabled": enabled})
    return capability


# -- MCP servers and tools -----------------------------------------------------------------------------

@transaction.atomic
def mcp_server_create(*, user, name: str, transport: str, command: str = "", args: list | None = None,
                      env_vars: list | None = None, url: str = "") -> McpServer:
    require(user, "capabilities.add_mcpserver", "add MCP servers")

    errors = _Errors()
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
        try:
            validate_url(url or "", http_guard(), resolve=False)
        except URLRefused as exc:
            errors.add("url", f"{exc} (outbound allowlist: AGENTOPS_HTTP_ALLOWED_HOSTS)")
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


def mcp_server_tools(*, user, server_id: int, timeout_s: float = MCP_LIST_TIMEOUT_S) -> list[dict[str, Any]]:
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
        tools = list_tools(server.client_config(), timeout_s, guard=http_guard(),
                           stdio=stdio_policy(actor=user, context={"import": True}))
    except CapabilityError as exc:
        raise UpstreamError(f"Cannot list the tools of {server.name}: {exc.message}") from None
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
    errors = _Errors()
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
        policy = _complete({**suggested, **_without_read_only_inference(tool, suggested, overrides)}, _defaults())
        config = {"tool": tool["name"]}
        problems = policy_errors(policy)
        for key, messages in config_errors(kind=Kind.MCP, config=config, policy=policy, mcp_server=server).items():
            problems.setdefault(key, []).extend(messages)
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
                capability = _insert(user=user, name=cap_name, kind=Kind.MCP, policy=policy, config=config,
                                     mcp_server=server, change_note=f"Imported from MCP server {server.name}")
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


# -- python capabilities from code ---------------------------------------------------------------------

@dataclass
class SyncResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


def _policy_from_definition(definition) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = definition.to_spec()
    retry_on = sorted(c.value for c in spec.retry.retry_on)
    policy = {
        "description": spec.description, "schema": json.loads(json.dumps(spec.schema)),
        "max_argument_bytes": spec.max_argument_bytes, "max_output_bytes": spec.max_output_bytes,
        "timeout_s": float(spec.timeout_s), "retry_max_attempts": spec.retry.max_attempts,
        "retry_backoff_base_s": float(spec.retry.backoff_base_s), "retry_backoff_cap_s": float(spec.retry.backoff_cap_s),
        # [] means "the runtime's retryable codes": keep the default as the default.
        "retry_on": [] if set(retry_on) == {c.value for c in RETRYABLE_CODES} else retry_on,
        "side_effect": spec.side_effect.value, "requires_approval": spec.requires_approval,
        "idempotent": spec.idempotent, "status_lookup": spec.status_lookup, "permission": spec.permission,
        "rate_limit_calls": spec.rate_limit.max_calls if spec.rate_limit else None,
        "rate_limit_period_s": float(spec.rate_limit.per_seconds) if spec.rate_limit else None,
        "polling_max_attempts": spec.polling.max_attempts if spec.polling else None,
        "polling_interval_s": float(spec.polling.interval_s) if spec.polling else None,
        "polling_until": spec.polling.until if spec.polling else None,
        "volatile_paths": list(spec.volatile_paths), "distinct_calls": spec.distinct_calls,
    }
    return policy, dict(spec.config)


DEMO_MODULES = ("capabilities.demo.functions",)


def python_capabilities_sync(*, definitions: dict | None = None, modules: tuple[str, ...] | None = None) -> SyncResult:
    """Make the registry match the functions registered with @capability.

    New functions get a capability (version 1). For known ones, only what the
    code changed since the last sync is applied, as a new version on top of
    the current one, so an operator's edit (say, requiring approval) survives a
    restart. Sync never enables or disables anything. Each capability is its
    own transaction; running it twice, or in two processes at once, is harmless.

    By default every registered function is synced (after importing the demo
    module); `modules` limits it to functions defined in those modules.
    """
    if definitions is None:

        definitions = autodiscover(modules or DEMO_MODULES)
        if modules is not None:
            # Only these modules' functions: not whatever else this process happened to import.
            definitions = {name: d for name, d in definitions.items()
                           if d.dotted_path.partition(":")[0] in modules}
    result = SyncResult()
    for name, definition in sorted(definitions.items()):
        try:
            outcome = _sync_one(name, definition)
        except (ServiceError, IntegrityError) as exc:
            message = exc.message if isinstance(exc, ServiceError) else str(exc)
            if isinstance(exc, ServiceError) and exc.fields:
                message += " " + "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.fields.items())
            result.errors[name] = message
            log.error("capability sync: %s: %s", name, message)
            continue
        getattr(result, outcome).append(name)
    return result


@transaction.atomic
def _sync_one(name: str, definition) -> str:
    policy, config = _policy_from_definition(definition)
    _validate(kind=Kind.PYTHON, policy=policy, config=config, mcp_server=None)
    capability = (Capability.objects.select_for_update(of=("self",)).select_related("current_version")
                  .filter(name=name).first())
    if capability is None:
        for message in name_errors(name):
            raise InvalidInput(message)
        with transaction.atomic():
            capability = _insert(user=None, name=name, kind=Kind.PYTHON, policy=policy, config=config,
                                 mcp_server=None, change_note=SYNC_NOTE)
        audit(actor=None, action=AuditAction.CAPABILITY_CREATED, target=capability,
              summary=f"Registered python capability {name} from {config.get('function')} (v1)",
              details={"version": 1, "kind": "python", "function": config.get("function"), "sync": True,
                       CODE_POLICY: {**policy, "config": config}})
        return "created"
    if capability.kind != Kind.PYTHON:
        raise Conflict(f"The name {name} is taken by a {capability.kind} capability.")
    current = capability.current_version
    code = {**policy, "config": config}
    code_changes = {k: v for k, v in code.items() if _last_synced_code(capability).get(k) != v}
    if not code_changes:
        return "unchanged"
    merged = {**current.policy(), **code_changes}
    new_config = merged.pop("config")
    version = _append_version(capability=capability, current=current, policy=merged, config=new_config, user=None,
                              change_note=f"{SYNC_NOTE}: {', '.join(sorted(code_changes))}",
                              audit_details={"sync": True, CODE_POLICY: code})
    return "unchanged" if version is None else "updated"


def _last_synced_code(capability: Capability) -> dict[str, Any]:
    """What the code said at the last sync that changed something.

    Versions mix code and operators' edits, so the code's own policy is kept in
    the audit event each sync writes; without one, version 1 (written by sync).
    """
    event = (AuditEvent.objects.filter(target_type="capability", target_id=str(capability.pk),
                                       details__has_key=CODE_POLICY).order_by("-created_at", "-id").first())
    if event is not None:
        return event.details[CODE_POLICY]
    first = capability.versions.order_by("number").first()
    return first.policy() if first is not None else {}


# -- try it -------------------------------------------------------------------------------------------

TRY_AUDIT_ACTION = AuditAction.CAPABILITY_TRIED


class NoWorker(ServiceError):
    """Try it runs where runs run: in a worker. None answered in time."""

    status = 503
    code = "no_worker"


def capability_try(*, user, capability_id: int, arguments: Any, confirm: bool = False) -> Observation:
    """Run the current version once, outside any run, in a worker, and return the normalized observation.

    The call goes through the same task kind and executor as a run's steps (a
    Celery worker, the guard, the stdio pool), so it cannot pass here and fail
    in a run. Any capability that names a permission needs it; side-effecting
    ones (write/external) also need confirm=True (and, when they name none,
    the right to change capabilities). Every try leaves an audit event.
    """
    require(user, "capabilities.view_capability", "try capabilities")
    capability = (Capability.objects.select_related("current_version", "mcp_server").filter(pk=capability_id).first())
    if capability is None or capability.current_version is None:
        raise InvalidInput(f"No capability with id {capability_id}.")
    version = capability.current_version
    changes_state = version.side_effect in CHANGES_STATE
    needed = version.permission or ("capabilities.change_capability" if changes_state else "")
    if needed and not allowed(user, needed):
        raise NotAllowed(f"Trying {capability.name} needs the permission {needed}.")
    problems = [p.message for p in argument_problems(version.schema, arguments, version.max_argument_bytes)]
    if problems:
        raise InvalidInput("The arguments do not match the capability's schema.", fields={"arguments": problems})
    if changes_state and not confirm:
        raise NotAllowed(f"{capability.name} has side effects ({version.side_effect}): "
                         "confirm that you want it to run for real.", fields={"confirm": ["Required."]})
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    # A fresh key per try: a try-it is never a retry of an earlier one.
    key = f"try-{uuid.uuid4().hex}" if changes_state else None
    observation = _try_in_worker(version=version, arguments=arguments, key=key, trace_id=trace_id,
                                 span_id=span_id, user=user)
    with transaction.atomic():
        audit(actor=user, action=TRY_AUDIT_ACTION, target=capability,
              summary=f"Tried {capability.name} v{version.number} ({version.side_effect}): {observation.status.value}",
              details={"try_it": True, "version": version.number, "arguments": arguments,
                       "idempotency_key": key, "status": observation.status.value,
                       "error_code": observation.error_code and observation.error_code.value,
                       "side_effect": observation.side_effect.value, "trace_id": trace_id})
    return observation


def _try_in_worker(*, version: CapabilityVersion, arguments: dict, key: str | None, trace_id: str, span_id: str,
                   user) -> Observation:
    from celery.exceptions import TimeoutError as CeleryTimeout

    wait_s = float(version.timeout_s) + settings.AGENTOPS_TRY_WAIT_SECONDS
    # expires: a worker that picks the call up after we stopped waiting drops it instead of running it.
    routing = {"queue": settings.AGENTOPS_TRY_QUEUE} if settings.AGENTOPS_TRY_QUEUE else {}
    result = queue.send("capabilities.try_capability", 
        kwargs={"version_id": version.pk, "arguments": arguments, "idempotency_key": key, "trace_id": trace_id,
                "span_id": span_id, "actor_id": user.pk}, expires=wait_s, **routing)
    try:
        data = result.get(timeout=wait_s, propagate=True, disable_sync_subtasks=False)
    except CeleryTimeout:
        raise NoWorker(f"No worker ran the call within {wait_s:g} s, so nothing was run. Try it runs in a Celery "
                       "worker, like a run: start one (python agentops/dev.py up, or celery -A agentops worker) "
                       "and try again.") from None
    return Observation.from_dict(data)


def capability_try_execute(*, version_id: int, arguments: dict, idempotency_key: str | None, trace_id: str,
                           span_id: str, actor_id: int | None) -> dict[str, Any]:
    """The worker's half of try it: the run engine's executor, once. Returns the observation as a dict."""
    from django.contrib.auth import get_user_model


    version = CapabilityVersion.objects.select_related("capability__mcp_server").get(pk=version_id)
    actor = get_user_model().objects.filter(pk=actor_id).first() if actor_id else None
    spec = version.to_spec()
    executor = rate_limited_executor(actor=actor, context={"try_it": True})

    observation = as_observation(executor.execute(spec, arguments, idempotency_key=idempotency_key,
                                                  timeout_s=spec.timeout_s, trace_id=trace_id, span_id=span_id))
    return observation.to_dict()
