"""What an MCP client is told: a call's outcome as a CallToolResult.

The agent learns what the runtime decided: an ok observation is structuredContent plus the
same JSON as text; a failure or a refusal is an isError result carrying the normalized
status, error code, category and retry guidance, and the run's stop reason once it stopped.
Every result's _meta names the run and the attempt (docs/planners.md, "gateway").
"""
from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from gateway.selectors import Concluded
from runs.models import Approval, Attempt
from runtime.stop import StopKind


def _meta(run_id: int, attempt: Attempt | None, **extra: Any) -> dict[str, Any]:
    meta = {"agentops/run_id": run_id, "agentops/attempt": attempt.number if attempt else None,
            "agentops/attempt_id": attempt.uid if attempt else None}
    meta.update({f"agentops/{k}": v for k, v in extra.items()})
    return meta


def _result(payload: dict[str, Any], *, is_error: bool, meta: dict[str, Any]) -> types.CallToolResult:
    text = json.dumps(payload, sort_keys=True, default=str)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=payload,
                                is_error=is_error, _meta=meta)


def _observation(attempt: Attempt) -> dict[str, Any]:
    return {"status": attempt.status, "error_code": attempt.error_code, "error_category": attempt.error_category,
            # Whether calling again is safe: not while the call may have committed (a second call
            # may repeat its effect), whatever its error class says.
            "retryable": attempt.status == "retryable" and attempt.side_effect_status != "unknown",
            "retry_guidance": attempt.retry_guidance,
            "retry_after_s": attempt.retry_after_s, "side_effect": attempt.side_effect_status,
            "message": attempt.error_message}


def concluded(run_id: int, outcome: Concluded) -> types.CallToolResult:
    attempt, stopped = outcome.attempt, bool(outcome.stop_reason)
    run = {"status": outcome.run_status, "stop_reason": outcome.stop_reason or None,
           "stop_detail": outcome.stop_detail}
    extra = {"stop_reason": outcome.stop_reason} if stopped else {}
    if attempt is not None and attempt.status == "ok":
        output = attempt.output if attempt.output_ref_id is None else {
            "output_stored": f"the output was too large to inline (stored output {attempt.output_ref_id})"}
        # structuredContent is an object; any other JSON value is wrapped.
        payload = output if isinstance(output, dict) else {"result": output}
        if stopped and outcome.stop_reason != StopKind.COMPLETED:
            payload = {"result": output, "run": run}
        return _result(payload, is_error=False, meta=_meta(run_id, attempt, **extra))
    if attempt is not None:
        payload = {"error": _observation(attempt), "run": run}
        return _result(payload, is_error=True, meta=_meta(run_id, attempt, **extra))
    if outcome.validation_errors:
        payload = {"error": {"status": "terminal", "error_code": "invalid_arguments", "error_category": "client",
                             "retryable": False, "validation_errors": outcome.validation_errors}, "run": run}
        return _result(payload, is_error=True, meta=_meta(run_id, None, **extra))
    # Stopped before the call ran: rejected or expired approval, a budget, a deadline, a cancel.
    return refused(run_id, f"The run stopped before this call ran: {outcome.stop_reason}: {outcome.stop_detail}",
                   stop_reason=outcome.stop_reason)


def refused(run_id: int, message: str, *, stop_reason: str = "", error_code: str = "refused",
            **extra: Any) -> types.CallToolResult:
    payload = {"error": {"status": "terminal", "error_code": error_code, "retryable": False, "message": message}}
    if stop_reason:
        payload["run"] = {"stop_reason": stop_reason}
        extra["stop_reason"] = stop_reason
    return _result(payload, is_error=True, meta=_meta(run_id, None, **extra))


def approval_pending(run_id: int, approval: Approval) -> types.CallToolResult:
    message = (f"approval pending: request {approval.pk} for {approval.capability_name} awaits an operator's decision "
               f"(expires {approval.expires_at.isoformat()}). Call again with the same arguments to get the result; "
               "it runs exactly once, once approved.")
    payload = {"error": {"status": "pending", "error_code": "approval_pending", "retryable": True,
                         "retry_guidance": "call again with the same arguments", "message": message,
                         "approval_id": approval.pk, "expires_at": approval.expires_at.isoformat()}}
    return _result(payload, is_error=True, meta=_meta(run_id, None, approval_id=approval.pk,
                                                      approval_expires_at=approval.expires_at.isoformat()))


def still_running(run_id: int, waited_s: float) -> types.CallToolResult:
    message = (f"the call has not concluded after {waited_s:.0f} s; call again with the same arguments to get its "
               "result (it is not run twice)")
    payload = {"error": {"status": "pending", "error_code": "still_running", "retryable": True,
                         "retry_guidance": "call again with the same arguments", "message": message}}
    return _result(payload, is_error=True, meta=_meta(run_id, None))
