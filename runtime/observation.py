"""One observation contract for every capability result, whatever produced it.

Executors classify what happened exactly once, at the edge, with
`Observation.success` / `Observation.failure`; everything downstream reads only
these fields.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .records import replace


class Status(StrEnum):
    OK = "ok"
    RETRYABLE = "retryable"
    TERMINAL = "terminal"


class ErrorCode(StrEnum):
    TIMEOUT = "timeout"
    CONNECTION_ERROR = "connection_error"
    RATE_LIMITED = "rate_limited"
    SERVER_ERROR = "server_error"
    PERMISSION_DENIED = "permission_denied"
    NOT_FOUND = "not_found"
    INVALID_ARGUMENTS = "invalid_arguments"
    CONFLICT = "conflict"
    OUTCOME_UNKNOWN = "outcome_unknown"
    # The tool said it failed, in words that match no other code: terminal, and honest
    # about not knowing more (never guessed to be the caller's fault).
    TOOL_ERROR = "tool_error"


class ErrorCategory(StrEnum):
    TRANSIENT = "transient"          # may succeed if tried again later
    THROTTLED = "throttled"          # the callee asked us to slow down
    AUTHORIZATION = "authorization"  # needs an authorized alternative or a stop
    REQUEST = "request"              # the request itself is wrong
    CONFLICT = "conflict"            # the target state disagrees with the request
    UNKNOWN_OUTCOME = "unknown_outcome"  # a side effect may or may not have happened
    TOOL = "tool"                    # the tool reported a failure it did not explain


class SideEffectStatus(StrEnum):
    COMMITTED = "committed"
    NOT_COMMITTED = "not_committed"
    UNKNOWN = "unknown"


RETRYABLE_CODES = frozenset(
    {ErrorCode.TIMEOUT, ErrorCode.CONNECTION_ERROR, ErrorCode.RATE_LIMITED, ErrorCode.SERVER_ERROR}
)

_CATEGORY = {
    ErrorCode.TIMEOUT: ErrorCategory.TRANSIENT,
    ErrorCode.CONNECTION_ERROR: ErrorCategory.TRANSIENT,
    ErrorCode.SERVER_ERROR: ErrorCategory.TRANSIENT,
    ErrorCode.RATE_LIMITED: ErrorCategory.THROTTLED,
    ErrorCode.PERMISSION_DENIED: ErrorCategory.AUTHORIZATION,
    ErrorCode.NOT_FOUND: ErrorCategory.REQUEST,
    ErrorCode.INVALID_ARGUMENTS: ErrorCategory.REQUEST,
    ErrorCode.CONFLICT: ErrorCategory.CONFLICT,
    ErrorCode.OUTCOME_UNKNOWN: ErrorCategory.UNKNOWN_OUTCOME,
    ErrorCode.TOOL_ERROR: ErrorCategory.TOOL,
}

_GUIDANCE = {
    ErrorCategory.TRANSIENT: "Retry the same call under the retry policy, then replan.",
    ErrorCategory.THROTTLED: "Wait at least retry_after_s before calling again.",
    ErrorCategory.AUTHORIZATION: "Do not retry: use an authorized alternative or stop.",
    ErrorCategory.REQUEST: "Do not retry unchanged: correct the arguments or choose another step.",
    ErrorCategory.CONFLICT: "Do not retry unchanged: re-read the target state first.",
    ErrorCategory.UNKNOWN_OUTCOME: "Reconcile by idempotency key or status lookup; never repeat blindly.",
    ErrorCategory.TOOL: "Do not retry unchanged: read the tool's message, then choose another step or stop.",
}


def guidance_for(category: ErrorCategory, side_effect: SideEffectStatus) -> str:
    """What the caller should do next. A failure whose side effect may have committed must not be
    repeated blindly, whatever its error class (a timeout, a lost worker): repeating it may do it twice."""
    return _GUIDANCE[ErrorCategory.UNKNOWN_OUTCOME if side_effect is SideEffectStatus.UNKNOWN else category]


def category_for(code: ErrorCode | str) -> ErrorCategory:
    return _CATEGORY[ErrorCode(code)]


def error_code_for_http_status(status: int) -> ErrorCode | None:
    """Map an HTTP status to a normalized error code; None for a success."""
    if 200 <= status < 400:
        return None
    if status in (408, 504):
        return ErrorCode.TIMEOUT
    if status == 429:
        return ErrorCode.RATE_LIMITED
    if status in (401, 403):
        return ErrorCode.PERMISSION_DENIED
    if status == 404:
        return ErrorCode.NOT_FOUND
    if status == 409:
        return ErrorCode.CONFLICT
    if status >= 500:
        return ErrorCode.SERVER_ERROR
    # 400, 422 and every other client error: the request itself is wrong.
    return ErrorCode.INVALID_ARGUMENTS


@dataclass(frozen=True)
class AdmissionRefused:
    """An executor's answer when a registry-wide rate limit did not admit the call: the
    call was never made. The runtime waits retry_after_s and counts nothing (a wait,
    not a call)."""

    retry_after_s: float
    reason: str = ""


@dataclass(frozen=True)
class OutputRef:
    """A reference to an output too large to keep inline."""

    uri: str
    size_bytes: int
    sha256: str
    preview: str = ""


@dataclass(frozen=True)
class Observation:
    status: Status
    state_changed: bool = False
    output: Any = None
    output_ref: OutputRef | None = None
    error_code: ErrorCode | None = None
    error_category: ErrorCategory | None = None
    error_message: str = ""
    retry_guidance: str = ""
    retry_after_s: float | None = None
    side_effect: SideEffectStatus = SideEffectStatus.NOT_COMMITTED
    latency_s: float = 0.0
    attempt: int = 1
    trace_id: str = ""
    span_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def success(cls, output: Any = None, *, state_changed: bool = False,
                side_effect: SideEffectStatus = SideEffectStatus.NOT_COMMITTED, **kw: Any) -> Observation:
        return cls(status=Status.OK, output=output, state_changed=state_changed,
                   side_effect=side_effect, **kw)

    @classmethod
    def failure(cls, code: ErrorCode | str, message: str = "", *,
                side_effect: SideEffectStatus = SideEffectStatus.NOT_COMMITTED, **kw: Any) -> Observation:
        code = ErrorCode(code)
        category = category_for(code)
        status = Status.RETRYABLE if code in RETRYABLE_CODES else Status.TERMINAL
        return cls(status=status, error_code=code, error_category=category, error_message=message,
                   retry_guidance=guidance_for(category, side_effect), side_effect=side_effect, **kw)

    def with_timing(self, *, latency_s: float, attempt: int, trace_id: str = "", span_id: str = "") -> Observation:
        return replace(self, latency_s=latency_s, attempt=attempt, trace_id=trace_id, span_id=span_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "state_changed": self.state_changed,
            "output": self.output,
            "output_ref": None if self.output_ref is None else vars(self.output_ref).copy(),
            "error_code": self.error_code and self.error_code.value,
            "error_category": self.error_category and self.error_category.value,
            "error_message": self.error_message,
            "retry_guidance": self.retry_guidance,
            "retry_after_s": self.retry_after_s,
            "side_effect": self.side_effect.value,
            "latency_s": self.latency_s,
            "attempt": self.attempt,
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "extra": self.extra,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Observation:
        ref = data.get("output_ref")
        return cls(
            status=Status(data["status"]),
            state_changed=bool(data.get("state_changed", False)),
            output=data.get("output"),
            output_ref=OutputRef(**ref) if ref else None,
            error_code=ErrorCode(data["error_code"]) if data.get("error_code") else None,
            error_category=ErrorCategory(data["error_category"]) if data.get("error_category") else None,
            error_message=data.get("error_message", ""),
            retry_guidance=data.get("retry_guidance", ""),
            retry_after_s=data.get("retry_after_s"),
            side_effect=SideEffectStatus(data.get("side_effect", "not_committed")),
            latency_s=float(data.get("latency_s", 0.0)),
            attempt=int(data.get("attempt", 1)),
            trace_id=data.get("trace_id", ""),
            span_id=data.get("span_id", ""),
            extra=dict(data.get("extra") or {}),
        )
