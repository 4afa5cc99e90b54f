"""One Executor for the runtime: picks the executor for the spec's kind."""
from __future__ import annotations

from collections.abc import Mapping

from capabilities.executors.base import OutputStore, default_output_store
from capabilities.kinds.http.executor import HttpExecutor
from capabilities.kinds.mcp.executor import McpExecutor
from capabilities.kinds.python.executor import PythonExecutor
from capabilities.netguard import NetGuard
from runs.runtime.capability import CapabilitySpec, Kind
from runs.runtime.observation import ErrorCode, Observation
from runs.runtime.ports import Executor


class CapabilityExecutor:
    """Implements the runtime's Executor port by `spec.kind`.

    Executors not given are built with the shared output store; the http and
    mcp ones get a guard that allows no host at all until one is configured
    (fail closed). `others` plugs in more kinds (e.g. "simulated").
    """

    def __init__(self, *, python: Executor | None = None, http: Executor | None = None, mcp: Executor | None = None,
                 output_store: OutputStore | None = None, guard: NetGuard | None = None,
                 others: Mapping[str, Executor] | None = None) -> None:
        store = output_store or default_output_store()
        guard = guard or NetGuard([])
        self.executors: dict[str, Executor] = {
            Kind.PYTHON.value: python or PythonExecutor(output_store=store),
            Kind.HTTP.value: http or HttpExecutor(guard, output_store=store),
            Kind.MCP.value: mcp or McpExecutor(guard=guard, output_store=store),
            **{str(kind): executor for kind, executor in (others or {}).items()},
        }

    def execute(self, spec: CapabilitySpec, arguments: dict, *, idempotency_key: str | None = None,
                timeout_s: float | None = None, trace_id: str = "", span_id: str = "") -> Observation:
        executor = self.executors.get(str(spec.kind))
        if executor is None:
            # A configuration error no retry can fix: terminal.
            return Observation.failure(ErrorCode.INVALID_ARGUMENTS, f"no executor for capability kind {spec.kind}",
                                       trace_id=trace_id, span_id=span_id)
        return executor.execute(spec, arguments, idempotency_key=idempotency_key,
                                timeout_s=spec.timeout_s if timeout_s is None else timeout_s,
                                trace_id=trace_id, span_id=span_id)

    def lookup_status(self, spec: CapabilitySpec, arguments: dict, *, idempotency_key: str | None = None,
                      timeout_s: float | None = None) -> Observation | None:
        executor = self.executors.get(str(spec.kind))
        if executor is None:
            return None
        return executor.lookup_status(spec, arguments, idempotency_key=idempotency_key,
                                      timeout_s=spec.timeout_s if timeout_s is None else timeout_s)

