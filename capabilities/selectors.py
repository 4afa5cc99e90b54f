"""Reads for the registry's pages and API. Writes live in capabilities.services."""
from __future__ import annotations

import json
from typing import Any

from django.db.models import Q, QuerySet

from capabilities.models import Capability, CapabilityVersion, McpServer
from core.models import AuditEvent

# JSON fields whose changes are shown leaf by leaf ("schema.properties.q.type").
JSON_FIELDS = ("schema", "config")
MISSING = None  # how a diff shows "not present" (rendered as an em dash)


# -- the registry list ---------------------------------------------------------------------

def capability_list(*, search: str = "", kind: str = "", side_effect: str = "",
                    enabled: str | bool | None = None) -> QuerySet[Capability]:
    """Capabilities with their current version, filtered as the list page and API ask."""
    qs = Capability.objects.select_related("current_version", "mcp_server").order_by("name")
    search = (search or "").strip()
    if search:
        qs = qs.filter(Q(name__icontains=search) | Q(current_version__description__icontains=search))
    if kind:
        qs = qs.filter(kind=kind)
    if side_effect:
        qs = qs.filter(current_version__side_effect=side_effect)
    flag = _as_bool(enabled)
    if flag is not None:
        qs = qs.filter(enabled=flag)
    return qs


def _as_bool(value: str | bool | None) -> bool | None:
    if isinstance(value, bool) or value is None:
        return value
    lowered = str(value).strip().lower()
    if lowered in ("1", "true", "yes", "on", "enabled"):
        return True
    if lowered in ("0", "false", "no", "off", "disabled"):
        return False
    return None


def capability_get(*, name: str) -> Capability:
    """The capability by name (Capability.DoesNotExist when unknown)."""
    return Capability.objects.select_related("current_version", "mcp_server").get(name=name)


def capability_flags(version: CapabilityVersion | None) -> list[str]:
    """Warnings the registry shows: side effects without a permission or an approval."""
    if version is None:
        return ["no version"]
    flags = []
    if version.side_effect in ("write", "external"):
        if not version.permission:
            flags.append("side effect without a permission")
        if not version.requires_approval:
            flags.append("side effect without approval")
    return flags


# -- versions, diffs, audit ---------------------------------------------------------------------

def capability_versions(*, capability: Capability) -> list[CapabilityVersion]:
    """Versions newest first, each with `.diff` against the one before it (empty for v1)."""
    versions = list(capability.versions.select_related("created_by").order_by("-number"))
    for newer, older in zip(versions, versions[1:] + [None]):
        newer.diff = capability_version_diff(older, newer) if older is not None else []
    return versions


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


def capability_audit_trail(*, capability: Capability, limit: int = 50) -> QuerySet[AuditEvent]:
    return (AuditEvent.objects.filter(target_type="capability", target_id=str(capability.pk))
            .select_related("actor").order_by("-created_at", "-id")[:limit])


def mcp_server_list() -> QuerySet[McpServer]:
    return McpServer.objects.order_by("name")
