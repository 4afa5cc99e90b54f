"""Forking a run from one of its calls, and resuming a stopped run (a fork at its end).

A fork is a new run, owned by whoever forks, that starts where the source was before a chosen
call: the source's calls before that point are its inherited history (runtime/fork.py), read
from the source's rows and never executed again; the new run then asks its planner what to do
next, with the current registry, the source's goal and completion criteria, and the source's
budgets and planner settings unless new ones are given. A side effect committed before the fork
point is never repeated (the runtime skips it), and a reconciled unknown outcome is inherited as
the person found it.

Pages and the API call `run_fork`; the new run records where it came from (`Run.forked_from`,
`Run.forked_at`) and the source's trace links to its forks.
"""
from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from core.audit import audit
from core.errors import Conflict, InvalidInput
from core.models import AuditAction
from core.permissions import require
from runs import checkpoint
from runs.models import Attempt, Planner, Reconciliation, Run, RunLabel
from runs.planners import validate_planner_config
from runs.services import _enqueue_advance, budget_errors, can_manage_run, require_manage
from runtime.budgets import Budgets
from runtime.checkpoint import bounded_for_history
from runtime.fork import forked_state, reconciled
from runtime.history import DEFAULT_WINDOW, HistoryEntry
from runtime.ids import random_hex
from runtime.observation import ErrorCategory, ErrorCode, Observation, OutputRef, SideEffectStatus, Status
from runtime.signatures import action_signature, outcome_fingerprint, signature_text

# A gateway session's agent is gone with its session, and the evaluation's direct baseline is
# one call by design: neither has a planner a fork could ask.
NOT_FORKABLE: dict[str, str] = {
    Planner.GATEWAY.value: "an MCP session's agent ended with its session",
    Planner.DIRECT.value: "a direct call (the evaluation baseline) has no planner to continue"}


# How many forks back a fork's inherited history is rebuilt (each level reads at most a window of calls).
MAX_ANCESTRY = 20


def can_fork(user, run: Run) -> bool:
    return (run.is_finished and not _not_forkable(run) and user.has_perm("runs.start_run")
            and can_manage_run(user, run))


def _not_forkable(run: Run) -> str:
    """Why a run cannot be forked at all ("" when it can)."""
    if run.evaluation_id is not None:
        # Its capabilities may have been simulated: a fork would call the registry's real ones.
        return "an evaluation's run ran against its suite's capabilities; replay it with What if… instead"
    return NOT_FORKABLE.get(run.planner, "")


def source_calls(run: Run):
    """The source's calls in their order (the trace's): the positions a fork point counts."""
    return (Attempt.objects.filter(run=run).select_related("step", "output_ref").order_by("started_at", "id"))


