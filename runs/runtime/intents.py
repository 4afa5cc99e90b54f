"""Write-ahead intents for state-changing calls, and the lease they are fenced by.

Before the controller sends a call whose side effect is write or external, it
tells the intent log, which must make the intent durable (or refuse, when the
run's lease has passed to someone else) before the call goes out. A worker
that dies mid-call leaves the intent without a result; the next worker is told
(`interrupted()`) and resolves it like any unknown outcome: re-send with the
same key, status lookup, or stop. Never a blind repeat.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


class LeaseLost(Exception):
    """The run is no longer this worker's: stop at once, write nothing, call nothing."""


@dataclass(frozen=True)
class CallIntent:
    attempt_id: str
    revision: int
    step_id: str
    capability: str
    kind: str                     # call | retry | poll | resolve (history.AttemptKind)
    attempt: int                  # the attempt number the call would be recorded as
    idempotency_key: str | None
    started_at: float
    timeout_s: float
    span_id: str = ""            # the span the call is sent with, so the trace can be matched to it


@runtime_checkable
class IntentLog(Protocol):
    def begin(self, intent: CallIntent) -> None:
        """Durably record the intent before the call; raise LeaseLost if the run is not ours."""

    def interrupted(self) -> CallIntent | None:
        """An intent of this run whose call was sent but whose outcome was never recorded.

        Returned once: the controller resolves it in the pass that asks."""


class NoIntentLog:
    """For scenarios and in-process runs: nothing survives the process, nothing to resume."""

    def begin(self, intent: CallIntent) -> None:
        return None

    def interrupted(self) -> CallIntent | None:
        return None
