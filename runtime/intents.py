"""Write-ahead intents for state-changing calls, and the lease they are fenced by.

Before the controller sends a call whose side effect is write or external, it
tells the intent log, which must make the intent durable (or refuse, when the
run's lease has passed to someone else) before the call goes out. A worker
that dies mid-call leaves the intent without a result; the next worker is told
(`interrupted()`) and resolves it like any unknown outcome: re-send with the
same key, status lookup, or stop. Never a blind repeat.

Planner calls that spend tokens (an LLM endpoint) are written ahead the same way
(`begin_planner_call`), so a lost call's spending is counted once by whoever
resumes the run (runtime/planner_calls.py), never dropped.
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


@dataclass(frozen=True)
class PlannerCallIntent:
    call_id: str
    revision: int                 # the revision the call asks for
    started_at: float
    # The most the call may spend (PlannerCallCeiling): what it is counted at, as an estimate,
    # when its worker is lost before the answer is known.
    max_tokens: int
    max_cost: float
    # What the provider's answer said it spent, when it reached the worker before the worker was lost.
    answered_tokens: int | None = None
    answered_cost: float | None = None


@runtime_checkable
class IntentLog(Protocol):
    def begin(self, intent: CallIntent) -> None:
        """Durably record the intent before the call; raise LeaseLost if the run is not ours."""

    def interrupted(self) -> CallIntent | None:
        """An intent of this run whose call was sent but whose outcome was never recorded.

        Returned once: the controller resolves it in the pass that asks."""

    def begin_planner_call(self, intent: PlannerCallIntent) -> None:
        """Durably record the planner call before it is made; raise LeaseLost if the run is not ours."""

    def planner_call_answered(self, intent: PlannerCallIntent, tokens: int, cost: float) -> None:
        """Record what the answer spent, at once: a worker lost before its pass is recorded leaves the figure."""

    def interrupted_planner_call(self) -> PlannerCallIntent | None:
        """A planner call of this run made by a lost worker and never counted. Returned once."""


class NoIntentLog:
    """For scenarios and in-process runs: nothing survives the process, nothing to resume."""

    def begin(self, intent: CallIntent) -> None:
        return None

    def interrupted(self) -> CallIntent | None:
        return None

    def begin_planner_call(self, intent: PlannerCallIntent) -> None:
        return None

    def planner_call_answered(self, intent: PlannerCallIntent, tokens: int, cost: float) -> None:
        return None

    def interrupted_planner_call(self) -> PlannerCallIntent | None:
        return None
