"""One pass of the controller: what it works with, the run's state so far, the events it
emitted and how long to wait; and the ways a pass ends the run.

The controller's helpers (approval gate, planner intake, calls, resolution, conclusion)
take this one object instead of threading state, collaborators and waits through their
arguments.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Protocol

from .events import Event, RunStopped, StatusChanged
from .history import HistoryEntry
from .intents import IntentLog
from .observation import Observation, Status
from .plan import Step
from .ports import ApprovalBook, Authorizer, CapabilityRegistry, Clock, Executor, IdSource, Planner
from .records import replace
from .signatures import canonical_json
from .state import RunState, StepProgress
from .stop import RunStatus, StallKind, StopKind, status_for_stop, stop_reason


class Ports(Protocol):
    """What the controller was built with. Read when used, not copied per pass: a driver
    (or a test) may swap a collaborator between passes."""

    registry: CapabilityRegistry
    executor: Executor
    planner: Planner
    clock: Clock
    authorizer: Authorizer
    approvals: ApprovalBook
    rng: random.Random
    ids: IdSource
    intents: IntentLog
    history_window: int
    approval_ttl_s: float | None
    # Asked after a call returns: did an operator ask to cancel meanwhile? None: never.
    cancel_requested: Callable[[], bool] | None


class Pass:
    """The working state of one pass: the state so far, the events emitted, the wait."""

    def __init__(self, state: RunState, ports: Ports) -> None:
        self.state = state
        self.ports = ports
        self.events: list[Event] = []
        # None: nothing to do until something outside changes. 0: again now. > 0: after that long.
        self.wait_s: float | None = 0.0

    def cancel_arrived(self) -> bool:
        """Whether a cancel was requested (before this pass, or while its call was in flight)."""
        if not self.state.cancel_requested:
            asked = self.ports.cancel_requested
            if asked is not None and asked():
                self.state = replace(self.state, cancel_requested=True)
        return self.state.cancel_requested

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def set_status(self, status: RunStatus) -> None:
        if self.state.status is not status:
            self.state = replace(self.state, status=status)
            self.emit(StatusChanged(status.value))

    def install_plan(self, revision: int, steps: tuple[Step, ...]) -> None:
        self.state = replace(self.state, revision=revision, planning=None, not_before=None,
                             steps=tuple(StepProgress(step=st, index=i) for i, st in enumerate(steps)))

    def usage_snapshot(self) -> dict[str, Any]:
        return self.state.usage.at(self.ports.clock.now(), self.state.started_at).to_dict()

    def new_span_id(self) -> str:
        return self.ports.ids.new_id()[:16]

    def stop(self, kind: StopKind, qualifier: str | None, detail: str, attempt_id: str | None = None, *,
             stall_kind: StallKind | None = None) -> None:
        reason = stop_reason(kind, qualifier)
        stall = stall_kind.value if stall_kind else None
        self.state = replace(self.state, stop_reason=reason, stop_detail=detail, not_before=None,
                             pending_approval=None, stall_kind=stall)
        self.set_status(status_for_stop(kind))
        self.emit(RunStopped(reason, detail, attempt_id or self.state.last_attempt_id, stall_kind=stall))
        self.wait_s = None

    def stall(self, kind: StallKind, why: str, attempt_id: str | None) -> None:
        """Stop `stalled`, saying which kind and what the last failing observation was."""
        failing = next((h for h in reversed(self.state.history) if h.observation.status is not Status.OK), None)
        last = (f"; last failing observation: {history_entry_text(failing)}" if failing is not None
                else "; no attempt failed")
        self.stop(StopKind.STALLED, None, f"{kind.value}: {why}{last}",
                  attempt_id or (failing.attempt_id if failing else None), stall_kind=kind)


def history_entry_text(entry: HistoryEntry) -> str:
    """One history entry in words: 'search_documents {"q":"x"}: retryable server_error (HTTP 503)'."""
    o = entry.observation
    http = f" (HTTP {o.extra['http_status']})" if o.extra.get("http_status") else ""
    return f"{entry.capability}{arguments_text(entry.arguments)}: {outcome_text(o)}{http}"


def outcome_text(observation: Observation) -> str:
    if observation.status is Status.OK:
        return "ok"
    return f"{observation.status.value} {observation.error_code.value if observation.error_code else ''}".strip()


def arguments_text(arguments: dict[str, Any]) -> str:
    text = canonical_json(arguments)
    return f" {text[:80]}{'...' if len(text) > 80 else ''}"