@transaction.atomic
def run_fork(*, run_id: int, user, at: int | None = None, attempt: str | None = None,
             budgets: dict | None = None, planner: str | None = None, planner_config: dict | None = None) -> Run:
    """Start a new run from the source's history before call `at` (1-based; its number of calls + 1,
    the default, is its end: a resume), or before the call whose uid is `attempt`."""
    require(user, "runs.start_run", "start runs")
    source = Run.objects.select_related("owner").filter(pk=run_id).first()
    if source is None:
        raise InvalidInput(f"Run {run_id} does not exist.", fields={"run": "no such run"})
    require_manage(user, source, "fork")
    if not source.is_finished:
        raise Conflict(f"Run {source.pk} is still {source.get_status_display().lower()}: fork it once it has "
                       "stopped (cancel it first to fork it now).")
    if _not_forkable(source):
        raise Conflict(f"Run {source.pk} cannot be forked: {_not_forkable(source)}.")
    calls = list(source_calls(source))
    at = _fork_point(calls, at, attempt)
    planner = source.planner if planner is None else planner
    planner_config = source.planner_config if planner_config is None else planner_config
    budgets = source.budgets if budgets is None else budgets
    _validate(budgets, planner, planner_config)
    found = Reconciliation.objects.filter(run=source).first()
    inherited, settled = _inherited(calls[:at - 1], found)
    # A fork of a fork: what the source itself inherited comes first, and its settled side effects stay
    # settled (they precede every call of the source, so every fork point of it).
    inherited = (_ancestry(source) + inherited)[-DEFAULT_WINDOW:]
    settled |= set((source.state or {}).get("settled_keys") or ())
    parsed = Budgets.from_dict(budgets)
    now = timezone.now()
    run = Run.objects.create(
        goal=source.goal, completion=source.completion, budgets=parsed.to_dict(), planner=planner,
        planner_config=planner_config, owner=user, require_plan_approval=source.require_plan_approval,
        trace_id=random_hex(16), deadline_at=now + timedelta(seconds=parsed.deadline_s),
        labels=source.labels, forked_from=source, forked_at=at)
    RunLabel.objects.bulk_create([RunLabel(run=run, key=k, value=v) for k, v in source.labels.items()])
    state = forked_state(
        run_id=str(run.pk), goal=run.goal, completion=source.completion or None, budgets=parsed,
        started_at=now.timestamp(), trace_id=run.trace_id,
        key_scope=(source.state or {}).get("key_scope") or str(source.pk), inherited=inherited,
        settled_keys=settled, reason=fork_reason(source, at, len(calls), found),
        require_plan_approval=source.require_plan_approval)
    run.state = checkpoint.head(state)
    Run.objects.filter(pk=run.pk).update(state=run.state)
    resumed = at == len(calls) + 1
    audit(actor=user, action=AuditAction.RUN_FORKED, target=run,
          summary=f"Run {run.pk} {'resumes' if resumed else 'forks'} run {source.pk} "
                  f"{'after its end' if resumed else f'before call {at}'}",
          details={"source": source.pk, "at": at, "inherited_calls": at - 1, "resumed": resumed,
                   "planner": planner, "budgets_changed": budgets != source.budgets,
                   "planner_changed": (planner, planner_config) != (source.planner, source.planner_config),
                   "reconciliation": None if found is None else {"committed": found.committed}})
    _enqueue_advance(run.pk)
    return run


def fork_reason(source: Run, at: int, total: int, found: Reconciliation | None) -> str:
    """What the new run's planner is told (and the trace shows as its first revision's reason)."""
    if at == total + 1:
        text = (f"resumed run {source.pk} after its end ({source.stop_reason or source.status}); "
                f"its {total} call{'s' if total != 1 else ''} are inherited history, not repeated")
    else:
        text = (f"forked from run {source.pk} before its call {at}; the {at - 1} call{'s' if at != 2 else ''} "
                "before it are inherited history, not repeated")
    if found is not None and found.attempt_id is not None and at == total + 1:
        outcome = "committed (it is not sent again)" if found.committed else "not committed (it may be done again)"
        text += f"; a person found the unknown side effect {outcome}"
    return text


def _fork_point(calls: list[Attempt], at, attempt: str | None) -> int:
    total = len(calls)
    if at is not None and attempt:
        raise InvalidInput("Give the fork point once: `at` or `attempt`, not both.",
                           fields={"at": "give at or attempt, not both"})
    if attempt:
        position = next((i for i, row in enumerate(calls, start=1) if row.uid == attempt), None)
        if position is None:
            raise InvalidInput(f"Run {calls[0].run_id if calls else ''} has no call {attempt!r}.".replace("  ", " "),
                               fields={"attempt": "no such call in this run"})
        return position
    if at is None:
        return total + 1
    if isinstance(at, bool) or not isinstance(at, int) or not 1 <= at <= total + 1:
        raise InvalidInput(f"The fork point must be a call of the run, 1 to {total}, or {total + 1} for its end.",
                           fields={"at": f"1-{total + 1}"})
    return at


