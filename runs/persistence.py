"""The persistence adapter: records what the runtime emits, as it happens.

`record_transition` writes one pass's events and the new checkpoint; the caller
wraps it in one transaction, so a crash loses at most the pass in flight and a
trace is never half-written.
"""
from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone as dt_timezone

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from capabilities.models import Capability, CapabilityVersion
from capabilities.outputs import store_json, stored_output_for
from runs.choices import ApprovalState, RunStatus, StepStatus
from runs.models import Approval, Attempt, Decision, PlanRevision, Run, Step
from runs.runtime import events as ev
from runs.runtime.approvals import ApprovalDecision, ApprovalRequest
from runs.runtime.controller import Transition
from runs.runtime.signatures import arguments_hash
from runs.runtime.stop import status_for_stop, stop_kind


def _at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=dt_timezone.utc)


class DjangoApprovalBook:
    """Answers the controller from the Approval table: exactly this request's decision."""

    def __init__(self, run: Run):
        self.run = run

    def decision_for(self, request: ApprovalRequest) -> ApprovalDecision | None:
        rows = Approval.objects.filter(run=self.run, kind=request.kind, revision__number=request.revision,
                                       state__in=[ApprovalState.APPROVED, ApprovalState.REJECTED])
        if request.kind == "step":
            rows = rows.filter(step__key=request.step_id, arguments_hash=request.arguments_hash or "")
        else:
            rows = rows.filter(plan_hash=request.plan_hash or "")
        approval = rows.select_related("decided_by").order_by("-decided_at").first()
        if approval is None:
            return None
        who = approval.decided_by.get_username() if approval.decided_by else ""
        return ApprovalDecision(approval.state == ApprovalState.APPROVED, approval.comment, who)


def record_transition(run: Run, transition: Transition) -> None:
    """Write one pass: its events, the usage counters and the new checkpoint."""
    attempts_by_uid: dict[str, Attempt] = {}
    for event in transition.events:
        if isinstance(event, ev.PlanProposed):
            _record_plan(run, event)
        elif isinstance(event, ev.AttemptFinished):
            attempts_by_uid[event.attempt_id] = _record_attempt(run, event)
        elif isinstance(event, ev.DecisionMade):
            attempt = attempts_by_uid.get(event.attempt_id) if event.attempt_id else None
            if event.attempt_id and attempt is None:
                attempt = Attempt.objects.filter(uid=event.attempt_id).first()
            Decision.objects.create(run=run, attempt=attempt, decision=event.decision, reason=event.reason,
                                    usage=event.usage)
        elif isinstance(event, ev.ApprovalRequested):
            _record_approval_request(run, event)
        elif isinstance(event, ev.StatusChanged):
            if event.status == RunStatus.RUNNING and run.started_at is None:
                run.started_at = timezone.now()
            if RunStatus(event.status) not in (RunStatus.COMPLETED, RunStatus.STOPPED, RunStatus.CANCELLED):
                run.status = event.status
        elif isinstance(event, ev.RunStopped):
            from runs.services import run_finish

            attempt = attempts_by_uid.get(event.attempt_id) if event.attempt_id else None
            if event.attempt_id and attempt is None:
                attempt = Attempt.objects.filter(uid=event.attempt_id).first()
            status = status_for_stop(stop_kind(event.stop_reason)).value
            _save_checkpoint(run, transition)
            run_finish(run=run, status=status, stop_reason=event.stop_reason, detail=event.detail, attempt=attempt,
                       stall_kind=event.stall_kind or "")
            _sync_step_statuses(run, transition)
            return
    _save_checkpoint(run, transition)
    run.save()
    _sync_step_statuses(run, transition)


def _save_checkpoint(run: Run, transition: Transition) -> None:
    state = transition.state
    usage = state.usage
    run.state = state.to_dict()
    run.iterations = usage.iterations
    run.revisions = usage.plans
    run.tool_calls = usage.tool_calls
    run.retries = usage.retries
    run.tokens = usage.tokens
    run.cost = usage.cost
    run.side_effects_committed = usage.side_effects
    run.next_action_at = _at(state.not_before) if state.not_before else None


def _record_plan(run: Run, event: ev.PlanProposed) -> None:
    revision = PlanRevision.objects.create(
        run=run, number=event.revision, accepted=event.accepted, steps=list(event.steps),
        reason_code=event.reason_code or "initial", reason=event.reason,
        triggering_attempt=Attempt.objects.filter(uid=event.triggering_attempt_id).first()
        if event.triggering_attempt_id else None,
        changes=event.changes, validation_errors=[e.to_dict() for e in event.validation_errors],
        tokens=event.tokens, cost=event.cost, planner_output=event.planner_output[:200_000],
        capabilities_seen=list(event.capabilities_seen), needs_approval=event.needs_plan_approval,
    )
    if not event.accepted:
        return
    names = {step.get("capability") for step in event.steps}
    versions = {c.name: c.current_version for c in
                Capability.objects.filter(name__in=names).select_related("current_version")}
    Step.objects.bulk_create([
        Step(run=run, revision=revision, index=index, key=str(step.get("id") or f"s{index + 1}"),
             capability_name=str(step.get("capability", "")), capability_version=versions.get(step.get("capability")),
             arguments=step.get("arguments") or {}, arguments_hash=arguments_hash(step.get("arguments") or {}),
             expected_outcome=str(step.get("expected_outcome", "")), depends_on=list(step.get("depends_on") or []))
        for index, step in enumerate(event.steps)
    ])


