"""After an attempt's observation: decide (decide.py) what it means for the run, record the
attempt and the decision, and act on it: complete, stop, wait to retry or poll, or replan."""
from __future__ import annotations

from typing import Any

from . import budgets as B
from .calls import Action, Attempt, record_attempt
from .capability import CapabilitySpec
from .completion import CompletionCriteria, completion_met, until_condition
from .decide import Decision, Verdict, decide
from .events import DecisionMade
from .history import AttemptKind, HistoryEntry, repeated_without_progress
from .observation import Observation, Status
from .pass_context import Pass, arguments_text, outcome_text
from .records import replace
from .retry import retry_allowed, retry_delay_s
from .signatures import action_signature, outcome_fingerprint, signature_text
from .state import PlanningNeed, StepProgress, StepStatus
from .stop import StallKind, StopKind


def conclude(p: Pass, action: Action, attempt: Attempt, history_before: tuple[HistoryEntry, ...]) -> None:
    if p.cancel_arrived():
        return _cancelled_in_flight(p, action, attempt)
    s, spec, observation = p.state, action.spec, attempt.observation
    progress, step = attempt.progress, attempt.progress.step
    if observation.status is Status.OK:
        progress = replace(progress, retries_used=0)
        if s.completion is not None and s.completion.capability == spec.name:
            s = replace(s, latest_ok_outputs={spec.name: observation.output})
    p.state = s
    now = p.ports.clock.now()
    others_pending = any(pr.status == StepStatus.PENDING and pr.step.id != step.id for pr in s.steps)
    polling = _still_polling(s.completion, spec, observation)
    if s.completion is not None:
        verified = completion_met(s.completion, s.latest_ok_outputs)
    else:
        # Without application criteria, a plan whose every step succeeded is the result.
        verified = s.plan_success_completes and observation.status is Status.OK and not others_pending
    # Compared with the history before this pass, so a resolved outcome is not
    # matched against the unknown attempt it resolves.
    repeated = repeated_without_progress(
        history_before, signature=signature_text(action_signature(spec.name, step.arguments)),
        fingerprint=outcome_fingerprint(observation, spec.volatile_paths),
        allowed_retry=action.kind == AttemptKind.RETRY, allowed_poll=action.kind == AttemptKind.POLL)
    # Count budgets never pre-empt an outcome (design.md): they are checked before the
    # next action, when one is wanted (retry and poll below, a call or a plan next pass).
    verdict = decide(
        observation, repeated_without_progress=repeated, budget_exhausted=None,
        completion_verified=verified, deadline_passed=B.deadline_passed(s.budgets, s.started_at, now),
        retry_allowed=retry_allowed(spec.retry, observation, attempts_made=1 + progress.retries_used),
        retry_budget_left=B.retry_budget_left(s.budgets, s.usage), polling=polling,
        poll_allowed=polling and spec.polling is not None and 1 + progress.polls_used < spec.polling.max_attempts,
        has_next_step=others_pending)
    attempt = replace(attempt, progress=replace(progress, last_observation=_summary(observation)))
    # Flag and decision are one fact: an attempt is flagged only when the repeat stopped the
    # run (a state change, completion, a budget or a terminal failure decided otherwise).
    record_attempt(p, action, attempt, verdict.decision is Decision.STOP_STALLED)
    p.emit(DecisionMade(attempt.attempt_id, verdict.decision.value, verdict.reason, p.usage_snapshot()))
    attempt = replace(attempt, progress=_settled(attempt.progress, verdict.decision, observation, polling))
    p.state = p.state.with_step(attempt.progress)
    _act_on(p, action, attempt, verdict)


def _cancelled_in_flight(p: Pass, action: Action, attempt: Attempt) -> None:
    """The call's observation is recorded, then the run stops `cancelled` (design.md "Cancel")."""
    attempt = replace(attempt, progress=replace(attempt.progress, last_observation=_summary(attempt.observation)))
    record_attempt(p, action, attempt, repeated=False)
    reason = "cancelled by an operator while this call was in flight: its observation is recorded, nothing follows"
    p.emit(DecisionMade(attempt.attempt_id, Decision.STOP_CANCELLED.value, reason, p.usage_snapshot()))
    p.state = p.state.with_step(attempt.progress)
    p.stop(StopKind.CANCELLED, None, "cancelled by an operator while a call was in flight "
                                     f"(step {attempt.progress.step.id}, {action.spec.name}); its observation is "
                                     "recorded", attempt.attempt_id)


def _still_polling(completion: CompletionCriteria | None, spec: CapabilitySpec, observation: Observation) -> bool:
    """Does the polling policy want this step run again? Only an ok result that does not
    meet the policy's `until` (default: the run's completion criteria) keeps a poll going."""
    if spec.polling is None or observation.status is not Status.OK:
        return False
    until = until_condition(spec.name, spec.polling.until)
    if until is not None:
        return not until.is_met_by(observation.output)
    # Today's default: poll while the run is not complete (the caller checks completion first).
    return completion is not None


