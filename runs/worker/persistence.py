"""The persistence adapter: records what the runtime emits, as it happens.

Each pass's write is described once (runs/worker/pass_write.py `PassWrite`: the run row's
fields behind the lease's fence, then the rows its events add) and rendered for the
database: the common pass as one PostgreSQL statement, any other as the ORM's statements in
one transaction, from the same row builders. `record_transition` writes one pass's events
and the new checkpoint; the caller wraps it in one transaction, so a crash loses at most the
pass in flight and a trace is never half-written.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from capabilities.models import Capability, CapabilityVersion
from capabilities.outputs import store_json, stored_output_for
from core.choices import FINISHED_STATUSES, ApprovalState, RunStatus, StepStatus
from core.outages import DATABASE_ERRORS
from runs import checkpoint, failures
from runs.models import Approval, Attempt, Decision, PlanRevision, PlanSubmission, Run, Step
from runs.services import LOST_CALL_MESSAGE, run_close_open_records
from runs.worker.leases import Lease, can_return_from_update, fenced_update, withdraw_unsent
from runs.worker.pass_write import PassWrite, StepWrites, write_in_one_statement
from runs.worker.planner_intents import PlannerCallIntents
from runs.worker.sql import insert_rows
from runtime import events as ev
from runtime.controller import Transition
from runtime.intents import CallIntent, LeaseLost
from runtime.observation import ErrorCategory, ErrorCode
from runtime.signatures import arguments_hash
from runtime.state import RunState
from runtime.stop import StopKind, status_for_stop, stop_kind


def _at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


IN_FLIGHT_MESSAGE = "in flight: sent by {worker}; the outcome is not recorded yet"

# What a stop sets on indexed columns of the run row (runs.models.Run.Meta.indexes, and the detail's
# trigram index for the runs list's search: migration 0031), and what its checks tie to them (a
# stall kind only with a stalled stop reason).
STOP_FIELDS = ("status", "stop_reason", "stop_detail", "finished_at", "stall_kind")

# A first plan up to this many steps is written with its pass's one statement; a longer one (a
# plan may have thousands) goes in a transaction, its steps in INSERTs of as many as one may bind.
ONE_STATEMENT_PLAN_STEPS = 200


def record_transition(run: Run, transition: Transition) -> None:
    """Write one pass without a lease (the evaluation runner); the caller holds the transaction."""
    PassWriter(run).write(transition)


class PassWriter(PlannerCallIntents):
    """Writes the passes of one run for one worker's slice: the events, the checkpoint, the lease.

    With a lease, every write of a pass is fenced: the pass's one UPDATE of the run
    row names the lease owner and token, comes first in the transaction (so on
    PostgreSQL it also locks the row against a concurrent claim until commit), and
    a lost lease rolls the whole pass back. Only the fields a pass owns are written,
    so a cancel request or an operator's change made meanwhile survives.

    It remembers what it wrote (step ids, the previous checkpoint, the intents it
    began) so the common pass costs the run UPDATE and the attempt and decision
    INSERTs, nothing more.
    """

    def __init__(self, run: Run, lease: Lease | None = None, *,
                 version_of: Callable[[str], int | None] | None = None):
        """version_of: a capability's current version by name, from the slice's registry view."""
        self.run = run
        self.lease = lease
        self.previous: RunState | None = None
        self.cancel_requested = bool(run.cancel_requested_at)
        self.registry_version: Any = None
        self._steps: dict[tuple[int, str], tuple[int, int | None]] = {}   # (revision, key) -> (pk, version id)
        self._versions: dict[int, bool] = {}
        self._intents: dict[str, int] = {}   # attempt uid -> pk of its in-flight row
        self._interrupted: CallIntent | None = None
        self._fresh_revision = 0   # a revision this writer just recorded: its steps are all pending
        self.released = False      # a stop was written, which let go of the lease in the same UPDATE
        self.version_of = version_of
        # History entries on this run's attempt rows (the head names them by uid), and the entries
        # of the attempts the pass being written records.
        self._history_rows = checkpoint.history_on_rows(run)
        self._entries: dict[str, dict[str, Any]] = {}

    # -- the intent log (runtime.intents.IntentLog) -------------------------------

    def begin(self, intent: CallIntent) -> None:
        """Commit the in-flight attempt row before the call, in its own small transaction.

        The lease is stretched to cover the call's whole timeout, so no other worker
        can take the run over (and resolve the intent) while this call may still land.
        """
        now = timezone.now()
        until = now + timedelta(seconds=intent.timeout_s + settings.AGENTOPS_RUN_LEASE_SECONDS)
        try:
            row = self._begin(intent, until)
        except DATABASE_ERRORS:
            withdraw_unsent(self.lease, self.run.pk, Attempt.objects.filter(
                run_id=self.run.pk, uid=intent.attempt_id, in_flight=True), intent.capability)
            raise
        self._intents[intent.attempt_id] = row.pk

    def _begin(self, intent: CallIntent, until: datetime) -> Attempt:
        with transaction.atomic():
            if self.lease is not None and not fenced_update(
                    self.run.pk, self.lease, {"lease_expires_at": Greatest(F("lease_expires_at"), Value(until))}):
                raise LeaseLost(f"run {self.run.pk}: lease {self.lease.token} lost before calling {intent.capability}")
            row = Attempt.objects.create(
                run=self.run, step_id=self._step(intent.revision, intent.step_id)[0], uid=intent.attempt_id,
                number=intent.attempt, kind=intent.kind, capability_name=intent.capability,
                signature="", signature_hash="", idempotency_key=intent.idempotency_key or "",
                started_at=_at(intent.started_at), ended_at=_at(intent.started_at), latency_s=0.0,
                status="terminal", error_code=ErrorCode.OUTCOME_UNKNOWN, error_category=ErrorCategory.UNKNOWN_OUTCOME,
                error_message=IN_FLIGHT_MESSAGE.format(worker=self.lease.worker if self.lease else "this process"),
                fingerprint=failures.fingerprint(capability=intent.capability, error_code=ErrorCode.OUTCOME_UNKNOWN,
                                                 error_category=ErrorCategory.UNKNOWN_OUTCOME, http_status=None,
                                                 message=LOST_CALL_MESSAGE),
                side_effect_status="unknown", in_flight=True,
                worker=(self.lease.worker if self.lease else "")[:100],
                lease_token=self.lease.token if self.lease else None,
                trace_id=self.run.trace_id[:32], span_id=intent.span_id[:16])
        return row

    def interrupted(self) -> CallIntent | None:
        found, self._interrupted = self._interrupted, None
        return found

    def load_interrupted(self) -> None:
        """Once per slice: an intent a lost worker left in flight (at most one: passes are sequential)."""
        if self.lease is not None and not self.lease.in_flight:
            return  # the claim saw none
        row = (Attempt.objects.filter(run=self.run, in_flight=True).select_related("step__revision")
               .order_by("-started_at").first())
        if row is None:
            return
        intent = CallIntent(attempt_id=row.uid, revision=row.step.revision.number, step_id=row.step.key,
                            capability=row.capability_name, kind=row.kind, attempt=row.number,
                            idempotency_key=row.idempotency_key or None, started_at=row.started_at.timestamp(),
                            timeout_s=0.0, span_id=row.span_id)
        self._intents[row.uid] = row.pk
        self._interrupted = intent

    # -- one pass -------------------------------------------------------------------------

    def commit(self, transition: Transition) -> None:
        """Write one pass in a transaction of its own; raises LeaseLost (nothing written) if the lease is gone.

        The common pass (an attempt and its decision, maybe a step's new status) is one
        statement on PostgreSQL, atomic by itself; any other pass is a transaction.
        """
        write = self.describe(transition)
        if not self._write_in_one_statement(write):
            with transaction.atomic():
                self._write_statements(write)

    def write(self, transition: Transition) -> None:
        """Write one pass. Call inside a transaction; raises LeaseLost (roll back) if the lease is gone."""
        self._write_statements(self.describe(transition))

    def describe(self, transition: Transition) -> PassWrite:
        """The pass's write: the run fields it owns behind the lease's fence, then its events' rows."""
        now = timezone.now()
        stopped = next((e for e in transition.events if isinstance(e, ev.RunStopped)), None)
        recorded = {e.attempt_id for e in transition.events if isinstance(e, ev.AttemptFinished)}
        window = {entry.attempt_id: entry for entry in transition.state.history}
        self._entries = {uid: window[uid].to_dict() for uid in recorded if uid in window}
        self._history_rows = (self._history_rows | set(self._entries)) & set(window)
        values, increments = self._run_fields(transition, now, stopped)
        return PassWrite(run_id=self.run.pk, lease=self.lease, values=values, increments=increments,
                         events=transition.events, stopped=stopped, state=transition.state, now=now)

    def _write_statements(self, write: PassWrite) -> None:
        """The pass as the ORM's statements, the fenced run UPDATE first (inside the caller's transaction)."""
        run = self.run
        # A stop's indexed fields go with its attempt, in the one UPDATE that must touch indexes; the
        # fenced one before them then changes none and stays a HOT update.
        stop_fields = {name: write.values[name] for name in STOP_FIELDS if name in write.values} if write.stopped else {}
        values = {name: value for name, value in write.values.items() if name not in stop_fields}
        self._fenced(fenced_update(run.pk, write.lease, values, increments=write.increments,
                                   returning=("cancel_requested_at",)))
        attempts: dict[str, Attempt] = {}
        for event in write.events:
            if isinstance(event, ev.PlanProposed):
                _record_plan(run, event, self._steps, self.version_of)
                if event.accepted:
                    self._fresh_revision = event.revision
            elif isinstance(event, ev.AttemptFinished):
                attempts[event.attempt_id] = self._record_attempt(event)
            elif isinstance(event, ev.DecisionMade):
                Decision.objects.create(**self._decision_row(event),
                                        attempt=self._attempt(attempts, event.attempt_id))
            elif isinstance(event, ev.ApprovalRequested):
                _record_approval_request(run, event)
            elif isinstance(event, ev.PlannerCallEnded):
                self.record_planner_call_ended(event)
        if write.stopped is not None:
            self._record_stop(write, self._attempt(attempts, write.stopped.attempt_id), stop_fields)
        self._written(write.values, write.increments)
        steps = self._step_writes(write.state)
        for status, pks in steps.statuses.items():
            Step.objects.filter(pk__in=pks).update(status=status)
        for pk, status, progress in steps.progress:
            Step.objects.filter(pk=pk).update(status=status, progress=progress)
        self.previous = write.state

    def _fenced(self, returned: Any) -> None:
        """What the pass's fenced UPDATE returned (cancel_requested_at, the registry's version); None: it
        matched no row, the lease is lost and the pass must not be recorded."""
        if returned is None:
            raise LeaseLost(f"run {self.run.pk}: lease lost; the pass is not recorded")
        self.cancel_requested, self.registry_version = bool(returned[0]), returned[1]

    def _record_stop(self, write: PassWrite, attempt: Attempt | None, stop_fields: dict[str, Any]) -> None:
        run = self.run
        Run.objects.filter(pk=run.pk).update(stop_attempt=attempt, **stop_fields)
        run.stop_attempt = attempt
        # This writer knows whether the run ever asked for an approval (the counter it writes) and
        # whether a call is in flight (the intents it began or was handed by the claim).
        run_close_open_records(run_id=run.pk, now=write.now,
                               approvals=bool(run.approvals_requested or write.increments.get("approvals_requested")),
                               in_flight=bool(self._intents) or self.lease is None or self.lease.in_flight
                               or bool(self._open_planner_calls))
        self.released = True

    def _written(self, values: dict[str, Any], increments: dict[str, int]) -> None:
        run = self.run
        for name, value in values.items():
            if not hasattr(value, "resolve_expression"):
                setattr(run, name, value)
        for name, n in increments.items():
            setattr(run, name, getattr(run, name) + n)

    def _write_in_one_statement(self, write: PassWrite) -> bool:
        """The common pass as one PostgreSQL statement (runs/worker/pass_write.py). False (nothing
        written) when the pass is not the common kind: the caller writes it in a transaction."""
        common = self._common_pass(write)
        if common is None:
            return False
        attempt, decision, plan = common
        attempt_row = None
        if attempt is not None:
            attempt_row = {**self._attempt_row(attempt)[0], "run_id": self.run.pk, **self._new_attempt(attempt)}
        plan_rows = _plan_rows(self.run, plan, self.version_of) if plan is not None else None
        returned, steps = write_in_one_statement(
            write, attempt=attempt_row, decision=self._decision_row(decision) if decision is not None else None,
            plan=plan_rows, steps=StepWrites() if plan is not None else self._step_writes(write.state))
        self._fenced(returned)
        if plan is not None and plan.accepted:
            self._fresh_revision = plan.revision
            self._steps.update({(plan.revision, key): (pk, version) for pk, key, version in steps})
        self._written(write.values, write.increments)
        self.previous = write.state
        return True

    def _common_pass(self, write: PassWrite) -> tuple[Any, Any, Any] | None:
        """(its attempt, decision, plan; each may be None) when the pass is the common kind on
        PostgreSQL, else None: an approval request, a stop, a second attempt or plan, an intent
        row to complete, a step to link to its version, a decision on an earlier attempt."""
        if connection.vendor != "postgresql" or not can_return_from_update():
            return None
        attempt = decision = plan = None
        for event in write.events:
            if isinstance(event, ev.AttemptFinished) and attempt is None:
                attempt = event
            elif isinstance(event, ev.DecisionMade) and decision is None:
                decision = event
            elif isinstance(event, ev.PlanProposed) and plan is None:
                plan = event
            elif not isinstance(event, (ev.StatusChanged, ev.ApprovalDecided)):
                return None  # an approval request, a stop, a second attempt or plan
            elif isinstance(event, ev.StatusChanged) and RunStatus(event.status) in FINISHED_STATUSES:
                return None
        if attempt is not None and (attempt.attempt_id in self._intents
                                    or not self._step(attempt.revision, attempt.step_id)[1]):
            return None  # an intent row to complete, or a step to link to its version
        if decision is not None and decision.attempt_id and (attempt is None or decision.attempt_id != attempt.attempt_id):
            return None
        if plan is not None and not self._plan_fits_one_statement(plan, write.state, attempt or decision):
            return None
        return attempt, decision, plan

    def _plan_fits_one_statement(self, plan: ev.PlanProposed, state: RunState, other: Any) -> bool:
        """A run's first plan, alone in its pass: no attempt to link it to, no earlier revision whose
        steps' statuses would change, and every step of the new one pending (as inserted)."""
        return (other is None and not plan.triggering_attempt_id and self.previous is not None
                and not self.previous.revision and len(plan.steps) <= ONE_STATEMENT_PLAN_STEPS
                and all(_step_status(state, p) == StepStatus.PENDING and checkpoint.fresh_progress(p)
                        for p in state.steps))

    def _run_fields(self, transition: Transition, now, stopped) -> tuple[dict[str, Any], dict[str, int]]:
        """The fields this pass owns, never cancel_requested_at or anything an operator sets."""
        state, usage, run = transition.state, transition.state.usage, self.run
        values: dict[str, Any] = {
            "state": checkpoint.head(state, self._history_rows), "iterations": usage.iterations, "revisions": usage.plans,
            "tool_calls": usage.tool_calls, "retries": usage.retries, "tokens": usage.tokens, "cost": usage.cost,
            "side_effects_committed": usage.side_effects,
            "next_action_at": _at(state.not_before) if state.not_before else None, "updated_at": now,
        }
        increments = {"approvals_requested": sum(isinstance(e, ev.ApprovalRequested) for e in transition.events),
                      "repeated_attempts": sum(isinstance(e, ev.AttemptFinished) and e.repeated_without_progress
                                               for e in transition.events)}
        for event in transition.events:
            if isinstance(event, ev.StatusChanged) and RunStatus(event.status) not in FINISHED_STATUSES:
                values["status"] = event.status
                if event.status == RunStatus.RUNNING and run.started_at is None:
                    values["started_at"] = now
        if stopped is not None:
            values.update(status=status_for_stop(stop_kind(stopped.stop_reason)).value,
                          stop_reason=stopped.stop_reason, stop_detail=stopped.detail, finished_at=now,
                          stall_kind=(stopped.stall_kind or "") if stopped.stop_reason == StopKind.STALLED else "",
                          lease_owner="", lease_expires_at=None, next_action_at=None)
        elif self.lease is not None:
            values["lease_expires_at"] = now + timedelta(seconds=settings.AGENTOPS_RUN_LEASE_SECONDS)
        return values, {k: n for k, n in increments.items() if n}

    def _attempt(self, attempts: dict[str, Attempt], uid: str | None) -> Attempt | None:
        if not uid:
            return None
        # This run's own: a fork's inherited attempts (another run's rows) are never linked as its own.
        return attempts.get(uid) or Attempt.objects.filter(run=self.run, uid=uid).first()

    def _step(self, revision: int, key: str) -> tuple[int, int | None]:
        """A step's row id and the capability version it is linked to (None before its first attempt)."""
        if (revision, key) not in self._steps:
            for step_key, pk, version in Step.objects.filter(run=self.run, revision__number=revision).values_list(
                    "key", "pk", "capability_version_id"):
                self._steps[(revision, step_key)] = (pk, version)
        return self._steps[(revision, key)]

    def _version_exists(self, version_id: int | None, step_version: int | None = None) -> int | None:
        """`version_id` if that capability version still exists (an attempt links to it), else None.
        The version its step row links to needs no query: that link keeps it from being deleted."""
        if version_id is None:
            return None
        if version_id == step_version:
            return version_id
        if version_id not in self._versions:
            self._versions[version_id] = CapabilityVersion.objects.filter(pk=version_id).exists()
        return version_id if self._versions[version_id] else None

    def _attempt_row(self, event: ev.AttemptFinished) -> tuple[dict[str, Any], int | None]:
        """An attempt's row, its run and identity aside (its outcome, its step, the capability version it
        ran), and the version its step links (None before the step's first attempt)."""
        step_pk, step_version = self._step(event.revision, event.step_id)
        row = _attempt_fields(self.run, event)
        entry = self._entries.get(event.attempt_id)
        row["history_entry"] = None if entry is None else checkpoint.entry_for_row(entry, row["output"])
        row["capability_version_id"] = self._version_exists(event.version_id, step_version)
        row["step_id"] = step_pk
        return row, step_version

    def _new_attempt(self, event: ev.AttemptFinished) -> dict[str, Any]:
        """A new attempt row's identity: its uid, and the worker and lease token that wrote it."""
        return {"uid": event.attempt_id, "worker": (self.lease.worker if self.lease else "")[:100],
                "lease_token": self.lease.token if self.lease else None}

    def _decision_row(self, event: ev.DecisionMade) -> dict[str, Any]:
        """A decision's row, its attempt aside."""
        return {"run_id": self.run.pk, "decision": event.decision, "reason": event.reason, "usage": event.usage}

    def _record_attempt(self, event: ev.AttemptFinished) -> Attempt:
        row, step_version = self._attempt_row(event)
        step_pk, version = row["step_id"], row["capability_version_id"]
        if event.attempt_id in self._intents:
            # The outcome of a call whose intent was committed before it was sent.
            pk = self._intents.pop(event.attempt_id)
            fields = {name: value for name, value in row.items() if name != "step_id"}
            Attempt.objects.filter(pk=pk).update(in_flight=False, **fields)
            attempt = Attempt(pk=pk, uid=event.attempt_id, run=self.run, step_id=step_pk, **fields)
        else:
            attempt = Attempt.objects.create(run=self.run, **self._new_attempt(event), **row)
        if not step_version and version:
            Step.objects.filter(pk=step_pk).update(capability_version_id=version)
            self._steps[(event.revision, event.step_id)] = (step_pk, version)
        return attempt

    def _step_writes(self, state: RunState) -> StepWrites:
        """The Step rows this pass changes: their new status, and their progress where it changed.

        Compared with the previous checkpoint this writer saw, so the common pass reads nothing
        and writes only the steps it touched, however long the plan; by primary key (the writer
        knows the ids), as a filter through the revision costs a join.
        """
        writes = StepWrites()
        if not state.revision:
            return writes
        previous = self.previous
        if previous is not None and previous.revision == state.revision and len(previous.steps) == len(state.steps):
            if previous.is_terminal == state.is_terminal and previous.pending_approval == state.pending_approval:
                # Only a step whose progress object was replaced can have changed (the state is
                # immutable: replace() keeps the others as they were), so only those are compared.
                pairs = [(old, new) for old, new in zip(previous.steps, state.steps, strict=False) if old is not new]
            else:   # the run ended, or an approval came or went: any step's status may change
                pairs = list(zip(previous.steps, state.steps, strict=False))
            before = {old.step.id: (_step_status(previous, old),
                                    None if checkpoint.fresh_progress(old) else old.progress_dict())
                      for old, _new in pairs}
            changed = [new for _old, new in pairs]
        elif state.revision == self._fresh_revision and any(r == state.revision for r, _ in self._steps):
            before = {p.step.id: (StepStatus.PENDING, None) for p in state.steps}   # as the plan inserted them
            changed = list(state.steps)
        else:   # nothing seen of this revision (a writer per pass, the evaluation runner's): as stored
            stored = Step.objects.filter(run=self.run, revision__number=state.revision).values_list(
                "key", "status", "progress")
            before = {key: (status, progress) for key, status, progress in stored}
            changed = list(state.steps)
        for progress in changed:
            if progress.step.id not in before:
                continue
            old_status, old_progress = before[progress.step.id]
            status = _step_status(state, progress)
            new_progress = None if checkpoint.fresh_progress(progress) else progress.progress_dict()
            if new_progress == old_progress and status == old_status:
                continue
            pk = self._step(state.revision, progress.step.id)[0]
            if new_progress != old_progress:
                writes.progress.append((pk, status, new_progress))
            else:
                writes.statuses.setdefault(status, []).append(pk)
        return writes


_PROGRESS_STATUS = {"pending": StepStatus.PENDING, "succeeded": StepStatus.SUCCEEDED, "failed": StepStatus.FAILED}


def _step_status(state: RunState, progress) -> str:
    """A Step row's status for one step's progress in the checkpoint."""
    status = _PROGRESS_STATUS.get(progress.status, StepStatus.PENDING)
    if status == StepStatus.PENDING and progress.attempts:
        status = StepStatus.RUNNING
    if state.is_terminal and status in (StepStatus.PENDING, StepStatus.RUNNING):
        # The run ended around this step: it never finished, or never started. A step whose last
        # answer was ok did not fail (a stalled run stops on an ok repeat): it says what its attempt did.
        last = (progress.last_observation or {}).get("status")
        status = (StepStatus.SUCCEEDED if last == "ok" else StepStatus.FAILED) if progress.attempts else StepStatus.SKIPPED
    if state.pending_approval and state.pending_approval.step_id == progress.step.id:
        status = StepStatus.AWAITING_APPROVAL
    return status


def _record_plan(run: Run, event: ev.PlanProposed, step_ids: dict | None = None,
                 version_of: Callable[[str], int | None] | None = None) -> None:
    """The revision and, if accepted, its steps, each linked to its capability's current version
    (`version_of`: what the worker's registry view says; else read from the registry)."""
    revision_row, rows = _plan_rows(run, event, version_of)
    revision = PlanRevision.objects.create(
        **revision_row, triggering_attempt=Attempt.objects.filter(run=run, uid=event.triggering_attempt_id).first()
        if event.triggering_attempt_id else None)
    if not rows:
        return
    for row in rows:
        row["revision_id"] = revision.pk
    if can_return_from_update():
        created = insert_rows(Step, rows, now=timezone.now(), returning=("id", "key", "capability_version_id"))
    else:
        created = [(s.pk, s.key, s.capability_version_id) for s in Step.objects.bulk_create([Step(**r) for r in rows])]
    if step_ids is not None and all(pk for pk, _key, _version in created):
        step_ids.update({(event.revision, key): (pk, version) for pk, key, version in created})


def proposer_of(run: Run, revision: int) -> int | None:
    """Who proposed the run's plan `revision`: an external plan's submitter, else the owner."""
    if run.planner != "external":
        return run.owner_id
    return PlanSubmission.objects.filter(run_id=run.pk, revision=revision).values_list("submitted_by_id",
                                                                                       flat=True).first()


def _plan_rows(run: Run, event: ev.PlanProposed,
               version_of: Callable[[str], int | None] | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A proposed plan as its PlanRevision row (its triggering attempt aside) and, if accepted,
    its Step rows (their revision aside): {attname: value} each."""
    revision = dict(run_id=run.pk, number=event.revision, accepted=event.accepted, steps=list(event.steps),
                    reason_code=event.reason_code or "initial", reason=event.reason, changes=event.changes,
                    validation_errors=[e.to_dict() for e in event.validation_errors], tokens=event.tokens,
                    cost=event.cost, planner_output=event.planner_output[:200_000],
                    capabilities_seen=list(event.capabilities_seen), needs_approval=event.needs_plan_approval,
                    proposed_by_id=proposer_of(run, event.revision))
    if not event.accepted:
        return revision, []
    if version_of is None:
        names = {str(step.get("capability", "")) for step in event.steps}
        version_of = dict(Capability.objects.filter(name__in=names).values_list("name", "current_version_id")).get
    rows = [dict(run_id=run.pk, index=index, key=str(step.get("id") or f"s{index + 1}"),
                 capability_name=str(step.get("capability", "")),
                 capability_version_id=version_of(str(step.get("capability", ""))),
                 arguments=step.get("arguments") or {}, arguments_hash=arguments_hash(step.get("arguments") or {}),
                 expected_outcome=str(step.get("expected_outcome", "")), depends_on=list(step.get("depends_on") or []))
            for index, step in enumerate(event.steps)]
    return revision, rows


def _attempt_fields(run: Run, event: ev.AttemptFinished) -> dict[str, Any]:
    """An attempt row's outcome columns (large outputs are stored by reference)."""
    observation = event.observation
    output, output_ref = observation.output, None
    if observation.output_ref is not None:
        output_ref = stored_output_for(observation.output_ref.uri)
        output = {"preview": observation.output_ref.preview, "size_bytes": observation.output_ref.size_bytes}
    elif output is not None and len(json.dumps(output, default=str)) > settings.AGENTOPS_INLINE_OUTPUT_BYTES:
        output_ref = store_json(output)
        output = {"preview": json.dumps(output, default=str)[:500], "size_bytes": output_ref.size_bytes}
    http_status = _http_status(observation.extra.get("http_status"))
    code = observation.error_code.value if observation.error_code else ""
    category = observation.error_category.value if observation.error_category else ""
    return dict(
        number=event.attempt, kind=event.kind, capability_name=event.capability,
        signature=event.signature, signature_hash=_sha(event.signature),
        idempotency_key=event.idempotency_key or "", started_at=_at(event.started_at), ended_at=_at(event.ended_at),
        latency_s=max(0.0, observation.latency_s or (event.ended_at - event.started_at)),
        status=observation.status.value, state_changed=observation.state_changed, output=output,
        output_ref=output_ref, error_code=code, error_category=category,
        error_message=observation.error_message[:10_000], retry_guidance=observation.retry_guidance[:300],
        retry_after_s=observation.retry_after_s, side_effect_status=observation.side_effect.value,
        http_status=http_status, fingerprint=failures.fingerprint(
            capability=event.capability, error_code=code, error_category=category, http_status=http_status,
            message=observation.error_message),
        repeated_without_progress=event.repeated_without_progress,
        trace_id=(observation.trace_id or run.trace_id)[:32], span_id=(observation.span_id or "")[:16],
    )


def _http_status(value: Any) -> int | None:
    """The observation's HTTP status, when it is one (an executor's extra is free-form)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599 else None


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


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
