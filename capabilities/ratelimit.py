"""Registry-wide rate limits, counted across all runs and workers in the database."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from capabilities.outputs import DatabaseOutputStore
from runs.runtime.capability import CapabilitySpec
from runs.runtime.observation import ErrorCode, Observation


class RateLimitedExecutor:
    """Refuses a call (rate_limited, with Retry-After) when the capability's limit is reached.

    The count is of attempts recorded in the last period, so it holds across
    every worker; the refusal is retryable and never reaches the callee.
    """

    def __init__(self, inner):
        self.inner = inner

    def execute(self, spec: CapabilitySpec, arguments: dict[str, Any], **kw: Any) -> Observation:
        refusal = self._over_limit(spec)
        return refusal or self.inner.execute(spec, arguments, **kw)

    def lookup_status(self, spec: CapabilitySpec, arguments: dict[str, Any], **kw: Any) -> Observation | None:
        return self.inner.lookup_status(spec, arguments, **kw)

    @staticmethod
    def _over_limit(spec: CapabilitySpec) -> Observation | None:
        limit = spec.rate_limit
        if limit is None:
            return None
        from runs.models import Attempt

        since = timezone.now() - timedelta(seconds=limit.per_seconds)
        recent = list(Attempt.objects.filter(capability_name=spec.name, started_at__gte=since)
                      .order_by("started_at").values_list("started_at", flat=True)[: limit.max_calls])
        if len(recent) < limit.max_calls:
            return None
        retry_after = max(0.05, (recent[0] + timedelta(seconds=limit.per_seconds) - timezone.now()).total_seconds())
        return Observation.failure(
            ErrorCode.RATE_LIMITED,
            f"{spec.name} allows {limit.max_calls} calls per {limit.per_seconds:g} s across all runs",
            retry_after_s=round(retry_after, 3))


def rate_limited_executor(*, actor=None, context: dict | None = None) -> RateLimitedExecutor:
    """`actor` and `context` (e.g. the run) go into the audit event of a stdio server start."""
    from capabilities.egress import capability_executor

    return RateLimitedExecutor(capability_executor(actor=actor, context=context, output_store=DatabaseOutputStore()))
