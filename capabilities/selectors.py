"""Reads for the registry's pages and API. Writes live in capabilities.policy (and sync, kinds/mcp/servers)."""
from __future__ import annotations

from django.db.models import Q, QuerySet
from django.urls import reverse

from capabilities.models import Capability, CapabilityVersion, McpServer
from capabilities.policy import capability_version_diff
from core.models import AuditEvent
from runtime.storable import text_storable, text_unstorable

# -- the registry list ---------------------------------------------------------------------

def capability_list(*, search: str = "", kind: str = "", side_effect: str = "",
                    enabled: str | bool | None = None) -> QuerySet[Capability]:
    """Capabilities with their current version, filtered as the list page and API ask."""
    qs = Capability.objects.select_related("current_version", "mcp_server").order_by("name")
    # From the address as typed: a NUL character would fail the query on PostgreSQL (runtime.storable).
    search, kind, side_effect = (text_storable(value or "") for value in (search, kind, side_effect))
    search = search.strip()
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
    if text_unstorable(name):   # no capability is so named, and PostgreSQL refuses the query (a %00 in an address)
        raise Capability.DoesNotExist(f"No capability named {name!r}.")
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
    for newer, older in zip(versions, versions[1:] + [None], strict=True):
        newer.diff = capability_version_diff(older, newer) if older is not None else []
    return versions


def capability_audit_trail(*, capability: Capability, limit: int = 50) -> QuerySet[AuditEvent]:
    return (AuditEvent.objects.filter(target_type="capability", target_id=str(capability.pk))
            .select_related("actor").order_by("-created_at", "-id")[:limit])


def mcp_server_list() -> QuerySet[McpServer]:
    return McpServer.objects.order_by("name")


def audit_capability_pages(ids: list[str]) -> dict[str, str]:
    """For the audit log (core.audit_log): each capability's page (its URL names it, not its id)."""
    found = Capability.objects.filter(pk__in=[int(i) for i in ids if i.isdigit()]).values_list("pk", "name")
    return {str(pk): reverse("capabilities:detail", kwargs={"name": name}) for pk, name in found}