def _settled(progress: StepProgress, d: Decision, observation: Observation, polling: bool) -> StepProgress:
    """The step's status after the decision: done, failed, or still pending (retry, poll)."""
    if d in (Decision.COMPLETE, Decision.CONTINUE) or (
            d is Decision.REPLAN and observation.status is Status.OK and not polling):
        return replace(progress, status=StepStatus.SUCCEEDED, next_kind=AttemptKind.CALL)
    if d in (Decision.REPLAN, Decision.STOP_TERMINAL_FAILURE):
        return replace(progress, status=StepStatus.FAILED)
    return progress


def _act_on(p: Pass, action: Action, attempt: Attempt, verdict: Verdict) -> None:
    spec, progress, observation = action.spec, attempt.progress, attempt.observation
    attempt_id, step, d = attempt.attempt_id, progress.step, verdict.decision
    now = p.ports.clock.now()
    if d is Decision.COMPLETE:
        return p.stop(StopKind.COMPLETED, None,
                      f"step {step.id}: {spec.name} output meets the completion criteria", attempt_id)
    if d is Decision.STOP_BUDGET:
        budget = verdict.budget or B.BudgetName.ITERATIONS
        if budget is B.BudgetName.RETRIES:
            # A retry wanted with the retry budget spent: an earlier budget that also refuses it is reported.
            s = p.state
            earlier = B.exhausted_before_call(s.budgets, s.usage, capability=spec.name,
                                              side_effecting=spec.changes_state, retry=True,
                                              started_at=s.started_at, now=now)
            budget = earlier or budget
            if budget is not B.BudgetName.RETRIES:
                return p.stop(StopKind.BUDGET_EXHAUSTED, budget.value,
                              f"step {step.id}: {verdict.reason}, and the retry would exceed the {budget} budget",
                              attempt_id)
        return p.stop(StopKind.BUDGET_EXHAUSTED, budget.value, f"step {step.id}: {verdict.reason}", attempt_id)
    if d is Decision.STOP_TERMINAL_FAILURE:
        assert observation.error_code is not None  # decide() stops so only on a failure, which has a code
        return p.stop(StopKind.TERMINAL_FAILURE, observation.error_code.value,
                      f"step {step.id}: {spec.name} {verdict.reason}", attempt_id)
    if d is Decision.STOP_STALLED:
        return p.stall(StallKind.REPEATED_WITHOUT_PROGRESS,
                       f"step {step.id}: {spec.name}{arguments_text(step.arguments)} repeated with the same "
                       f"outcome ({outcome_text(observation)}) and no state change", attempt_id)
    if d in (Decision.RETRY, Decision.POLL):
        if d is Decision.RETRY:
            delay = retry_delay_s(spec.retry, observation, progress.retries_used + 1, p.ports.rng)
            next_kind = AttemptKind.RETRY
        else:
            assert spec.polling is not None  # decide() polls only under a polling policy
            delay, next_kind = spec.polling.interval_s, AttemptKind.POLL
        s = p.state
        refusing = B.exhausted_before_call(s.budgets, s.usage, capability=spec.name,
                                           side_effecting=spec.changes_state, retry=d is Decision.RETRY,
                                           started_at=s.started_at, now=now, wait_s=delay)
        if refusing is B.BudgetName.DEADLINE and now + delay > s.budgets.deadline_at(s.started_at):
            # Waits never cross the deadline: stop now rather than sleep past it.
            return p.stop(StopKind.BUDGET_EXHAUSTED, B.BudgetName.DEADLINE,
                          f"step {step.id}: the {d.value} wait of {delay:g}s would end after the deadline",
                          attempt_id)
        if refusing and refusing is not B.BudgetName.DEADLINE:
            return p.stop(StopKind.BUDGET_EXHAUSTED, refusing,
                          f"step {step.id}: the {d.value} of {spec.name} would exceed the {refusing} budget",
                          attempt_id)
        p.state = replace(s.with_step(replace(progress, next_kind=next_kind)), not_before=now + delay)
        p.wait_s = delay
        return
    if d is Decision.REPLAN:
        assert verdict.replan_reason is not None  # every REPLAN verdict names its reason
        p.state = replace(p.state, planning=PlanningNeed(
            reason_code=verdict.replan_reason.value,
            reason=f"step {step.id} ({spec.name}): {verdict.reason}; last outcome {outcome_text(observation)}",
            trigger_attempt_id=attempt_id))
    # CONTINUE needs nothing more: the next pass picks the next runnable step.


def _summary(observation: Observation) -> dict[str, Any]:
    return {"status": observation.status.value, "error_code": observation.error_code and observation.error_code.value,
            "side_effect": observation.side_effect.value, "state_changed": observation.state_changed,
            "attempt": observation.attempt}
