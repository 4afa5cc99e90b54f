"""The audit trail: one row per change an operator or the system made, written in its transaction."""
from __future__ import annotations

from core.models import AuditEvent
from core.projects import active_project_id, project_of


def audit(*, actor, action: str, target, summary: str, details: dict | None = None,
          project_id: int | None = None) -> AuditEvent:
    """Write one audit row; call it inside the transaction of the change it records.

    It belongs to the target's project (a run's record: its run's), else to the project in scope, else to none (a change to the
    instance: a user created)."""
    if project_id is None:
        project_id = project_of(target) or active_project_id() or None
    return AuditEvent.objects.create(
        project_id=project_id,
        actor=actor if actor is not None and actor.is_authenticated else None,
        action=action,
        target_type=target._meta.model_name,
        target_id=str(target.pk),
        summary=summary[:300],
        details=details or {},
    )
