"""A person's reconciliation of a side effect whose outcome the runtime could not learn.

A run stops `terminal_failure:outcome_unknown` when a side effect's outcome can be neither
deduplicated by its idempotency key nor looked up (design.md). Someone then checks the
other system and records what they found: committed or not, with the evidence. The run's
own record stays what the runtime saw; the finding sits beside it, audited, once per run.

Then the person may resume the run from there (runs/forks.py: a fork at its end): the new
run inherits the history up to the unknown call, and that call's observation is what the
person recorded. Committed: the effect is done and never sent again. Not committed: the
planner may do it again. Or they leave the run closed, the question answered.
"""
from __future__ import annotations

from django.db import transaction

from core.audit import audit
from core.errors import Conflict, InvalidInput
from core.models import AuditAction
from core.permissions import allowed, require
from runs.models import Reconciliation, Run
from runs.services import can_manage_run, require_manage
from runtime.observation import ErrorCode
from runtime.stop import StopKind, stop_reason

OUTCOME_UNKNOWN = stop_reason(StopKind.TERMINAL_FAILURE, ErrorCode.OUTCOME_UNKNOWN)
RECONCILE_RUN = "runs.reconcile_run"
MAX_EVIDENCE = 5000
# What a person may do after recording: said on the page and in the API.
AFTER_RECORDING = ("Resume the run from the unknown call (Resume on its trace, or POST /api/runs/{id}/fork/): the "
                   "new run inherits its history with your finding as that call's outcome, so a committed side "
                   "effect is never sent again and one not committed may be done again. Or leave the run closed: "
                   "your finding answers the question.")


def needs_reconciliation(run: Run) -> bool:
    return run.stop_reason == OUTCOME_UNKNOWN and not Reconciliation.objects.filter(run=run).exists()


def can_reconcile(user, run: Run) -> bool:
    return allowed(user, RECONCILE_RUN) and can_manage_run(user, run)


@transaction.atomic
def run_reconcile(*, run_id: int, user, committed: bool, evidence: str) -> Reconciliation:
    """Record whether the unknown side effect committed, with the evidence, and audit it."""
    require(user, RECONCILE_RUN, "reconcile runs")
    run = Run.objects.select_for_update(no_key=True).get(pk=run_id)
    require_manage(user, run, "reconcile")
    if run.stop_reason != OUTCOME_UNKNOWN:
        raise Conflict(f"Run {run.pk} did not stop on an unknown outcome ({run.stop_reason or run.status}): "
                       "there is nothing to reconcile.")
    evidence = (evidence or "").strip()
    if not evidence or len(evidence) > MAX_EVIDENCE:
        raise InvalidInput(f"Say what you checked and what it showed (1-{MAX_EVIDENCE:,} characters).",
                           fields={"evidence": f"1-{MAX_EVIDENCE:,} characters"})
    if Reconciliation.objects.filter(run=run).exists():
        raise Conflict(f"Run {run.pk} has already been reconciled.")
    found = Reconciliation.objects.create(run=run, attempt=run.stop_attempt, committed=committed,
                                          evidence=evidence, decided_by=user)
    outcome = "committed" if committed else "not committed"
    audit(actor=user, action=AuditAction.RUN_RECONCILED, target=run,
          summary=f"Run {run.pk}: the unknown side effect was found {outcome}",
          details={"committed": committed, "evidence": evidence,
                   "attempt": run.stop_attempt.uid if run.stop_attempt else None})
    return found
