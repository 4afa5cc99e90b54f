"""The audit trail: one row per change an operator or the system made, written in its transaction."""
from __future__ import annotations

from core.models import AuditEvent


def audit(*, actor, action: str, target, summary: str, details: dict | None = None) -> AuditEvent:
    """Write one audit row; call it inside the transaction of the change it records."""
    return AuditEvent.objects.create(
        actor=actor if actor is not None and actor.is_authenticated else None,
        action=action,
        target_type=target._meta.model_name,
        target_id=str(target.pk),
        summary=summary[:300],
        details=details or {},
    )
