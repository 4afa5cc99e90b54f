"""The bounded planning loop, one pass at a time.

advance() performs at most one planner call or one capability execution (plus the
idempotent re-send or status lookup that resolves an unknown side-effect outcome),
and returns the new state, the events that happened and how long to wait. It
never sleeps: the caller does (a simulated clock in scenarios, a Celery countdown
in production), so the same code runs everywhere.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from . import budgets as B
from .approvals import ApprovalRequest
from .capability import CapabilitySpec
from .checkpoint import bounded_for_history
from .completion import completion_met, until_condition
from .decide import Decision, Verdict, decide
from .events import (
    ApprovalDecided,
    ApprovalRequested,
    AttemptFinished,
    DecisionMade,
    Event,
    PlanProposed,
    RunStopped,
    StatusChanged,
)
from .history import AttemptKind, HistoryEntry, appended, repeated_without_progress
from .ids import RandomIds
from .intents import CallIntent, IntentLog, LeaseLost, NoIntentLog
from .observation import AdmissionRefused, ErrorCode, Observation, SideEffectStatus, Status
from .plan import PlanError, Step, parse_plan, step_changes
from .planning import PlanningRequest, PlanNotReady, PlanProposal
from .ports import ApprovalBook, Authorizer, CapabilityRegistry, Clock, Executor, IdSource, Planner
from .retry import retry_allowed, retry_delay_s
from .signatures import (
    action_signature,
    arguments_hash,
    canonical_json,
    idempotency_key,
    outcome_fingerprint,
    plan_hash,
    signature_text,
)
from .state import PlanAwaitingApproval, PlanningNeed, RunState, StepProgress, StepStatus
from .stop import ReplanReason, RunStatus, StallKind, StopKind, status_for_stop, stop_reason
from .validation import validate_plan


@dataclass(frozen=True)
class Transition:
    state: RunState
    events: tuple[Event, ...]
    # None: nothing to do until something outside changes (terminal, or an approval is
    # undecided). 0: advance again now. > 0: advance again after that many seconds.
    wait_s: float | None


class _Pass:
    """The working state of one pass: the state so far and the events emitted."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self.events: list[Event] = []
        self.wait_s: float | None = 0.0

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def set_status(self, status: RunStatus) -> None:
        if self.state.status is not status:
            self.state = replace(self.state, status=status)
            self.emit(StatusChanged(status.value))


@dataclass(frozen=True)
class _Executed:
    """One finished attempt, emitted once the decision about it is known."""

    attempt_id: str
    kind: str
    key: str | None
    started: float
    ended: float
    observation: Observation