def _validate(budgets, planner: str, planner_config) -> None:
    errors = dict(budget_errors(budgets))
    if planner not in Planner.values or planner in NOT_FORKABLE:
        errors["planner"] = f"one of {', '.join(p for p in Planner.values if p not in NOT_FORKABLE)}"
    elif not isinstance(planner_config, dict):
        errors["planner_config"] = "planner_config must be an object"
    else:
        errors.update(validate_planner_config(planner, planner_config))
    if errors:
        raise InvalidInput("The run could not be forked: " + "; ".join(f"{k}: {v}" for k, v in errors.items()),
                           fields=errors)


def _inherited(rows: list[Attempt], found: Reconciliation | None) -> tuple[list[HistoryEntry], set[str]]:
    """The inherited calls as history entries, and the keys of the side effects they committed.

    A side effect whose outcome stayed unknown is inherited only once something settled it: a
    later call with its key (a re-send or a lookup) or a person's reconciliation. Otherwise the
    fork would not know whether to do it again: reconcile first, or fork before it."""
    entries, settled, outcome_by_key = _entries(rows, found)
    unknown = [key for key, status in outcome_by_key.items() if status == SideEffectStatus.UNKNOWN and key not in settled]
    if unknown:
        row = next(r for r in reversed(rows) if r.idempotency_key == unknown[0])
        raise Conflict(f"Whether call {row.uid} ({row.capability_name}) committed is unknown: reconcile the run "
                       "first, or fork before that call.")
    return entries, settled


def _entries(rows: list[Attempt], found: Reconciliation | None
             ) -> tuple[list[HistoryEntry], set[str], dict[str, str]]:
    """History entries for these rows (a reconciled call as the person found it), the keys they
    committed, and each key's last side-effect status."""
    entries, settled = [], set()
    outcome_by_key: dict[str, str] = {}
    for row in rows:
        observation = _observation(row)
        if found is not None and row.pk == found.attempt_id:
            observation = reconciled(observation, committed=found.committed, evidence=found.evidence,
                                     by=found.decided_by.get_username())
        if row.idempotency_key:
            outcome_by_key[row.idempotency_key] = observation.side_effect.value
        if row.idempotency_key and observation.side_effect is SideEffectStatus.COMMITTED:
            settled.add(row.idempotency_key)
        signature = signature_text(action_signature(row.capability_name, row.step.arguments))
        entries.append(HistoryEntry(attempt_id=row.uid, capability=row.capability_name, arguments=row.step.arguments,
                                    signature=signature, fingerprint=outcome_fingerprint(observation), kind=row.kind,
                                    observation=bounded_for_history(observation, row.uid)))
    return entries, settled, outcome_by_key


def _ancestry(run: Run, depth: int = 0) -> list[HistoryEntry]:
    """The history a fork inherited from its own ancestors (the last window of it), rebuilt from their rows."""
    parent = run.forked_from
    if parent is None or run.forked_at is None or depth >= MAX_ANCESTRY:
        return []
    end = run.forked_at - 1
    rows = list(source_calls(parent)[max(0, end - DEFAULT_WINDOW):end])
    found = Reconciliation.objects.filter(run=parent).select_related("decided_by").first()
    return (_ancestry(parent, depth + 1) + _entries(rows, found)[0])[-DEFAULT_WINDOW:]


def _observation(row: Attempt) -> Observation:
    ref, stored = None, row.output_ref
    if stored is not None:
        ref = OutputRef(uri=f"attempt:{row.uid}", size_bytes=stored.size_bytes, sha256=stored.sha256,
                        preview=stored.content[:500])
    return Observation(
        status=Status(row.status), state_changed=row.state_changed, output=row.output, output_ref=ref,
        error_code=ErrorCode(row.error_code) if row.error_code else None,
        error_category=ErrorCategory(row.error_category) if row.error_category else None,
        error_message=row.error_message, retry_guidance=row.retry_guidance, retry_after_s=row.retry_after_s,
        side_effect=SideEffectStatus(row.side_effect_status), latency_s=row.latency_s, attempt=row.number,
        trace_id=row.trace_id, span_id=row.span_id)

