"""Creating and editing capability versions: the field validation the pages and the API share, the diff.

Every change to a capability goes through these functions (the pages, the API,
the sync command and MCP import call them). Each write is one atomic
transaction that writes its audit row with the change; editing a capability
never edits a version, it appends one. Each kind's config rules live with the
kind (`capabilities/kinds/<kind>/config.py`).
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from capabilities.kinds.table import BROWSER_KINDS, kind_entry
from capabilities.models import (
    Capability,
    CapabilityVersion,
    McpServer,
    capability_name_validator,
)
from core.audit import audit
from core.choices import SideEffect
from core.errors import Conflict, FieldErrors, InvalidInput
from core.models import AuditAction
from core.permissions import require
from runtime import schemas
from runtime.completion import condition_errors
from runtime.observation import ErrorCode

POLICY_KEYS = tuple(f for f in CapabilityVersion.POLICY_FIELDS if f != "config")
SIDE_EFFECTS = tuple(c.value for c in SideEffect)
CHANGES_STATE = ("write", "external")
ERROR_CODES = tuple(c.value for c in ErrorCode)
PERMISSION = re.compile(r"^[A-Za-z0-9_]+\.[A-Za-z0-9_.-]+$")
MAX_SIZE_BYTES = 100_000_000
VOLATILE_PATH = re.compile(r"^[^.\s]+(\.[^.\s]+)*$")
# JSON fields whose changes are shown leaf by leaf ("schema.properties.q.type").
JSON_FIELDS = ("schema", "config")
MISSING = None  # how a diff shows "not present" (rendered as an em dash)


def default_policy() -> dict[str, Any]:
    return {f: CapabilityVersion._meta.get_field(f).get_default() for f in CapabilityVersion.POLICY_FIELDS}


# -- validation -------------------------------------------------------------------------------

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
    errors = FieldErrors()
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
    settle = policy.get("settle_s")
    if settle is not None and (not _is_number(settle) or not 0 <= settle <= 86_400):
        errors.add("settle_s", "Must be a number of seconds from 0 to 86400, or empty for the timeout.")
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


def _polling_until_errors(errors: FieldErrors, policy: dict) -> None:
    until = policy["polling_until"]
    if until is None:
        return
    if policy["polling_max_attempts"] is None:
        errors.add("polling_until", "A polling condition needs a polling policy (max attempts and interval).")
    for problem in condition_errors(until, "polling_until"):
        errors.add("polling_until", problem)


def _pair(errors: FieldErrors, policy: dict, count_key: str, seconds_key: str, what: str, *, max_count: int) -> None:
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
    errors = FieldErrors()
    if not isinstance(config, dict):
        errors.add("config", "Must be a JSON object.")
        return dict(errors)
    entry = kind_entry(kind)
    if entry is not None:
        entry.config_errors(errors, config, policy, mcp_server)
    return dict(errors)


def _normalized_config(kind: str, config: dict) -> dict:
    entry = kind_entry(kind)
    # A config that is no object is left as sent: version_errors refuses it by name.
    return entry.normalized(config) if entry is not None and isinstance(config, dict) else config


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


def version_errors(*, kind: str, policy: dict, config: dict, mcp_server: McpServer | None) -> dict[str, list[str]]:
    """Everything wrong with a version: its policy fields and its kind's config."""
    errors = policy_errors(policy)
    for key, messages in config_errors(kind=kind, config=config, policy=policy, mcp_server=mcp_server).items():
        errors.setdefault(key, []).extend(messages)
    return errors


def validate_version(*, kind: str, policy: dict, config: dict, mcp_server: McpServer | None) -> None:
    errors = version_errors(kind=kind, policy=policy, config=config, mcp_server=mcp_server)
    if errors:
        raise InvalidInput("The capability is invalid; see the fields.", fields=errors)


def complete_policy(policy: dict | None, base: dict[str, Any]) -> dict[str, Any]:
    """`base` (the defaults or the current version) with `policy`'s fields over it."""
    policy = dict(policy or {})
    policy.pop("config", None)
    merged = {k: v for k, v in base.items() if k in POLICY_KEYS}
    merged.update(policy)
    return merged


# -- writes ----------------------------------------------------------------------------------------

def insert_capability(*, user, name: str, kind: str, policy: dict, config: dict, mcp_server: McpServer | None,
                      change_note: str) -> Capability:
    """Create the capability and its version 1. Inside a transaction; values already validated."""
    capability = Capability.objects.create(name=name, kind=kind, mcp_server=mcp_server)
    _make_current(capability, _new_version(capability=capability, number=1, policy=policy, config=config, user=user,
                                           change_note=change_note))
    return capability


def _new_version(*, capability: Capability, number: int, policy: dict, config: dict, user,
                 change_note: str) -> CapabilityVersion:
    return CapabilityVersion.objects.create(
        capability=capability, number=number, config=config, change_note=change_note[:300],
        created_by=user if user is not None and user.is_authenticated else None,
        **{k: policy[k] for k in POLICY_KEYS})


