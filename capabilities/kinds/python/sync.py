"""Python capabilities from code: make the registry match the functions registered with @capability."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction

from capabilities.kinds.python.registry import autodiscover
from capabilities.models import Capability, Kind
from capabilities.policy import append_version, insert_capability, name_errors, validate_version
from core.audit import audit
from core.errors import Conflict, InvalidInput, ServiceError
from core.models import AuditAction, AuditEvent, Project
from core.projects import active_project_id, project_scope
from runtime.observation import RETRYABLE_CODES

log = logging.getLogger(__name__)

SYNC_NOTE = "Synced from code"
CODE_POLICY = "code_policy"  # audit detail: the policy the code declared at a sync
DEMO_MODULES = ("capabilities.demo.functions",)


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
        "settle_s": spec.settle_s,
    }
    return policy, dict(spec.config)


def python_capabilities_sync(*, definitions: dict | None = None, modules: tuple[str, ...] | None = None) -> SyncResult:
    """Make the registry match the functions registered with @capability.

    New functions get a capability (version 1). For known ones, only what the
    code changed since the last sync is applied, as a new version on top of
    the current one, so an operator's edit (say, requiring approval) survives a
    restart. Sync never enables or disables anything. Each capability is its
    own transaction; running it twice, or in two processes at once, is harmless.

    By default every registered function is synced (after importing the demo
    module); `modules` limits it to functions defined in those modules.

    Code is the instance's: its functions are synced into every project's registry (each project
    enables, disables and edits its own), or into the project in scope only, when there is one.
    """
    if definitions is None:
        definitions = autodiscover(modules or DEMO_MODULES)
        if modules is not None:
            # Only these modules' functions: not whatever else this process happened to import.
            definitions = {name: d for name, d in definitions.items()
                           if d.dotted_path.partition(":")[0] in modules}
    result = SyncResult()
    in_scope = active_project_id()
    for project_id in [in_scope] if in_scope else list(Project.objects.values_list("pk", flat=True)):
        with project_scope(project_id):
            _sync_project(definitions, result)
    return result


def _sync_project(definitions: dict, result: SyncResult) -> None:
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
        if name not in getattr(result, outcome):
            getattr(result, outcome).append(name)


@transaction.atomic
def _sync_one(name: str, definition) -> str:
    policy, config = _policy_from_definition(definition)
    validate_version(kind=Kind.PYTHON, policy=policy, config=config, mcp_server=None)
    capability = (Capability.objects.select_for_update(of=("self",)).select_related("current_version")
                  .filter(name=name).first())
    if capability is None:
        for message in name_errors(name):
            raise InvalidInput(message)
        with transaction.atomic():
            capability = insert_capability(user=None, name=name, kind=Kind.PYTHON, policy=policy, config=config,
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
    synced = _last_synced_code(capability)
    code_changes = {k: v for k, v in code.items() if synced.get(k) != v}
    if not code_changes:
        return "unchanged"
    merged = {**current.policy(), **code_changes}
    new_config = merged.pop("config")
    version = append_version(capability=capability, current=current, policy=merged, config=new_config, user=None,
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


