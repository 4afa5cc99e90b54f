"""One Executor for the runtime: picks the executor for the spec's kind."""
from __future__ import annotations

from collections.abc import Mapping

from capabilities.executors.base import OutputStore, default_output_store
from capabilities.executors.fence import Fence
from capabilities.executors.open_calls import OPEN_CALLS
from capabilities.executors.secrets import Redactor
from capabilities.kinds.base import ExecutorParts
from capabilities.kinds.mcp.executor import StdioPolicy
from capabilities.kinds.table import KINDS
from capabilities.netguard import NetGuard
from runtime.capability import CapabilitySpec
from runtime.observation import ErrorCode, Observation
from runtime.ports import Executor


class CapabilityExecutor:
    """Implements the runtime's Executor port by `spec.kind`.

    This is where each kind's executor is built (capabilities.kinds.table), all with one
    output store and one redactor; the http and mcp ones get the one guard (without one, no
    host at all is allowed: fail closed), the mcp one the stdio policy (without one, no
    command runs). `others` replaces a kind's executor or plugs in more kinds (e.g.
    "simulated").
    """

    def __init__(self, *, guard: NetGuard | None = None, stdio: StdioPolicy | None = None,
                 output_store: OutputStore | None = None, redactor: Redactor | None = None,
                 others: Mapping[str, Executor] | None = None) -> None:
        parts = ExecutorParts(guard=guard or NetGuard([]), output_store=output_store or default_output_store(),
                              redactor=redactor, stdio=stdio)
        self.executors: dict[str, Executor] = {
            **{str(kind): entry.make_executor(parts) for kind, entry in KINDS.items()},
            **{str(kind): executor for kind, executor in (others or {}).items()},
        }

    def execute(self, spec: CapabilitySpec, arguments: dict, *, idempotency_key: str | None = None,
                timeout_s: float | None = None, trace_id: str = "", span_id: str = "",
                attempt: int | None = None, fence: Fence | None = None) -> Observation:
        executor = self.executors.get(str(spec.kind))
        if executor is None:
            # A configuration error no retry can fix: terminal.
            return Observation.failure(ErrorCode.INVALID_ARGUMENTS, f"no executor for capability kind {spec.kind}",
                                       trace_id=trace_id, span_id=span_id)
        return executor.execute(spec, arguments, idempotency_key=idempotency_key,
                                timeout_s=spec.timeout_s if timeout_s is None else timeout_s,
                                trace_id=trace_id, span_id=span_id, attempt=attempt, fence=fence)

    def lookup_status(self, spec: CapabilitySpec, arguments: dict, *, idempotency_key: str | None = None,
                      timeout_s: float | None = None, attempt: int | None = None,
                      fence: Fence | None = None) -> Observation | None:
        executor = self.executors.get(str(spec.kind))
        if executor is None:
            return None
        return executor.lookup_status(spec, arguments, idempotency_key=idempotency_key,
                                      timeout_s=spec.timeout_s if timeout_s is None else timeout_s,
                                      attempt=attempt, fence=fence)

    def in_flight(self, spec: CapabilitySpec, *, idempotency_key: str | None) -> bool:
        return OPEN_CALLS.in_flight(idempotency_key)

