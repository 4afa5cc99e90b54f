"""Errors every service raises; the API and the pages turn them into 4xx answers."""
from __future__ import annotations

from typing import Any


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


class NotFound(ServiceError):
    """The object named does not exist in the project in scope (another project's is not found either)."""

    status = 404
    code = "not_found"


class Conflict(ServiceError):
    status = 409
    code = "conflict"


class TooBusy(ServiceError):
    """Refused for now: the answer carries Retry-After (seconds)."""

    status = 429
    code = "too_many_requests"

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.retry_after = max(1, int(retry_after))


class FieldErrors(dict):
    """Messages by field, the shape `InvalidInput(fields=...)` carries; collected, then raised at once."""

    def add(self, key: str, message: str) -> None:
        self.setdefault(key, []).append(message)
