"""Side effects whose outcome is unknown: a call that timed out after it may have
committed, or one a lost worker sent (its intent is in flight). Never a blind repeat:
re-send with the same key, or ask whether it committed, or stop.

A lookup's "not committed" is only true for now while the call can still land (its
thread still running, the remote still processing, a paused worker's call), so the
lookup waits until the call is over and its settle window has passed since it was sent
(design.md "A lookup's 'not committed' is believed only once the call can no longer
land"): a countdown, not a sleeping thread.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import budgets as B
from .calls import Action, Attempt, call, call_timeout, count_call, count_commit, wait_for_admission
from .capability import CapabilitySpec
from .history import AttemptKind
from .intents import CallIntent
from .observation import AdmissionRefused, ErrorCode, Observation, SideEffectStatus, guidance_for
from .pass_context import Pass
from .records import replace
from .retry import retry_allowed
from .state import StepProgress
from .stop import StopKind

# How soon a run looks again at a call that is still running after its settle window (a
# worker holding the call's lease wakes it as soon as the call ends): longer than a wait
# slept inline, so no worker thread sleeps on it.
IN_FLIGHT_RECHECK_S = 2.0


@dataclass(frozen=True)
class UnsettledCall:
    """A call whose outcome is unknown, waiting to settle before it is looked up."""

    attempt_id: str
    kind: str
    key: str | None
    sent_at: float
    observation: dict[str, Any]   # what the caller saw (a failure): the lookup's "not committed" keeps it

    def to_dict(self) -> dict[str, Any]:
        return {"attempt_id": self.attempt_id, "kind": self.kind, "key": self.key, "sent_at": self.sent_at,
                "observation": self.observation}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UnsettledCall:
        return cls(data["attempt_id"], data["kind"], data.get("key"), float(data["sent_at"]), data["observation"])


def interrupted_call(p: Pass, progress: StepProgress, action: Action, intent: CallIntent) -> Attempt:
    """The lost call, as an attempt whose outcome is unknown: it was sent and counts as a call."""
    ended = p.ports.clock.now()
    progress = count_call(p, progress, action, attempt_number=max(intent.attempt, progress.attempts + 1))
    observation = Observation.failure(
        ErrorCode.CONNECTION_ERROR, "the worker making this call was lost before its outcome was recorded",
        side_effect=SideEffectStatus.UNKNOWN if action.spec.changes_state else SideEffectStatus.NOT_COMMITTED)
    observation = observation.with_timing(latency_s=max(0.0, ended - intent.started_at),
                                          attempt=progress.attempts, trace_id=p.state.trace_id,
                                          span_id=intent.span_id or p.new_span_id())
    attempt = Attempt(progress, intent.attempt_id, intent.kind, intent.started_at, ended, observation)
    return count_commit(p, action.spec, attempt)


def resolve(p: Pass, action: Action, unknown: Attempt) -> Attempt | None:
    """Never a blind repeat: re-send with the same key, or ask whether it committed.

    A re-send is a retry (design.md "Re-sends and lookups are calls"): it needs the
    retry policy and the run's retry budget, and it is an iteration, a tool call and a
    call of the capability. A lookup is a tool call and a call of the capability. Every
    budget is checked before either; a refusal stops the run and the side effect stays
    unknown. Returns None when the run stopped or waits for admission.
    """
    s, spec, progress = p.state, action.spec, unknown.progress
    step, original = progress.step, unknown.observation
    now = p.ports.clock.now()
    resend = spec.idempotent and retry_allowed(spec.retry, original, attempts_made=1 + progress.retries_used)
    if resend:
        # A re-send may be the commit itself (if the first call never landed): it counts
        # against the side-effect rate like any side-effecting call.
        budget = B.exhausted_before_call(s.budgets, s.usage, capability=spec.name, side_effecting=True,
                                         retry=True, started_at=s.started_at, now=now)
        if budget and not spec.status_lookup:
            p.stop(StopKind.BUDGET_EXHAUSTED, budget,
                   f"step {step.id}: re-sending {spec.name} with its idempotency key would exceed "
                   f"the {budget} budget; whether it committed stays unknown", unknown.attempt_id)
            return None
        if not budget:
            called = call(p, progress, replace(action, kind=AttemptKind.RESOLVE))
            if isinstance(called, AdmissionRefused):
                # Not sent: the unknown outcome is resolved once the limit admits the re-send.
                p.state = p.state.with_step(replace(progress, next_kind=AttemptKind.RETRY))
                wait_for_admission(p, called)
                return None
            return called
    if not spec.status_lookup:
        why = ("its retry policy allows no re-send" if spec.idempotent
               else "it can be neither deduplicated by idempotency key")
        p.stop(StopKind.TERMINAL_FAILURE, ErrorCode.OUTCOME_UNKNOWN.value,
               f"step {step.id}: {spec.name} may or may not have committed, {why} nor looked up",
               unknown.attempt_id)
        return None
    return _look_up(p, action, unknown)


def look_up_settled(p: Pass, progress: StepProgress, spec: CapabilitySpec) -> tuple[Action, Attempt | None]:
    """The pass after a wait to settle: the unknown outcome of the step's last call, looked up
    now if the call can no longer land (or waited for again)."""
    unsettled = UnsettledCall.from_dict(progress.unsettled or {})
    action = Action(spec, unsettled.kind, unsettled.key)
    unknown = Attempt(replace(progress, unsettled=None), unsettled.attempt_id, unsettled.kind, unsettled.sent_at,
                      unsettled.sent_at, Observation.from_dict(unsettled.observation))
    return action, _look_up(p, action, unknown)


def call_in_flight(p: Pass, spec: CapabilitySpec, key: str | None) -> bool:
    """Whether a call with this key is still running where this pass runs (an abandoned
    thread, say). Executors that never leave a call running need not answer."""
    in_flight = getattr(p.ports.executor, "in_flight", None)
    return bool(in_flight is not None and in_flight(spec, idempotency_key=key))


def _wait_to_settle(p: Pass, action: Action, unknown: Attempt, settle_at: float) -> None:
    s, spec, progress = p.state, action.spec, unknown.progress
    now = p.ports.clock.now()
    wake = settle_at if now < settle_at else now + IN_FLIGHT_RECHECK_S
    deadline = s.budgets.deadline_at(s.started_at)
    if wake > deadline:
        why = (f"its settle window of {spec.settle_window_s:g}s since it was sent" if now < settle_at
               else "the call is still running")
        return p.stop(StopKind.BUDGET_EXHAUSTED, B.BudgetName.DEADLINE,
                      f"step {progress.step.id}: whether {spec.name} committed can only be looked up once it can "
                      f"no longer land ({why}), which is after the deadline; whether it committed stays unknown",
                      unknown.attempt_id)
    unsettled = UnsettledCall(unknown.attempt_id, unknown.kind, action.key, unknown.started,
                              unknown.observation.to_dict())
    p.state = replace(p.state.with_step(replace(progress, unsettled=unsettled.to_dict())),
                      not_before=settle_at if now < settle_at else None)
    p.wait_s = wake - now


def _look_up(p: Pass, action: Action, unknown: Attempt) -> Attempt | None:
    s, spec, progress = p.state, action.spec, unknown.progress
    step, original = progress.step, unknown.observation
    settle_at = unknown.started + spec.settle_window_s
    if p.ports.clock.now() < settle_at or call_in_flight(p, spec, action.key):
        # Its "not committed" could be overtaken by the call itself: not believed yet.
        _wait_to_settle(p, action, unknown, settle_at)
        return None
    started = p.ports.clock.now()
    budget = B.exhausted_before_lookup(s.budgets, s.usage, capability=spec.name, started_at=s.started_at,
                                       now=started)
    if budget:
        p.stop(StopKind.BUDGET_EXHAUSTED, budget,
               f"step {step.id}: looking up whether {spec.name} committed would exceed the {budget} "
               "budget; whether it committed stays unknown", unknown.attempt_id)
        return None
    looked = p.ports.executor.lookup_status(spec, step.arguments, idempotency_key=action.key,
                                            timeout_s=call_timeout(s, spec, started), attempt=progress.attempts + 1)
    p.state = replace(p.state, usage=p.state.usage.counted_lookup(spec.name))
    if looked is None or looked.side_effect is SideEffectStatus.UNKNOWN:
        p.stop(StopKind.TERMINAL_FAILURE, ErrorCode.OUTCOME_UNKNOWN.value,
               f"step {step.id}: the status lookup of {spec.name} could not tell whether it committed",
               unknown.attempt_id)
        return None
    progress = replace(progress, attempts=progress.attempts + 1)
    if looked.side_effect is SideEffectStatus.COMMITTED:
        observation = Observation.success(looked.output, state_changed=True, side_effect=SideEffectStatus.COMMITTED,
                                          extra={"resolved_by": "status_lookup"})
    else:
        # Not committed: the failure is an ordinary one, and retrying it is safe.
        observation = replace(original, side_effect=SideEffectStatus.NOT_COMMITTED,
                              retry_guidance=guidance_for(original.error_category, SideEffectStatus.NOT_COMMITTED)
                              if original.error_category else original.retry_guidance,
                              extra={**original.extra, "resolved_by": "status_lookup"})
    ended = p.ports.clock.now()
    observation = observation.with_timing(latency_s=ended - started, attempt=progress.attempts,
                                          trace_id=s.trace_id, span_id=p.new_span_id())
    # Span id first, then attempt id: the order in which sequential ids (scenarios, tests) are recorded.
    attempt = Attempt(progress, p.ports.ids.new_id(), AttemptKind.LOOKUP, started, ended, observation)
    return count_commit(p, spec, attempt)
