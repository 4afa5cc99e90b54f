"""Registry-wide rate limits, shared by every run and every worker through the database.

Admission is one locked read-modify-write of the capability's RateLimitWindow row:
`select_for_update` on PostgreSQL; on SQLite the IMMEDIATE transaction (settings)
takes the database write lock at BEGIN, which serializes admissions the same way.
So two workers can never both take the last slot. A refused call never reaches the
callee and is not a call: the runtime waits Retry-After and counts nothing.
"""
from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from capabilities.models import RateLimitWindow
from runtime.capability import CapabilitySpec
from runtime.observation import AdmissionRefused, ErrorCode, Observation


def admit(spec: CapabilitySpec, now: float | None = None) -> float | None:
    """Take a slot of the capability's rate limit: None when admitted, else the seconds to wait."""
    limit = spec.rate_limit
    if limit is None:
        return None
    _ensure_row(RateLimitWindow, spec.name)
    with transaction.atomic():
        row = RateLimitWindow.objects.select_for_update().get(capability_name=spec.name)
        # Read the time inside the lock, so admissions are ordered as they are serialized.
        at = timezone.now().timestamp() if now is None else now
        recent = sorted(t for t in row.admitted if at - t < limit.per_seconds)
        if len(recent) < limit.max_calls:
            row.admitted = recent + [at]
            row.save(update_fields=["admitted"])
            return None
    return max(0.05, round(recent[-limit.max_calls] + limit.per_seconds - at, 3))


def _ensure_row(model, name: str) -> None:
    if model.objects.filter(capability_name=name).exists():
        return
    try:
        with transaction.atomic():
            model.objects.create(capability_name=name, admitted=[])
    except IntegrityError:
        pass  # another worker created it first


class RateLimitedExecutor:
    """Admits each call under the capability's registry-wide limit before the inner executor runs it."""

    def __init__(self, inner):
        self.inner = inner

    def execute(self, spec: CapabilitySpec, arguments: dict[str, Any], **kw: Any) -> Observation | AdmissionRefused:
        wait = admit(spec)
        if wait is not None:
            limit = spec.rate_limit
            return AdmissionRefused(wait, f"{spec.name} allows {limit.max_calls} calls per "
                                          f"{limit.per_seconds:g} s across all runs")
        return self.inner.execute(spec, arguments, **kw)

    def lookup_status(self, spec: CapabilitySpec, arguments: dict[str, Any], **kw: Any) -> Observation | None:
        return self.inner.lookup_status(spec, arguments, **kw)

    def in_flight(self, spec: CapabilitySpec, *, idempotency_key: str | None) -> bool:
        in_flight = getattr(self.inner, "in_flight", None)
        return bool(in_flight and in_flight(spec, idempotency_key=idempotency_key))


def as_observation(result: Observation | AdmissionRefused) -> Observation:
    """For callers outside the runtime (try-it): a refusal shown as the rate_limited failure it is."""
    if isinstance(result, AdmissionRefused):
        return Observation.failure(ErrorCode.RATE_LIMITED, result.reason, retry_after_s=result.retry_after_s)
    return result
