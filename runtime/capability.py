"""What the runtime knows of a registered capability: its policy, as plain data.

The Django registry converts a CapabilityVersion row into a CapabilitySpec; the
runtime never sees the row.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from .observation import RETRYABLE_CODES, ErrorCode


class Kind(StrEnum):
    PYTHON = "python"
    HTTP = "http"
    MCP = "mcp"
    SIMULATED = "simulated"  # scenario files and evaluation suites


class SideEffect(StrEnum):
    NONE = "none"
    READ = "read"
    WRITE = "write"
    EXTERNAL = "external"

    @property
    def changes_state(self) -> bool:
        return self in (SideEffect.WRITE, SideEffect.EXTERNAL)


@dataclass(frozen=True)
class RetryPolicy:
    """max_attempts counts every try, the first included: 1 means never retry."""

    max_attempts: int = 3
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 30.0
    retry_on: frozenset[ErrorCode] = RETRYABLE_CODES

    def to_dict(self) -> dict[str, Any]:
        return {"max_attempts": self.max_attempts, "backoff_base_s": self.backoff_base_s,
                "backoff_cap_s": self.backoff_cap_s, "retry_on": sorted(c.value for c in self.retry_on)}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> RetryPolicy:
        data = data or {}
        return cls(
            max_attempts=int(data.get("max_attempts", 3)),
            backoff_base_s=float(data.get("backoff_base_s", data.get("backoff_s", 0.5))),
            backoff_cap_s=float(data.get("backoff_cap_s", 30.0)),
            retry_on=frozenset(ErrorCode(c) for c in data["retry_on"]) if "retry_on" in data else RETRYABLE_CODES,
        )


@dataclass(frozen=True)
class PollingPolicy:
    max_attempts: int
    interval_s: float
    # The poll's own stop condition on this capability's output ({"path", "equals" | "in"
    # | "exists" | "not_empty"}); None: poll until the run's completion criteria are met.
    until: dict[str, Any] | None = None


@dataclass(frozen=True)
class RateLimit:
    max_calls: int
    per_seconds: float


@dataclass(frozen=True)
class CapabilitySpec:
    name: str
    kind: Kind = Kind.PYTHON
    version: int = 1
    description: str = ""
    schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    max_argument_bytes: int = 16_384
    max_output_bytes: int = 65_536
    timeout_s: float = 10.0
    retry: RetryPolicy = RetryPolicy()
    side_effect: SideEffect = SideEffect.NONE
    requires_approval: bool = False
    idempotent: bool = False
    status_lookup: bool = False
    permission: str = ""
    rate_limit: RateLimit | None = None
    polling: PollingPolicy | None = None
    enabled: bool = True
    # Dotted output paths that differ on every call (request ids, timestamps): left out of
    # the outcome fingerprint, so they cannot hide a repetition.
    volatile_paths: tuple[str, ...] = ()
    # Identical calls are distinct operations (e.g. "append a line"): the step id becomes
    # part of the idempotency key, so a re-proposed call is not deduplicated.
    distinct_calls: bool = False
    # How long after a state-changing call was sent it may still land (a remote still
    # processing, a paused worker's call): a status lookup's "not committed" is believed
    # only after it. None: the timeout.
    settle_s: float | None = None
    # Kind-specific settings (URL, method, MCP server, python dotted path...).
    config: dict[str, Any] = field(default_factory=dict)
    # Database id of the CapabilityVersion row, when there is one.
    version_id: int | None = None

    @property
    def changes_state(self) -> bool:
        return self.side_effect.changes_state

    @property
    def settle_window_s(self) -> float:
        return self.timeout_s if self.settle_s is None else self.settle_s

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["kind"] = self.kind.value
        data["side_effect"] = self.side_effect.value
        data["retry"] = self.retry.to_dict()
        return data