def _make_current(capability: Capability, version: CapabilityVersion) -> None:
    capability.current_version = version
    capability.save(update_fields=["current_version", "updated_at"])


@transaction.atomic
def capability_create(*, user, name: str, kind: str, policy: dict | None = None, config: dict | None = None,
                      mcp_server: McpServer | int | None = None, change_note: str = "") -> Capability:
    """Register an http or mcp capability (python ones come from code, by sync) with version 1."""
    require(user, "capabilities.add_capability", "register capabilities")
    errors = FieldErrors()
    for message in name_errors(name):
        errors.add("name", message)
    entry = kind_entry(kind)
    if entry is None or not entry.registered_in_browser:
        errors.add("kind", f"Choose {' or '.join(BROWSER_KINDS)}: the other kinds are registered in code and synced.")
    if isinstance(mcp_server, int):
        mcp_server = McpServer.objects.filter(pk=mcp_server).first()
        if mcp_server is None:
            errors.add("mcp_server", "No such MCP server.")
    if not (entry and entry.names_a_server) and mcp_server is not None:
        errors.add("mcp_server", "Only MCP capabilities name a server.")
    full = complete_policy(policy, default_policy())
    config = _normalized_config(kind, config or {})
    for key, messages in version_errors(kind=kind, policy=full, config=config, mcp_server=mcp_server).items():
        errors.setdefault(key, []).extend(messages)
    if errors:
        raise InvalidInput("The capability is invalid; see the fields.", fields=dict(errors))
    try:
        with transaction.atomic():
            capability = insert_capability(user=user, name=name, kind=kind, policy=full, config=config,
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
    full = complete_policy(policy, current.policy())
    new_config = current.config if config is None else _normalized_config(capability.kind, config)
    errors = {}
    entry = kind_entry(capability.kind)
    if not (entry and entry.registered_in_browser) and new_config != current.config:
        errors["config"] = [f"A {capability.kind} capability's config is set by its code (and synced), not here."]
    errors.update(version_errors(kind=capability.kind, policy=full, config=new_config,
                                 mcp_server=capability.mcp_server))
    if errors:
        raise InvalidInput("The capability is invalid; see the fields.", fields=errors)
    version = append_version(capability=capability, current=current, policy=full, config=new_config, user=user,
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


def append_version(*, capability: Capability, current: CapabilityVersion, policy: dict, config: dict, user,
                   change_note: str, audit_details: dict | None = None) -> CapabilityVersion | None:
    """Write version current+1 and point the capability at it; None when nothing changed. In a transaction."""
    new_policy = {**policy, "config": config}
    changes = capability_version_diff(current, new_policy)
    if not changes:
        return None
    try:
        with transaction.atomic():
            version = _new_version(capability=capability, number=current.number + 1, policy=policy,
                                   config=config, user=user, change_note=change_note)
    except IntegrityError:
        # Another writer took this number between our read and our insert.
        raise Conflict(f"{capability.name} was changed by someone else; reload and try again.") from None
    _make_current(capability, version)
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


# -- the version diff ------------------------------------------------------------------------------

def capability_version_diff(old: CapabilityVersion | dict, new: CapabilityVersion | dict) -> list[tuple[str, Any, Any]]:
    """(field, old, new) for every policy field that differs.

    The schema and config are compared leaf by leaf with dotted paths
    ("schema.properties.limit.maximum") so a one-word schema change reads as one
    line; a value that is absent on one side is None.
    """
    old_policy = old.policy() if isinstance(old, CapabilityVersion) else dict(old)
    new_policy = new.policy() if isinstance(new, CapabilityVersion) else dict(new)
    changes: list[tuple[str, Any, Any]] = []
    for field in CapabilityVersion.POLICY_FIELDS:
        before, after = old_policy.get(field), new_policy.get(field)
        if field in JSON_FIELDS and isinstance(before, dict) and isinstance(after, dict):
            changes.extend(_json_diff(field, before, after))
        elif before != after:
            changes.append((field, before, after))
    return changes


def _json_diff(path: str, before: Any, after: Any) -> list[tuple[str, Any, Any]]:
    if isinstance(before, dict) and isinstance(after, dict):
        changes = []
        for key in sorted(set(before) | set(after), key=str):
            if key not in after:
                changes.append((f"{path}.{key}", _readable(before[key]), MISSING))
            elif key not in before:
                changes.append((f"{path}.{key}", MISSING, _readable(after[key])))
            else:
                changes.extend(_json_diff(f"{path}.{key}", before[key], after[key]))
        return changes
    if before != after:
        return [(path, _readable(before), _readable(after))]
    return []


def _readable(value: Any) -> Any:
    """Lists and objects as compact JSON text; scalars unchanged."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return value