def _record_attempt(run: Run, event: ev.AttemptFinished) -> Attempt:
    step = Step.objects.get(run=run, revision__number=event.revision, key=event.step_id)
    observation = event.observation
    output, output_ref = observation.output, None
    if observation.output_ref is not None:
        output_ref = stored_output_for(observation.output_ref.uri)
        output = {"preview": observation.output_ref.preview, "size_bytes": observation.output_ref.size_bytes}
    elif output is not None and len(json.dumps(output, default=str)) > settings.AGENTOPS_INLINE_OUTPUT_BYTES:
        output_ref = store_json(output)
        output = {"preview": json.dumps(output, default=str)[:500], "size_bytes": output_ref.size_bytes}
    version_id = event.version_id
    if version_id is not None and not CapabilityVersion.objects.filter(pk=version_id).exists():
        version_id = None
    attempt = Attempt.objects.create(
        run=run, step=step, uid=event.attempt_id, number=event.attempt, kind=event.kind,
        capability_name=event.capability, capability_version_id=version_id,
        signature=event.signature, signature_hash=_sha(event.signature),
        idempotency_key=event.idempotency_key or "", started_at=_at(event.started_at), ended_at=_at(event.ended_at),
        latency_s=max(0.0, observation.latency_s or (event.ended_at - event.started_at)),
        status=observation.status.value, state_changed=observation.state_changed, output=output,
        output_ref=output_ref, error_code=observation.error_code.value if observation.error_code else "",
        error_category=observation.error_category.value if observation.error_category else "",
        error_message=observation.error_message[:10_000], retry_guidance=observation.retry_guidance[:300],
        retry_after_s=observation.retry_after_s, side_effect_status=observation.side_effect.value,
        repeated_without_progress=event.repeated_without_progress,
        trace_id=(observation.trace_id or run.trace_id)[:32], span_id=(observation.span_id or "")[:16],
    )
    if step.capability_version_id is None and version_id:
        Step.objects.filter(pk=step.pk).update(capability_version_id=version_id)
    if event.repeated_without_progress:
        Run.objects.filter(pk=run.pk).update(repeated_attempts=F("repeated_attempts") + 1)
        run.repeated_attempts += 1
    return attempt


def _record_approval_request(run: Run, event: ev.ApprovalRequested) -> None:
    request = event.request
    revision = PlanRevision.objects.get(run=run, number=request.revision)
    step = Step.objects.filter(revision=revision, key=request.step_id).first() if request.step_id else None
    Approval.objects.create(
        run=run, kind=request.kind, revision=revision, step=step, capability_name=request.capability or "",
        arguments=event.arguments or {} if request.kind == "step" else {"steps": list(event.steps)},
        arguments_hash=request.arguments_hash or "", plan_hash=request.plan_hash or "",
        expires_at=_at(request.expires_at) if request.expires_at is not None
        else timezone.now() + timezone.timedelta(seconds=settings.AGENTOPS_APPROVAL_TTL_SECONDS),
    )
    if step is not None:
        Step.objects.filter(pk=step.pk).update(approval_state=ApprovalState.PENDING,
                                               status=StepStatus.AWAITING_APPROVAL)
    run.approvals_requested += 1


def _sync_step_statuses(run: Run, transition: Transition) -> None:
    """Mirror the checkpoint's step progress onto the current revision's Step rows.

    One read of the revision's steps, then an UPDATE only for a step whose status
    changed (usually none or one per pass): this runs on every pass.
    """
    state = transition.state
    if not state.revision:
        return
    stored = dict(Step.objects.filter(run=run, revision__number=state.revision).values_list("key", "status"))
    for progress in state.steps:
        status = {"pending": StepStatus.PENDING, "succeeded": StepStatus.SUCCEEDED,
                  "failed": StepStatus.FAILED}.get(progress.status, StepStatus.PENDING)
        if status == StepStatus.PENDING and progress.attempts:
            status = StepStatus.RUNNING
        if state.is_terminal and status in (StepStatus.PENDING, StepStatus.RUNNING):
            # The run ended around this step: it never finished, or never started.
            status = StepStatus.FAILED if progress.attempts else StepStatus.SKIPPED
        if state.pending_approval and state.pending_approval.step_id == progress.step.id:
            status = StepStatus.AWAITING_APPROVAL
        if progress.step.id in stored and stored[progress.step.id] != status:
            Step.objects.filter(run=run, revision__number=state.revision, key=progress.step.id).update(status=status)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