class Controller:
    def __init__(self, registry: CapabilityRegistry, executor: Executor, planner: Planner, clock: Clock,
                 authorizer: Authorizer, approvals: ApprovalBook, *, rng: random.Random | None = None,
                 history_window: int = 20, ids: IdSource | None = None,
                 approval_ttl_s: float | None = None, intents: IntentLog | None = None,
                 abandon_on: tuple[type[BaseException], ...] = ()) -> None:
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

    # -- public -------------------------------------------------------------------------

    def advance(self, state: RunState) -> Transition:
        if state.is_terminal:
            return Transition(state, (), None)
        p = _Pass(state)
        try:
            self._pass(p)
        except (LeaseLost, *self.abandon_on):
            raise  # another worker owns the run now, or the pass cannot be recorded: leave no trace
        except Exception as exc:  # noqa: BLE001 - every stop path must record a reason
            p.state = state
            self._stop(p, StopKind.INTERNAL_ERROR, None, f"{type(exc).__name__}: {exc}")
        if not p.events and p.state is state:
            return Transition(state, (), p.wait_s)
        p.state = replace(p.state, usage=p.state.usage.at(self.clock.now(), p.state.started_at))
        return Transition(p.state, tuple(p.events), None if p.state.is_terminal else p.wait_s)

    def run_until_pause(self, state: RunState, on_transition: Callable[[Transition], Any] | None = None,
                        max_passes: int = 10_000) -> RunState:
        """Advance and sleep until the run is terminal or waits for an approval."""
        for _ in range(max_passes):
            transition = self.advance(state)
            if on_transition is not None:
                on_transition(transition)
            state = transition.state
            if transition.wait_s is None:
                return state
            if transition.wait_s > 0:
                self.clock.sleep(transition.wait_s)
        return state

    # -- one pass -----------------------------------------------------------------------

    def _pass(self, p: _Pass) -> None:
        if p.state.cancel_requested:
            return self._stop(p, StopKind.CANCELLED, None, "cancelled by an operator")
        if p.state.pending_approval is not None and not self._take_approval(p):
            return
        p.set_status(RunStatus.RUNNING)
        now = self.clock.now()
        if p.state.not_before is not None and now < p.state.not_before:
            p.wait_s = p.state.not_before - now
            return
        if B.deadline_reached(p.state.budgets, p.state.started_at, now):
            return self._stop(p, StopKind.BUDGET_EXHAUSTED, B.BudgetName.DEADLINE,
                              f"deadline of {p.state.budgets.deadline_s}s reached")
        if p.state.planning is not None:
            return self._plan(p, now)
        return self._execute_next(p, now)

    def _stop(self, p: _Pass, kind: StopKind, qualifier: str | None, detail: str,
              attempt_id: str | None = None, stall_kind: StallKind | None = None) -> None:
        reason = stop_reason(kind, qualifier)
        stall = stall_kind.value if stall_kind else None
        p.state = replace(p.state, stop_reason=reason, stop_detail=detail, not_before=None, pending_approval=None,
                          stall_kind=stall)
        p.set_status(status_for_stop(kind))
        p.emit(RunStopped(reason, detail, attempt_id or p.state.last_attempt_id, stall_kind=stall))
        p.wait_s = None

    def _stall(self, p: _Pass, kind: StallKind, why: str, attempt_id: str | None) -> None:
        """Stop `stalled`, saying which kind and what the last failing observation was."""
        failing = next((h for h in reversed(p.state.history) if h.observation.status is not Status.OK), None)
        last = (f"; last failing observation: {h_text(failing)}" if failing is not None
                else "; no attempt failed")
        self._stop(p, StopKind.STALLED, None, f"{kind.value}: {why}{last}",
                   attempt_id or (failing.attempt_id if failing else None), stall_kind=kind)

    # -- approvals ----------------------------------------------------------------------

    def _take_approval(self, p: _Pass) -> bool:
        """True when the pending approval was granted and the pass may go on."""
        request = p.state.pending_approval
        decision = self.approvals.decision_for(request)
        if decision is None:
            now = self.clock.now()
            if request.expires_at is not None and now >= request.expires_at:
                self._stop(p, StopKind.APPROVAL_EXPIRED, None, expired_detail(request))
                return False
            # Nothing to do until a decision arrives or the request expires; whoever
            # drives the run (scheduler sweep, scenario runner) wakes it for either.
            p.wait_s = None
            return False
        p.emit(ApprovalDecided(request, decision))
        if not decision.approved:
            by = f" by {decision.decided_by}" if decision.decided_by else ""
            self._stop(p, StopKind.APPROVAL_REJECTED, None,
                       decision.comment or f"{request.kind} approval rejected{by}")
            return False
        if request.kind == "plan":
            waiting = p.state.plan_awaiting_approval
            p.state = replace(p.state, plan_awaiting_approval=None)
            self._install(p, waiting.revision, waiting.steps)
        else:
            progress = p.state.step_progress(request.step_id)
            p.state = p.state.with_step(replace(progress, approved_arguments_hash=request.arguments_hash))
        p.state = replace(p.state, pending_approval=None)
        return True

    def _request_approval(self, p: _Pass, request: ApprovalRequest, **display: Any) -> None:
        s, now = p.state, self.clock.now()
        expiry = s.budgets.deadline_at(s.started_at)
        if self.approval_ttl_s is not None:
            expiry = min(expiry, now + self.approval_ttl_s)
        request = replace(request, expires_at=expiry)
        p.state = replace(p.state, pending_approval=request)
        p.set_status(RunStatus.AWAITING_APPROVAL)
        p.emit(ApprovalRequested(request, **display))
        # Advance once more: an approval that is already decided is taken at once,
        # an undecided one makes that pass return wait_s None.
        p.wait_s = 0.0

    # -- planning -----------------------------------------------------------------------

    def _plan(self, p: _Pass, now: float) -> None:
        s, need = p.state, p.state.planning
        is_revision = s.usage.plans > 0
        if is_revision and not s.allow_replan:
            if need.reason_code == ReplanReason.PLAN_REJECTED:
                return self._stop(p, StopKind.PLAN_REJECTED, None, f"direct mode does not replan ({need.reason})",
                                  need.trigger_attempt_id)
            return self._stall(p, StallKind.PLANNER_EXHAUSTED, f"direct mode does not replan ({need.reason})",
                               need.trigger_attempt_id)
        budget = B.exhausted_before_planning(s.budgets, s.usage, started_at=s.started_at, now=now, revision=is_revision)
        if budget:
            return self._stop(p, StopKind.BUDGET_EXHAUSTED, budget,
                              f"no {budget} budget left to ask the planner ({need.reason})", need.trigger_attempt_id)
        visible = tuple(self.registry.visible(self.authorizer))
        asked_at = self.clock.now()
        proposal = self.planner.propose(self._planning_request(s, need, visible, now))
        if isinstance(proposal, PlanNotReady):
            # Nothing happened yet (an external agent is still thinking): count nothing,
            # emit nothing, and wait until the plan's arrival advances the run again.
            p.wait_s = None
            return
        if proposal is None or proposal.no_further_plan:
            tokens, cost = (proposal.tokens, proposal.cost) if proposal is not None else (0, 0.0)
            p.state = replace(s, usage=s.usage.counted_plan(tokens=tokens, cost=cost, received=False))
            if need.reason_code == ReplanReason.PLAN_REJECTED:
                # A rejected plan the planner cannot correct: the plan was rejected, nothing stalled.
                return self._stop(p, StopKind.PLAN_REJECTED, None,
                                  f"{need.reason}; the planner has no correction", need.trigger_attempt_id)
            detail = "the planner has no further plan" if is_revision else "the planner proposed no plan"
            why = f"{detail} after: {need.reason}" if is_revision else detail
            return self._stall(p, StallKind.PLANNER_EXHAUSTED, why, need.trigger_attempt_id)
        self._receive_plan(p, need, proposal, visible, asked_at)

    def _planning_request(self, s: RunState, need: PlanningNeed, visible: tuple[CapabilitySpec, ...],
                          now: float) -> PlanningRequest:
        previous = tuple(p.step.to_dict() for p in s.steps)
        if need.reason_code == ReplanReason.PLAN_REJECTED:
            raw = need.rejected_plan.get("steps") if isinstance(need.rejected_plan, dict) else need.rejected_plan
            previous = tuple(x for x in raw if isinstance(x, dict)) if isinstance(raw, list) else ()
        return PlanningRequest(run_id=s.run_id, goal=s.goal, completion=s.completion, capabilities=visible,
                               history=s.history, previous_plan=previous, revision=s.usage.plans + 1,
                               reason_code=need.reason_code, reason=need.reason,
                               validation_errors=need.validation_errors,
                               deadline_at=s.budgets.deadline_at(s.started_at),
                               remaining_s=B.remaining_time(s.budgets, s.started_at, now))

    def _receive_plan(self, p: _Pass, need: PlanningNeed, proposal: PlanProposal,
                      visible: tuple[CapabilitySpec, ...], asked_at: float = 0.0) -> None:
        s = p.state
        parsed = parse_plan(proposal.plan)
        tokens, cost = (proposal.tokens or parsed.tokens), (proposal.cost or parsed.cost)
        usage = s.usage.counted_plan(tokens=tokens, cost=cost, received=True)
        revision = usage.plans
        if proposal.errors:
            errors = tuple(proposal.errors)
        else:
            errors = parsed.errors + validate_plan(parsed.plan, self.registry, s.budgets, self.authorizer)
        reason_code = need.reason_code
        # The planner may say more precisely why it changed the plan, but not relabel a rejection.
        if (reason_code not in (None, ReplanReason.PLAN_REJECTED)
                and proposal.reason_code in set(ReplanReason) - {ReplanReason.PLAN_REJECTED}):
            reason_code = proposal.reason_code
        steps = parsed.plan.steps
        accepted = not errors
        needs_approval = accepted and s.require_plan_approval and (s.revision == 0 or self._adds_side_effects(s, steps))
        step_dicts = tuple(st.to_dict() for st in steps)
        p.state = replace(s, usage=usage)
        p.emit(PlanProposed(
            revision=revision, steps=step_dicts, accepted=accepted, validation_errors=errors,
            reason_code=reason_code, reason=proposal.reason or need.reason,
            triggering_attempt_id=need.trigger_attempt_id,
            changes=plan_changes(tuple(pr.step for pr in s.steps), steps) if s.steps else {},
            tokens=tokens, cost=cost, planner_output=proposal.raw_output,
            capabilities_seen=tuple(c.name for c in visible), needs_plan_approval=needs_approval,
            plan_hash=plan_hash(list(step_dicts)), started_at=asked_at, ended_at=self.clock.now()))
        exceeded = B.exceeded_after_planning(s.budgets, usage)
        if exceeded:
            return self._stop(p, StopKind.BUDGET_EXHAUSTED, exceeded,
                              f"planning used {usage.tokens} tokens / cost {usage.cost:g}, over the budget",
                              need.trigger_attempt_id)
        if not accepted:
            return self._reject_plan(p, need, revision, errors, proposal.plan)
        p.state = replace(p.state, consecutive_rejections=0, planning=None)
        if needs_approval:
            p.state = replace(p.state, plan_awaiting_approval=PlanAwaitingApproval(revision, steps, reason_code))
            request = ApprovalRequest(kind="plan", run_id=s.run_id, revision=revision,
                                      plan_hash=plan_hash(list(step_dicts)))
            return self._request_approval(p, request, steps=step_dicts)
        self._install(p, revision, steps)

    def _reject_plan(self, p: _Pass, need: PlanningNeed, revision: int, errors: tuple[PlanError, ...],
                     raw: Any) -> None:
        rejections = p.state.consecutive_rejections + 1
        summary = "; ".join(str(e) for e in errors)
        if rejections >= 2:
            return self._stop(p, StopKind.PLAN_REJECTED, None,
                              f"revision {revision} was rejected again: {summary}", need.trigger_attempt_id)
        p.state = replace(p.state, consecutive_rejections=rejections, planning=PlanningNeed(
            reason_code=ReplanReason.PLAN_REJECTED.value, reason=f"revision {revision} was rejected: {summary}",
            trigger_attempt_id=need.trigger_attempt_id, validation_errors=errors, rejected_plan=raw))

    def _adds_side_effects(self, s: RunState, steps: tuple[Step, ...]) -> bool:
        def side_effecting(step_list: Any) -> set[str]:
            found = set()
            for step in step_list:
                spec = self.registry.get(step.capability)
                if spec is not None and spec.changes_state:
                    found.add(signature_text(action_signature(step.capability, step.arguments)))
            return found
        return bool(side_effecting(steps) - side_effecting(pr.step for pr in s.steps))

    def _install(self, p: _Pass, revision: int, steps: tuple[Step, ...]) -> None:
        p.state = replace(p.state, revision=revision, planning=None, not_before=None,
                          steps=tuple(StepProgress(step=st, index=i) for i, st in enumerate(steps)))

    # -- execution ----------------------------------------------------------------------

    def _execute_next(self, p: _Pass, now: float) -> None:
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
            return self._stop(p, StopKind.TERMINAL_FAILURE, code.value,
                              f"step {step.id}: capability {step.capability!r} is {state}")
        kind = progress.next_kind
        budget = B.exhausted_before_call(s.budgets, s.usage, capability=spec.name, side_effecting=spec.changes_state,
                                         retry=kind == AttemptKind.RETRY, started_at=s.started_at, now=now)
        if budget:
            return self._stop(p, StopKind.BUDGET_EXHAUSTED, budget,
                              f"step {step.id}: calling {spec.name} would exceed the {budget} budget")
        # Authorization at the point of action: permissions may have changed since validation.
        if spec.permission and not self.authorizer.permits(spec.permission):
            return self._stop(p, StopKind.TERMINAL_FAILURE, ErrorCode.PERMISSION_DENIED.value,
                              f"step {step.id}: the owner no longer holds {spec.permission!r} for {spec.name}")
        interrupted = self.intents.interrupted()
        if interrupted is not None and (interrupted.revision, interrupted.step_id) == (s.revision, step.id):
            # A call of this step was sent by a worker that died before recording its outcome.
            return self._execute(p, progress, spec, interrupted.kind, now, interrupted=interrupted)
        args_hash = arguments_hash(step.arguments)
        if spec.requires_approval and progress.approved_arguments_hash != args_hash:
            request = ApprovalRequest(kind="step", run_id=s.run_id, revision=s.revision, step_id=step.id,
                                      capability=spec.name, arguments_hash=args_hash)
            return self._request_approval(p, request, arguments=step.arguments)
        self._execute(p, progress, spec, kind, now)

    def _call(self, p: _Pass, progress: StepProgress, spec: CapabilitySpec, kind: str, key: str | None,
              *, retry: bool | None = None) -> tuple[StepProgress, _Executed] | AdmissionRefused:
        """One capability execution: one iteration, one tool call, one call of the capability
        (and one retry for a retry or a re-send). A refused admission is none of these."""
        s = p.state
        retry = kind == AttemptKind.RETRY if retry is None else retry
        started = self.clock.now()
        timeout = min(spec.timeout_s, s.budgets.per_call_timeout_s,
                      B.remaining_time(s.budgets, s.started_at, started))
        attempt_id, span_id = self.ids.new_id(), self.ids.new_id()[:16]
        if spec.changes_state:
            # Write-ahead: the intent is durable before the call can have any effect.
            self.intents.begin(CallIntent(attempt_id, s.revision, progress.step.id, spec.name, kind,
                                          progress.attempts + 1, key, started, timeout, span_id))
        observation = self.executor.execute(spec, progress.step.arguments, idempotency_key=key, timeout_s=timeout,
                                            trace_id=s.trace_id, span_id=span_id)
        if isinstance(observation, AdmissionRefused):
            return observation
        ended = self.clock.now()
        progress = replace(progress, attempts=progress.attempts + 1, retries_used=progress.retries_used + int(retry),
                           polls_used=progress.polls_used + int(kind == AttemptKind.POLL))
        observation = observation.with_timing(latency_s=ended - started if ended > started else observation.latency_s,
                                              attempt=progress.attempts, trace_id=s.trace_id, span_id=span_id)
        usage = s.usage.counted_call(spec.name, retry=retry, poll=kind == AttemptKind.POLL)
        p.state = replace(s, usage=usage)
        return progress, self._finished(p, progress, spec, kind, key, attempt_id, started, ended, observation)

    def _wait_for_admission(self, p: _Pass, refused: AdmissionRefused) -> None:
        """A registry-wide rate limit refused the call before it was made: wait, count nothing."""
        s, now = p.state, self.clock.now()
        wait = max(0.0, refused.retry_after_s)
        if now + wait > s.budgets.deadline_at(s.started_at):
            return self._stop(p, StopKind.BUDGET_EXHAUSTED, B.BudgetName.DEADLINE,
                              f"{refused.reason}; the wait of {wait:g}s would end after the deadline")
        p.state = replace(s, not_before=now + wait)
        p.wait_s = wait

    def _finished(self, p: _Pass, progress: StepProgress, spec: CapabilitySpec, kind: str, key: str | None,
                  attempt_id: str, started: float, ended: float, observation: Observation) -> _Executed:
        """Count a commit once per step, then hand the attempt back; it is emitted after the decision."""
        # A deduplicated answer repeats an earlier commit: nothing new happened.
        if (spec.changes_state and observation.side_effect is SideEffectStatus.COMMITTED
                and not progress.committed and not observation.extra.get("deduplicated")):
            p.state = replace(p.state, usage=p.state.usage.counted_side_effect(ended))
        return _Executed(attempt_id, kind, key, started, ended, observation)

    def _emit_attempt(self, p: _Pass, progress: StepProgress, spec: CapabilitySpec, executed: _Executed,
                      repeated: bool) -> HistoryEntry:
        attempt_id, kind, key, observation = executed.attempt_id, executed.kind, executed.key, executed.observation
        started, ended = executed.started, executed.ended
        step = progress.step
        signature = signature_text(action_signature(spec.name, step.arguments))
        p.emit(AttemptFinished(
            attempt_id=attempt_id, revision=p.state.revision, step_id=step.id, step_index=progress.index,
            capability=spec.name, capability_version=spec.version, version_id=spec.version_id,
            arguments=step.arguments, attempt=observation.attempt, kind=kind, signature=signature,
            idempotency_key=key, started_at=started, ended_at=ended, observation=observation,
            repeated_without_progress=repeated))
        entry = HistoryEntry(attempt_id=attempt_id, capability=spec.name, arguments=step.arguments,
                             signature=signature, fingerprint=outcome_fingerprint(observation, spec.volatile_paths),
                             kind=kind,
                             observation=bounded_for_history(observation, attempt_id))
        p.state = replace(p.state, history=appended(p.state.history, entry, self.history_window),
                          last_attempt_id=attempt_id)
        return entry

    def _execute(self, p: _Pass, progress: StepProgress, spec: CapabilitySpec, kind: str, now: float,
                 interrupted: CallIntent | None = None) -> None:
        step = progress.step
        signature = action_signature(spec.name, step.arguments)
        # Side-effecting calls carry a key that is stable across retries and revisions.
        key = None
        if spec.changes_state:
            key = idempotency_key(p.state.run_id, signature, step.id if spec.distinct_calls else None)
        history_before = p.state.history
        if interrupted is not None:
            key = interrupted.idempotency_key  # the key the lost call was sent with
            called = self._interrupted_call(p, progress, spec, interrupted)
        else:
            called = self._call(p, progress, spec, kind, key)
        if isinstance(called, AdmissionRefused):
            return self._wait_for_admission(p, called)
        progress, executed = called
        progress = self._note_commit(progress, executed.observation)
        if spec.changes_state and executed.observation.side_effect is SideEffectStatus.UNKNOWN:
            self._emit_attempt(p, progress, spec, executed, repeated=False)
            p.emit(DecisionMade(executed.attempt_id, Decision.RESOLVE.value,
                                "the side effect's outcome is unknown: resolving it before any retry",
                                self._usage_snapshot(p)))
            resolved = self._resolve(p, progress, spec, key, executed)
            if not isinstance(resolved, tuple):
                # Stopped (unresolvable or a budget refused) or waiting for admission.
                p.state = p.state.with_step(progress) if p.state.is_terminal else p.state
                return
            progress, executed = resolved
            progress = self._note_commit(progress, executed.observation)
        self._conclude(p, progress, spec, kind, executed, history_before)

    def _interrupted_call(self, p: _Pass, progress: StepProgress, spec: CapabilitySpec,
                          intent: CallIntent) -> tuple[StepProgress, _Executed]:
        """The lost call, as an attempt whose outcome is unknown: it was sent and counts as a call."""
        s, ended = p.state, self.clock.now()
        # Counted as _call counted it: a retry or a re-send (resolve) is a retry.
        retry = intent.kind in (AttemptKind.RETRY, AttemptKind.RESOLVE)
        progress = replace(progress, attempts=max(intent.attempt, progress.attempts + 1),
                           retries_used=progress.retries_used + int(retry),
                           polls_used=progress.polls_used + int(intent.kind == AttemptKind.POLL))
        observation = Observation.failure(
            ErrorCode.CONNECTION_ERROR, "the worker making this call was lost before its outcome was recorded",
            side_effect=SideEffectStatus.UNKNOWN if spec.changes_state else SideEffectStatus.NOT_COMMITTED)
        observation = observation.with_timing(latency_s=max(0.0, ended - intent.started_at),
                                              attempt=progress.attempts, trace_id=s.trace_id,
                                              span_id=intent.span_id or self.ids.new_id()[:16])
        usage = s.usage.counted_call(spec.name, retry=retry, poll=intent.kind == AttemptKind.POLL)
        p.state = replace(s, usage=usage)
        return progress, self._finished(p, progress, spec, intent.kind, intent.idempotency_key, intent.attempt_id,
                                        intent.started_at, ended, observation)

    def _note_commit(self, progress: StepProgress, observation: Observation) -> StepProgress:
        if observation.side_effect is SideEffectStatus.COMMITTED:
            return replace(progress, committed=True)
        return progress

    def _resolve(self, p: _Pass, progress: StepProgress, spec: CapabilitySpec, key: str | None,
                 unknown: _Executed) -> tuple[StepProgress, _Executed] | None:
        """Never a blind repeat: re-send with the same key, or ask whether it committed.

        A re-send is a retry (design.md "Re-sends and lookups are calls"): it needs the
        retry policy and the run's retry budget, and it is an iteration, a tool call and a
        call of the capability. A lookup is a tool call and a call of the capability. Every
        budget is checked before either; a refusal stops the run and the side effect stays
        unknown. Returns None when the run stopped.
        """
        s, step, original = p.state, progress.step, unknown.observation
        now = self.clock.now()
        resend = spec.idempotent and retry_allowed(spec.retry, original, attempts_made=1 + progress.retries_used)
        if resend:
            # A re-send may be the commit itself (if the first call never landed): it counts
            # against the side-effect rate like any side-effecting call.
            budget = B.exhausted_before_call(s.budgets, s.usage, capability=spec.name, side_effecting=True,
                                             retry=True, started_at=s.started_at, now=now)
            if budget and not spec.status_lookup:
                return self._stop(p, StopKind.BUDGET_EXHAUSTED, budget,
                                  f"step {step.id}: re-sending {spec.name} with its idempotency key would exceed "
                                  f"the {budget} budget; whether it committed stays unknown", unknown.attempt_id)
            if not budget:
                called = self._call(p, progress, spec, AttemptKind.RESOLVE, key, retry=True)
                if isinstance(called, AdmissionRefused):
                    # Not sent: the unknown outcome is resolved once the limit admits the re-send.
                    p.state = p.state.with_step(replace(progress, next_kind=AttemptKind.RETRY))
                    self._wait_for_admission(p, called)
                    return None
                return called
        if not spec.status_lookup:
            why = ("its retry policy allows no re-send" if spec.idempotent
                   else "it can be neither deduplicated by idempotency key")
            return self._stop(p, StopKind.TERMINAL_FAILURE, ErrorCode.OUTCOME_UNKNOWN.value,
                              f"step {step.id}: {spec.name} may or may not have committed, {why} nor looked up",
                              unknown.attempt_id)
        return self._look_up(p, progress, spec, key, unknown)

    def _look_up(self, p: _Pass, progress: StepProgress, spec: CapabilitySpec, key: str | None,
                 unknown: _Executed) -> tuple[StepProgress, _Executed] | None:
        s, step, original = p.state, progress.step, unknown.observation
        started = self.clock.now()
        budget = B.exhausted_before_lookup(s.budgets, s.usage, capability=spec.name, started_at=s.started_at,
                                           now=started)
        if budget:
            return self._stop(p, StopKind.BUDGET_EXHAUSTED, budget,
                              f"step {step.id}: looking up whether {spec.name} committed would exceed the {budget} "
                              "budget; whether it committed stays unknown", unknown.attempt_id)
        timeout = min(spec.timeout_s, s.budgets.per_call_timeout_s, B.remaining_time(s.budgets, s.started_at, started))
        looked = self.executor.lookup_status(spec, step.arguments, idempotency_key=key, timeout_s=timeout)
        p.state = replace(p.state, usage=p.state.usage.counted_lookup(spec.name))
        if looked is None or looked.side_effect is SideEffectStatus.UNKNOWN:
            return self._stop(p, StopKind.TERMINAL_FAILURE, ErrorCode.OUTCOME_UNKNOWN.value,
                              f"step {step.id}: the status lookup of {spec.name} could not tell whether it committed",
                              unknown.attempt_id)
        progress = replace(progress, attempts=progress.attempts + 1)
        if looked.side_effect is SideEffectStatus.COMMITTED:
            observation = Observation.success(looked.output, state_changed=True, side_effect=SideEffectStatus.COMMITTED,
                                              extra={"resolved_by": "status_lookup"})
        else:
            # Not committed: the failure is an ordinary one, and retrying it is safe.
            observation = replace(original, side_effect=SideEffectStatus.NOT_COMMITTED,
                                  extra={**original.extra, "resolved_by": "status_lookup"})
        ended = self.clock.now()
        observation = observation.with_timing(latency_s=ended - started, attempt=progress.attempts,
                                              trace_id=s.trace_id, span_id=self.ids.new_id()[:16])
        executed = self._finished(p, progress, spec, AttemptKind.LOOKUP, key, self.ids.new_id(), started, ended,
                                  observation)
        return progress, executed

    # -- after the observation -------------------------------------------------------------

    def _conclude(self, p: _Pass, progress: StepProgress, spec: CapabilitySpec, kind: str, executed: _Executed,
                  history_before: tuple[HistoryEntry, ...]) -> None:
        s = p.state
        observation = executed.observation
        step = progress.step
        if observation.status is Status.OK:
            progress = replace(progress, retries_used=0)
            if s.completion is not None and s.completion.capability == spec.name:
                s = replace(s, latest_ok_outputs={spec.name: observation.output})
        p.state = s
        now = self.clock.now()
        others_pending = any(pr.status == StepStatus.PENDING and pr.step.id != step.id for pr in s.steps)
        polling = self._still_polling(s, spec, observation)
        if s.completion is not None:
            verified = completion_met(s.completion, s.latest_ok_outputs)
        else:
            # Without application criteria, a plan whose every step succeeded is the result.
            verified = observation.status is Status.OK and not others_pending
        # Compared with the history before this pass, so a resolved outcome is not
        # matched against the unknown attempt it resolves.
        repeated = repeated_without_progress(
            history_before, signature=signature_text(action_signature(spec.name, step.arguments)),
            fingerprint=outcome_fingerprint(observation, spec.volatile_paths), allowed_retry=kind == AttemptKind.RETRY,
            allowed_poll=kind == AttemptKind.POLL)
        # Count budgets never pre-empt an outcome (design.md): they are checked before the
        # next action, when one is wanted (retry and poll below, a call or a plan next pass).
        verdict = decide(
            observation, repeated_without_progress=repeated, budget_exhausted=None,
            completion_verified=verified, deadline_passed=B.deadline_passed(s.budgets, s.started_at, now),
            retry_allowed=retry_allowed(spec.retry, observation, attempts_made=1 + progress.retries_used),
            retry_budget_left=B.retry_budget_left(s.budgets, s.usage), polling=polling,
            poll_allowed=polling and 1 + progress.polls_used < spec.polling.max_attempts,
            has_next_step=others_pending)
        progress = replace(progress, last_observation=_summary(observation))
        self._emit_attempt(p, progress, spec, executed, repeated)
        p.emit(DecisionMade(executed.attempt_id, verdict.decision.value, verdict.reason, self._usage_snapshot(p)))
        self._apply(p, progress, spec, verdict, executed, polling)

    @staticmethod
    def _still_polling(s: RunState, spec: CapabilitySpec, observation: Observation) -> bool:
        """Does the polling policy want this step run again? Only an ok result that does not
        meet the policy's `until` (default: the run's completion criteria) keeps a poll going."""
        if spec.polling is None or observation.status is not Status.OK:
            return False
        until = until_condition(spec.name, spec.polling.until)
        if until is not None:
            return not until.is_met_by(observation.output)
        # Today's default: poll while the run is not complete (the caller checks completion first).
        return s.completion is not None

    def _apply(self, p: _Pass, progress: StepProgress, spec: CapabilitySpec, verdict: Verdict,
               executed: _Executed, polling: bool) -> None:
        observation, attempt_id, step = executed.observation, executed.attempt_id, progress.step
        d = verdict.decision
        ok = observation.status is Status.OK
        if d in (Decision.COMPLETE, Decision.CONTINUE) or (d is Decision.REPLAN and ok and not polling):
            progress = replace(progress, status=StepStatus.SUCCEEDED, next_kind=AttemptKind.CALL)
        elif d in (Decision.REPLAN, Decision.STOP_TERMINAL_FAILURE):
            progress = replace(progress, status=StepStatus.FAILED)
        p.state = p.state.with_step(progress)
        now = self.clock.now()
        if d is Decision.COMPLETE:
            return self._stop(p, StopKind.COMPLETED, None,
                              f"step {step.id}: {spec.name} output meets the completion criteria", attempt_id)
        if d is Decision.STOP_BUDGET:
            return self._stop(p, StopKind.BUDGET_EXHAUSTED, (verdict.budget or B.BudgetName.ITERATIONS).value,
                              f"step {step.id}: {verdict.reason}", attempt_id)
        if d is Decision.STOP_TERMINAL_FAILURE:
            return self._stop(p, StopKind.TERMINAL_FAILURE, observation.error_code.value,
                              f"step {step.id}: {spec.name} {verdict.reason}", attempt_id)
        if d is Decision.STOP_STALLED:
            return self._stall(p, StallKind.REPEATED_WITHOUT_PROGRESS,
                               f"step {step.id}: {spec.name}{_args_text(step.arguments)} repeated with the same "
                               f"outcome ({_outcome_text(observation)}) and no state change", attempt_id)
        if d in (Decision.RETRY, Decision.POLL):
            if d is Decision.RETRY:
                delay = retry_delay_s(spec.retry, observation, progress.retries_used + 1, self.rng)
                next_kind = AttemptKind.RETRY
            else:
                delay, next_kind = spec.polling.interval_s, AttemptKind.POLL
            s = p.state
            budget = B.exhausted_before_call(s.budgets, s.usage, capability=spec.name,
                                             side_effecting=spec.changes_state, retry=d is Decision.RETRY,
                                             started_at=s.started_at, now=now)
            if budget and budget is not B.BudgetName.DEADLINE:
                return self._stop(p, StopKind.BUDGET_EXHAUSTED, budget,
                                  f"step {step.id}: the {d.value} of {spec.name} would exceed the {budget} budget",
                                  attempt_id)
            if now + delay > p.state.budgets.deadline_at(p.state.started_at):
                # Waits never cross the deadline: stop now rather than sleep past it.
                return self._stop(p, StopKind.BUDGET_EXHAUSTED, B.BudgetName.DEADLINE,
                                  f"step {step.id}: the {d.value} wait of {delay:g}s would end after the deadline",
                                  attempt_id)
            p.state = replace(p.state.with_step(replace(progress, next_kind=next_kind)), not_before=now + delay)
            p.wait_s = delay
            return
        if d is Decision.REPLAN:
            p.state = replace(p.state, planning=PlanningNeed(
                reason_code=verdict.replan_reason.value,
                reason=f"step {step.id} ({spec.name}): {verdict.reason}; last outcome {_outcome_text(observation)}",
                trigger_attempt_id=attempt_id))
        # CONTINUE needs nothing more: the next pass picks the next runnable step.

    def _usage_snapshot(self, p: _Pass) -> dict[str, Any]:
        return p.state.usage.at(self.clock.now(), p.state.started_at).to_dict()


