"""Executing a step's capability: the call (write-ahead intent, timeout, normalized timing),
what it counts, and the attempt the run records once the decision about it is known."""
from __future__ import annotations

from dataclasses import dataclass

from . import budgets as B
from .capability import CapabilitySpec
from .checkpoint import bounded_for_history
from .events import AttemptFinished
from .history import AttemptKind, HistoryEntry, appended
from .intents import CallIntent
from .observation import AdmissionRefused, Observation, SideEffectStatus, Status
from .pass_context import Pass
from .records import replace
from .signatures import action_signature, outcome_fingerprint, signature_text
from .state import RunState, StepProgress
from .stop import StopKind


@dataclass(frozen=True)
class Action:
    """What this pass does for the step: its capability, the kind of attempt the step is
    due (the repeat rule and the retry counters go by it) and the idempotency key every
    attempt of it is sent with."""

    spec: CapabilitySpec
    kind: str
    key: str | None


@dataclass(frozen=True)
class Attempt:
    """One finished attempt and the step's progress after it; recorded after the decision."""

    progress: StepProgress
    attempt_id: str
    kind: str     # the action's kind, or resolve / lookup for the attempts that resolve it
    started: float
    ended: float
    observation: Observation


def call(p: Pass, progress: StepProgress, action: Action) -> Attempt | AdmissionRefused:
    """One capability execution: one iteration, one tool call, one call of the capability
    (and one retry for a retry or a re-send). A refused admission is none of these."""
    s, spec = p.state, action.spec
    started = p.ports.clock.now()
    timeout = call_timeout(s, spec, started)
    attempt_id, span_id = p.ports.ids.new_id(), p.new_span_id()
    if spec.changes_state:
        # Write-ahead: the intent is durable before the call can have any effect.
        p.ports.intents.begin(CallIntent(attempt_id, s.revision, progress.step.id, spec.name, action.kind,
                                         progress.attempts + 1, action.key, started, timeout, span_id))
    observation = p.ports.executor.execute(spec, progress.step.arguments, idempotency_key=action.key,
                                           timeout_s=timeout, trace_id=s.trace_id, span_id=span_id,
                                           attempt=progress.attempts + 1)
    if isinstance(observation, AdmissionRefused):
        return observation
    ended = p.ports.clock.now()
    progress = count_call(p, progress, action, attempt_number=progress.attempts + 1)
    observation = observation.with_timing(latency_s=ended - started if ended > started else observation.latency_s,
                                          attempt=progress.attempts, trace_id=s.trace_id, span_id=span_id)
    return count_commit(p, spec, Attempt(progress, attempt_id, action.kind, started, ended, observation))


def call_timeout(s: RunState, spec: CapabilitySpec, now: float) -> float:
    """The capability's timeout, capped by the run's per-call timeout and the time left."""
    return min(spec.timeout_s, s.budgets.per_call_timeout_s, B.remaining_time(s.budgets, s.started_at, now))


def count_call(p: Pass, progress: StepProgress, action: Action, attempt_number: int) -> StepProgress:
    """A call that was sent: counted for the run and for the step. A re-send is a retry."""
    retry = action.kind in (AttemptKind.RETRY, AttemptKind.RESOLVE)
    poll = action.kind == AttemptKind.POLL
    p.state = replace(p.state, usage=p.state.usage.counted_call(action.spec.name, retry=retry, poll=poll))
    return replace(progress, attempts=attempt_number, retries_used=progress.retries_used + int(retry),
                   polls_used=progress.polls_used + int(poll))


def count_commit(p: Pass, spec: CapabilitySpec, attempt: Attempt) -> Attempt:
    """Count a commit once per step and mark the step committed."""
    attempt = _deduplicated(p.state.history, spec, attempt)
    progress, observation = attempt.progress, attempt.observation
    # A deduplicated answer repeats an earlier commit: nothing new happened.
    if (spec.changes_state and observation.side_effect is SideEffectStatus.COMMITTED
            and not progress.committed and not observation.extra.get("deduplicated")):
        p.state = replace(p.state, usage=p.state.usage.counted_side_effect(attempt.ended))
    if observation.side_effect is SideEffectStatus.COMMITTED:
        return replace(attempt, progress=replace(progress, committed=True))
    return attempt


def _deduplicated(history: tuple[HistoryEntry, ...], spec: CapabilitySpec, attempt: Attempt) -> Attempt:
    """An idempotent callee answering a side effect it already committed (same action, so the
    same key) changed nothing, whatever state_changed it reports (design.md "A deduplicated
    answer changed nothing"): the repeat rule then sees a repetition without progress."""
    observation = attempt.observation
    if not (spec.changes_state and spec.idempotent and not spec.distinct_calls
            and observation.status is Status.OK):
        return attempt
    signature = signature_text(action_signature(spec.name, attempt.progress.step.arguments))
    if not observation.extra.get("deduplicated") and not any(
            e.signature == signature and e.observation.side_effect is SideEffectStatus.COMMITTED for e in history):
        return attempt
    return replace(attempt, observation=replace(observation, state_changed=False,
                                                extra={**observation.extra, "deduplicated": True}))


def wait_for_admission(p: Pass, refused: AdmissionRefused) -> None:
    """A registry-wide rate limit refused the call before it was made: wait, count nothing."""
    s, now = p.state, p.ports.clock.now()
    wait = max(0.0, refused.retry_after_s)
    if now + wait > s.budgets.deadline_at(s.started_at):
        return p.stop(StopKind.BUDGET_EXHAUSTED, B.BudgetName.DEADLINE,
                      f"{refused.reason}; the wait of {wait:g}s would end after the deadline")
    p.state = replace(s, not_before=now + wait)
    p.wait_s = wait


def record_attempt(p: Pass, action: Action, attempt: Attempt, repeated: bool) -> None:
    """Emit the attempt and append it to the history the planner and the repeat rule read."""
    spec, step, observation = action.spec, attempt.progress.step, attempt.observation
    signature = signature_text(action_signature(spec.name, step.arguments))
    p.emit(AttemptFinished(
        attempt_id=attempt.attempt_id, revision=p.state.revision, step_id=step.id,
        step_index=attempt.progress.index, capability=spec.name, capability_version=spec.version,
        version_id=spec.version_id, arguments=step.arguments, attempt=observation.attempt, kind=attempt.kind,
        signature=signature, idempotency_key=action.key, started_at=attempt.started, ended_at=attempt.ended,
        observation=observation, repeated_without_progress=repeated))
    entry = HistoryEntry(attempt_id=attempt.attempt_id, capability=spec.name, arguments=step.arguments,
                         signature=signature, fingerprint=outcome_fingerprint(observation, spec.volatile_paths),
                         kind=attempt.kind, observation=bounded_for_history(observation, attempt.attempt_id))
    p.state = replace(p.state, history=appended(p.state.history, entry, p.ports.history_window),
                      last_attempt_id=attempt.attempt_id)
