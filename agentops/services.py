"""Errors every service raises, and the audit helper every state change uses."""
from __future__ import annotations

from typing import Any

from agentops.models import AuditEvent


class ServiceError(Exception):
    """A request the service refuses; the message is safe to show to the user."""

    status = 400
    code = "invalid"

    def __init__(self, message: str, *, fields: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        self.fields = fields or {}


class InvalidInput(ServiceError):
    status = 400
    code = "invalid"


class NotAllowed(ServiceError):
    status = 403
    code = "permission_denied"


class Conflict(ServiceError):
    status = 409
    code = "conflict"


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
