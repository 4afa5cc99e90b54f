"""A fork of a run: a new run that starts from a chosen point of another, its history inherited.

The recorded observations before the fork point are history, not work to redo: they become
the new run's history window (what the planner and the repeat rule read), and the new run
starts by asking its planner what to do next, as after new information. Nothing inherited is
executed again:

- a side effect committed before the fork point (the source's record says so, or a person's
  reconciliation found it) is never sent again: its idempotency key is in `settled_keys`, and
  a step proposing it counts as done without a call (controller.settled_before_fork);
- idempotency keys stay scoped by the first run of the line (`key_scope`), so any other
  re-proposed side effect carries the key it was first sent with and an idempotent callee
  deduplicates it.

Budgets start afresh: the inherited calls were the source's spending, and resuming a run
stopped by a budget is what a fork is for. Resuming a stopped run is a fork at its end.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .budgets import Budgets
from .completion import CompletionCriteria
from .history import DEFAULT_WINDOW, HistoryEntry
from .observation import Observation, SideEffectStatus, Status
from .records import replace
from .state import PlanningNeed, RunState
from .stop import ReplanReason


def forked_state(*, run_id: str, goal: str, completion: CompletionCriteria | dict[str, Any] | None,
                 budgets: Budgets | dict[str, Any] | None, started_at: float, trace_id: str, key_scope: str,
                 inherited: Sequence[HistoryEntry], settled_keys: Iterable[str], reason: str,
                 require_plan_approval: bool = False, history_window: int = DEFAULT_WINDOW) -> RunState:
    """The first checkpoint of a fork: the inherited history, the planner asked first."""
    state = RunState.new(run_id=run_id, goal=goal, completion=completion, budgets=budgets, started_at=started_at,
                         trace_id=trace_id, require_plan_approval=require_plan_approval)
    latest_ok: dict[str, Any] = {}
    if state.completion is not None:
        for entry in inherited:
            if entry.capability == state.completion.capability and entry.observation.status is Status.OK:
                latest_ok = {entry.capability: entry.observation.output}
    return replace(state, key_scope=key_scope, settled_keys=tuple(sorted(set(settled_keys))),
                   history=tuple(inherited)[-history_window:], latest_ok_outputs=latest_ok,
                   planning=PlanningNeed(ReplanReason.NEW_INFORMATION.value, reason))


def reconciled(observation: Observation, *, committed: bool, evidence: str, by: str) -> Observation:
    """An unknown side effect's observation as a person's reconciliation settled it.

    Committed: the effect is done (an ok, committed observation whose output is the finding).
    Not committed: the call failed without effect, so doing it again is safe.
    """
    finding = {"reconciled_by": by, "committed": committed, "evidence": evidence}
    if committed:
        return Observation.success({"reconciliation": finding}, state_changed=True,
                                   side_effect=SideEffectStatus.COMMITTED, latency_s=observation.latency_s,
                                   extra={"reconciled": True})
    return replace(observation, side_effect=SideEffectStatus.NOT_COMMITTED,
                   error_message=f"a person found it not committed: {evidence}"[:500],
                   extra={**observation.extra, "reconciled": True})
