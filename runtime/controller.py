"""The bounded planning loop, one pass at a time.

advance() performs at most one planner call or one capability execution (plus the
idempotent re-send or status lookup that resolves an unknown side-effect outcome),
and returns the new state, the events that happened and how long to wait. It
never sleeps: the caller does (a simulated clock in scenarios, a Celery countdown
in production), so the same code runs everywhere.

A pass's parts live beside it: the approval gate (approval_gate.py), the planner's
turn (plan_intake.py), the call (calls.py), unknown outcomes (resolution.py) and what
follows an observation (conclusion.py); they share one Pass (pass_context.py).
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import budgets as B
from .approval_gate import request_approval, take_approval
from .approvals import ApprovalKind, ApprovalRequest
from .calls import Action, Attempt, call, record_attempt, wait_for_admission
from .completion import completion_met
from .conclusion import conclude
from .decide import Decision
from .events import DecisionMade, Event
from .history import AttemptKind
from .ids import RandomIds
from .intents import CallIntent, IntentLog, LeaseLost, NoIntentLog
from .observation import AdmissionRefused, ErrorCode, SideEffectStatus
from .pass_context import Pass
from .plan_intake import ask_planner
from .planner_calls import settle_lost_calls
from .ports import ApprovalBook, Authorizer, CapabilityRegistry, Clock, Executor, IdSource, Planner, Quotas
from .records import replace
from .resolution import interrupted_call, look_up_settled, resolve
from .signatures import action_signature, arguments_hash, idempotency_key, signature_text
from .state import PlanningNeed, RunState, StepProgress, StepStatus
from .stop import ReplanReason, RunStatus, StopKind


@dataclass(frozen=True)
class Transition:
    state: RunState
    events: tuple[Event, ...]
    # None: nothing to do until something outside changes (terminal, or an approval is
    # undecided). 0: advance again now. > 0: advance again after that many seconds.
    wait_s: float | None


class Controller:
    """advance(state) -> Transition, the one entry: a pass reads the collaborators given here."""

    def __init__(self, registry: CapabilityRegistry, executor: Executor, planner: Planner, clock: Clock,
                 authorizer: Authorizer, approvals: ApprovalBook, *, rng: random.Random | None = None,
                 history_window: int = 20, ids: IdSource | None = None,
                 approval_ttl_s: float | None = None, intents: IntentLog | None = None,
                 abandon_on: tuple[type[BaseException], ...] = (),
                 cancel_requested: Callable[[], bool] | None = None, quotas: Quotas | None = None) -> None:
        self.registry = registry
        self.executor = executor
        self.planner = planner
        self.clock = clock
        self.authorizer = authorizer
        self.approvals = approvals
        self.rng = rng or random.Random()
        self.history_window = history_window
        # Attempt and span ids come from here, like time from the clock.
        self.ids = ids or RandomIds()
        # An approval request expires at the earlier of this TTL and the run's deadline.
        self.approval_ttl_s = approval_ttl_s
        self.intents = intents or NoIntentLog()
        # Errors of the collaborators' infrastructure (a database restarting): the pass is
        # abandoned, not decided, so the run is not stopped internal_error for an outage.
        self.abandon_on = abandon_on
        # Whether an operator asked to cancel while a call was in flight (asked when it returns).
        self.cancel_requested = cancel_requested
        # Limits shared with other runs (a project's per-day quotas); None: no such limits.
        self.quotas = quotas

    # -- public -------------------------------------------------------------------------

    def advance(self, state: RunState) -> Transition:
        if state.is_terminal:
            return Transition(state, (), None)
        p = Pass(state, self)
        abandon: tuple[type[BaseException], ...] = (LeaseLost, *self.abandon_on)
        try:
            self._pass(p)
        except abandon:
            raise  # another worker owns the run now, or the pass cannot be recorded: leave no trace
        except Exception as exc:  # noqa: BLE001 - every stop path must record a reason
            p.state = state
            p.stop(StopKind.INTERNAL_ERROR, None, f"{type(exc).__name__}: {exc}")
        if not p.events and p.state is state:
            return Transition(state, (), p.wait_s)
        p.state = replace(p.state, usage=p.state.usage.at(self.clock.now(), p.state.started_at))
        return Transition(p.state, tuple(p.events), None if p.state.is_terminal else p.wait_s)

    def run_until_pause(self, state: RunState, on_transition: Callable[[Transition], Any] | None = None,
                        max_passes: int = 10_000) -> RunState:
        """Advance and sleep until the run is terminal or waits for an approval."""
        return self.drive(state, on_transition=on_transition, max_passes=max_passes).state

    def drive(self, state: RunState, *, on_transition: Callable[[Transition], Any] | None = None,
              before_pass: Callable[[RunState], RunState] | None = None,
              hand_back: Callable[[Transition], bool] | None = None,
              max_passes: int | None = None) -> Transition:
        """The one pass loop (a worker's slice, an evaluation, a scenario): advance, hand each transition
        that changed something to `on_transition`, sleep on the clock, until the run is terminal or
        waits for someone (wait_s None), `hand_back(transition)` says the caller takes the run back
        (a long wait, a worker's slice used up), or `max_passes` passes ran. `before_pass` brings in
        what changed outside (a cancel request) and may raise to abandon the run (a lost lease).
        Returns the last transition."""
        transition = Transition(state, (), 0.0)
        passes = 0
        while max_passes is None or passes < max_passes:
            passes += 1
            if before_pass is not None:
                state = before_pass(state)
            transition = self.advance(state)
            if on_transition is not None and (transition.events or transition.state is not state):
                on_transition(transition)
            state = transition.state
            if transition.wait_s is None or (hand_back is not None and hand_back(transition)):
                return transition
            if transition.wait_s > 0:
                self.clock.sleep(transition.wait_s)
        return transition

    # -- one pass -----------------------------------------------------------------------

    def _pass(self, p: Pass) -> None:
        settle_lost_calls(p)   # first: whatever ends the run next, a lost planner call's spending is in its usage
        if p.state.cancel_requested:
            return p.stop(StopKind.CANCELLED, None, "cancelled by an operator")
        if p.state.pending_approval is not None and not take_approval(p):
            return
        p.set_status(RunStatus.RUNNING)
        now = self.clock.now()
        if p.state.not_before is not None and now < p.state.not_before:
            p.wait_s = p.state.not_before - now
            return
        if B.deadline_reached(p.state.budgets, p.state.started_at, now):
            return p.stop(StopKind.BUDGET_EXHAUSTED, B.BudgetName.DEADLINE,
                          f"deadline of {p.state.budgets.deadline_s}s reached")
        refused = self.quotas.refusal(p.state, planning=p.state.planning is not None) if self.quotas else None
        if refused is not None:
            return p.stop(StopKind.QUOTA_EXHAUSTED, refused[0], refused[1])
        if p.state.planning is not None:
            return ask_planner(p, now)
        return self._execute_next(p, now)

    # -- execution ----------------------------------------------------------------------

    def _execute_next(self, p: Pass, now: float) -> None:
        s = p.state
        progress = next_runnable(s)
        if progress is None:
            p.state = replace(s, planning=PlanningNeed(ReplanReason.NEW_INFORMATION.value,
                                                       "the plan has no runnable step left", s.last_attempt_id))
            return
        step = progress.step
        spec = self.registry.get(step.capability)
        if spec is None or not spec.enabled:
            code = ErrorCode.NOT_FOUND if spec is None else ErrorCode.PERMISSION_DENIED
            state = "no longer registered" if spec is None else "disabled"
            return p.stop(StopKind.TERMINAL_FAILURE, code.value,
                          f"step {step.id}: capability {step.capability!r} is {state}")
        if progress.unsettled is not None:
            # The step's last call had an unknown outcome and waited to settle: look it up now,
            # concluded against the history before that call (as in the pass that made it).
            unknown_id = progress.unsettled["attempt_id"]
            history_before = tuple(e for e in p.state.history if e.attempt_id != unknown_id)
            action, looked = look_up_settled(p, progress, spec)
            return None if looked is None else conclude(p, action, looked, history_before)
        kind = progress.next_kind
        budget = B.exhausted_before_call(s.budgets, s.usage, capability=spec.name, side_effecting=spec.changes_state,
                                         retry=kind == AttemptKind.RETRY, started_at=s.started_at, now=now)
        if budget:
            return p.stop(StopKind.BUDGET_EXHAUSTED, budget,
                          f"step {step.id}: calling {spec.name} would exceed the {budget} budget")
        # Authorization at the point of action: permissions may have changed since validation.
        if spec.permission and not self.authorizer.permits(spec.permission):
            # Validation checked only side-effecting steps: only their owner can have held it before.
            holds = "no longer holds" if spec.changes_state else "does not hold"
            return p.stop(StopKind.TERMINAL_FAILURE, ErrorCode.PERMISSION_DENIED.value,
                          f"step {step.id}: the owner {holds} {spec.permission!r} for {spec.name}")
        interrupted = self.intents.interrupted()
        if interrupted is not None and (interrupted.revision, interrupted.step_id) == (s.revision, step.id):
            # A call of this step was sent by a worker that died before recording its outcome:
            # resolved with the kind and the key it was sent with.
            return self._execute(p, progress, Action(spec, interrupted.kind, interrupted.idempotency_key),
                                 interrupted)
        # Side-effecting calls carry a key that is stable across retries, revisions and forks.
        key = None
        if spec.changes_state:
            key = idempotency_key(s.key_scope or s.run_id, action_signature(spec.name, step.arguments),
                                  step.id if spec.distinct_calls else None)
        if key is not None and key in s.settled_keys:
            return settled_before_fork(p, progress)
        args_hash = arguments_hash(step.arguments)
        if spec.requires_approval and progress.approved_arguments_hash != args_hash:
            request = ApprovalRequest(kind=ApprovalKind.STEP, run_id=s.run_id, revision=s.revision, step_id=step.id,
                                      capability=spec.name, arguments_hash=args_hash)
            return request_approval(p, request, arguments=step.arguments)
        self._execute(p, progress, Action(spec, kind, key))

    def _execute(self, p: Pass, progress: StepProgress, action: Action,
                 interrupted: CallIntent | None = None) -> None:
        history_before = p.state.history
        attempt: Attempt | AdmissionRefused
        if interrupted is not None:
            attempt = interrupted_call(p, progress, action, interrupted)
        else:
            attempt = call(p, progress, action)
        if isinstance(attempt, AdmissionRefused):
            return wait_for_admission(p, attempt)
        if action.spec.changes_state and attempt.observation.side_effect is SideEffectStatus.UNKNOWN:
            record_attempt(p, action, attempt, repeated=False)
            p.emit(DecisionMade(attempt.attempt_id, Decision.RESOLVE.value,
                                "the side effect's outcome is unknown: resolving it before any retry",
                                p.usage_snapshot()))
            resolved = resolve(p, action, attempt)
            if resolved is None:
                # Stopped (unresolvable or a budget refused) or waiting for admission.
                p.state = p.state.with_step(attempt.progress) if p.state.is_terminal else p.state
                return
            attempt = resolved
        conclude(p, action, attempt, history_before)


def settled_before_fork(p: Pass, progress: StepProgress) -> None:
    """A fork's step whose side effect committed before the fork point (its source's record, or a
    person's reconciliation, says so): it is never sent again. The step counts as done, with the
    inherited outcome in the history the planner and the completion check read."""
    inherited = next((e for e in reversed(p.state.history) if e.signature == signature_text(
        action_signature(progress.step.capability, progress.step.arguments))), None)
    summary = {"status": "ok", "side_effect": SideEffectStatus.COMMITTED.value, "state_changed": True,
               "settled_before_fork": True, "attempt_id": inherited.attempt_id if inherited else None}
    p.state = s = p.state.with_step(replace(progress, status=StepStatus.SUCCEEDED, committed=True,
                                            last_observation=summary))
    p.wait_s = 0.0
    if any(pr.status == StepStatus.PENDING for pr in s.steps):
        return
    if completion_met(s.completion, s.latest_ok_outputs) if s.completion is not None else s.plan_success_completes:
        p.stop(StopKind.COMPLETED, None, f"step {progress.step.id}: {progress.step.capability} committed before "
                                         "the fork point, and that meets the completion criteria")


def next_runnable(state: RunState) -> StepProgress | None:
    done = {pr.step.id for pr in state.steps if pr.status == StepStatus.SUCCEEDED}
    for progress in state.steps:
        if progress.status == StepStatus.PENDING and all(d in done for d in progress.step.depends_on):
            return progress
    return None