def next_runnable(state: RunState) -> StepProgress | None:
    done = {pr.step.id for pr in state.steps if pr.status == StepStatus.SUCCEEDED}
    for progress in state.steps:
        if progress.status == StepStatus.PENDING and all(d in done for d in progress.step.depends_on):
            return progress
    return None


def plan_changes(previous: tuple[Step, ...], new: tuple[Step, ...]) -> dict[str, Any]:
    """What a revision changed (step_changes) and the same in one line, as the run records it."""
    changes = step_changes({s.id: s.to_dict() for s in previous}, {s.id: s.to_dict() for s in new})
    added, removed, changed = changes["added"], changes["removed"], changes["changed"]
    parts = ([f"added {', '.join(added)}"] if added else []) + ([f"removed {', '.join(removed)}"] if removed else []) \
        + ([f"changed {'; '.join(changed)}"] if changed else [])
    return {"added": added, "removed": removed, "changed": changed, "summary": "; ".join(parts) or "no change"}


def _summary(observation: Observation) -> dict[str, Any]:
    return {"status": observation.status.value, "error_code": observation.error_code and observation.error_code.value,
            "side_effect": observation.side_effect.value, "state_changed": observation.state_changed,
            "attempt": observation.attempt}


def h_text(entry: HistoryEntry) -> str:
    """One history entry in words: 'search_documents {"q":"x"}: retryable server_error (HTTP 503)'."""
    o = entry.observation
    http = f" (HTTP {o.extra['http_status']})" if o.extra.get("http_status") else ""
    return f"{entry.capability}{_args_text(entry.arguments)}: {_outcome_text(o)}{http}"


def expired_detail(request: ApprovalRequest) -> str:
    what = f"step {request.step_id} ({request.capability})" if request.kind == "step" else \
        f"plan revision {request.revision}"
    return f"the approval request for {what} expired undecided"


def _outcome_text(observation: Observation) -> str:
    if observation.status is Status.OK:
        return "ok"
    return f"{observation.status.value} {observation.error_code.value if observation.error_code else ''}".strip()


def _args_text(arguments: dict[str, Any]) -> str:
    text = canonical_json(arguments)
    return f" {text[:80]}{'...' if len(text) > 80 else ''}"
