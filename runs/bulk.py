"""Bulk actions by filter: cancel, re-run, change labels, or decide the pending approvals of every
run a runs-list filter selects.

The filter is the runs list's own query string (runs.filters: the same form, the same meaning as
/runs/). `bulk_preview` counts the runs it selects and, run by run, which ones the user may act
on and why not the rest; `bulk_start` freezes that selection into a BulkAction job, audits it and
queues it; `bulk_process` (the `runs.bulk_process` task) works through the job in run id order.

Exactly once per run: each run's action and the job's cursor moving past that run commit in one
transaction, holding the job's row lock. A job picked up again (its worker killed, the task
delivered twice, the sweep re-sending it) reads the cursor and goes on after the last run acted
on; a fork, which is not idempotent, is never made twice. Permissions are checked again per run
when the job reaches it, with the services' own checks (run_cancel, run_fork, approval_decide).

Approvals: the preview records, per pending request, the hash it showed; the job decides a request
only with that hash (approval_decide refuses a request that has changed since), and never one
asked for after the preview. The four-eyes rule applies per request; a refusal is a skipped run
with its reason.

"Add to a suite" is an extension: the layer above (review.datasets) registers it, since runs cannot
import the evaluation. Its job acts on all its runs at once, in one transaction with the cursor's
move to the end: one new suite version for the whole selection, exactly once.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core import queue
from core.audit import audit
from core.choices import ApprovalState, DecisionChannel
from core.errors import Conflict, InvalidInput, NotAllowed, ServiceError
from core.models import AuditAction
from core.permissions import allowed, require
from core.projects import project_scope
from core.roles import MANAGE_ALL_RUNS
from runs import forks, selectors, services
from runs.filters import filters_from_query
from runs.labels import label_change_errors, labels_text, run_labels_change
from runs.models import Approval, Run
from runs.models_bulk import BulkAction, BulkActionKind, BulkActionStatus

log = logging.getLogger(__name__)

BULK_PROCESS = "runs.bulk_process"
# A job acts on at most this many runs: narrow the filter for more (the selection is frozen in the job).
MAX_BULK_RUNS = 10_000
# How long one task works on a job before it hands the rest to a new task (other work gets a turn).
SLICE_S = 20.0

# The permission each action needs at all, and how a refusal names it.
ACTION_PERMS = {
    BulkActionKind.CANCEL: ("runs.cancel_run", "cancel runs"),
    BulkActionKind.FORK: ("runs.start_run", "re-run runs"),
    BulkActionKind.LABEL: ("runs.start_run", "change the labels of runs"),
    BulkActionKind.APPROVE: ("runs.decide_approval", "approve or reject steps"),
    BulkActionKind.REJECT: ("runs.decide_approval", "approve or reject steps"),
}
DECIDE = (BulkActionKind.APPROVE, BulkActionKind.REJECT)
# The parameters each action takes (anything else is refused by name).
ACTION_PARAMETERS = {BulkActionKind.CANCEL: set(), BulkActionKind.FORK: set(), BulkActionKind.LABEL: {"add", "remove"},
                     BulkActionKind.APPROVE: {"comment"}, BulkActionKind.REJECT: {"comment"}}

NOT_YOURS = "another user's run (acting on others' runs needs the 'manage all runs' permission)"
# A refusal that is about who may act, not about the run's state: all of them means 403, not 409.
PERMISSION_REFUSALS = (NOT_YOURS, "four-eyes rule")


@dataclass(frozen=True)
class BulkExtension:
    """A bulk action a higher layer provides: its permission, parameters, a refusal read from the run's
    row, and the act over all the job's runs at once (run id -> why it was skipped; "" or absent: done)."""

    perm: str
    what: str
    parameters: frozenset[str]
    clean: Callable[[dict], dict]
    refusal: Callable[[Run], str]
    act_all: Callable[[Any, list[int], dict], dict[int, str]]
    max_runs: int = MAX_BULK_RUNS


EXTENSIONS: dict[BulkActionKind, BulkExtension] = {}


def register(action: BulkActionKind, extension: BulkExtension) -> None:
    """Called from a higher app's ready()."""
    EXTENSIONS[action] = extension


class Skip(Exception):
    """This run is not acted on, for a reason the job lists."""


@dataclass(frozen=True)
class Preview:
    action: str
    query: str                      # the filter, normalised (paging dropped)
    run_ids: tuple[int, ...]        # the selection, ascending
    eligible: int                   # runs the user may act on now
    refused: tuple[tuple[str, int], ...]  # (why not, how many runs), most first
    approvals: dict[str, str] = field(default_factory=dict)  # approve/reject: request id -> the hash shown

    @property
    def selected(self) -> int:
        return len(self.run_ids)


def _action(action) -> BulkActionKind:
    known = [a for a in BulkActionKind.values if a in ACTION_PERMS or a in EXTENSIONS]
    if action not in known:
        raise InvalidInput(f"Unknown bulk action {action!r}: one of {', '.join(known)}.",
                           fields={"action": f"one of {', '.join(known)}"})
    return BulkActionKind(action)


def _perm(action: BulkActionKind) -> tuple[str, str]:
    extension = EXTENSIONS.get(action)
    return (extension.perm, extension.what) if extension else ACTION_PERMS[action]


def _require_action(user, action: BulkActionKind) -> None:
    perm, what = _perm(action)
    require(user, perm, what)


def parameters_clean(action, parameters) -> dict:
    """The action's parameters checked and completed with their defaults; InvalidInput naming each problem."""
    action = _action(action)
    parameters = {} if parameters is None else parameters
    if not isinstance(parameters, dict):
        raise InvalidInput("parameters must be an object.", fields={"parameters": "an object"})
    extension = EXTENSIONS.get(action)
    unknown = sorted(set(parameters) - (extension.parameters if extension else ACTION_PARAMETERS[action]))
    if unknown:
        raise InvalidInput(f"The {action.value} action takes no parameter {', '.join(unknown)}.",
                           fields={f"parameters.{name}": "unknown parameter" for name in unknown})
    if extension:
        return extension.clean(parameters)
    if action == BulkActionKind.LABEL:
        add, remove = parameters.get("add", {}), parameters.get("remove", [])
        errors = label_change_errors(add, remove)
        if errors:
            raise InvalidInput("The label change is invalid: " + "; ".join(f"{k}: {v}" for k, v in errors.items()),
                               fields={f"parameters.{k}": v for k, v in errors.items()})
        return {"add": add, "remove": remove}
    if action in DECIDE:
        comment = parameters.get("comment", "")
        if not isinstance(comment, str) or len(comment) > 5000:
            raise InvalidInput("The comment must be text of at most 5,000 characters.",
                               fields={"parameters.comment": "text, at most 5,000 characters"})
        return {"comment": comment}
    return {}


def _pending(run_ids) -> dict[int, list[Approval]]:
    by_run: dict[int, list[Approval]] = {}
    for approval in (Approval.objects.filter(run_id__in=run_ids, state=ApprovalState.PENDING)
                     .select_related("run", "revision").order_by("id")):
        by_run.setdefault(approval.run_id, []).append(approval)
    return by_run


def run_refusal(user, action: BulkActionKind, run: Run, pending: list[Approval] = ()) -> str:  # type: ignore[assignment]
    """Why `user` may not take `action` on `run` now ("" when they may). The preview counts these;
    the job asks again when it reaches the run, and the services check once more as they act."""
    if action in EXTENSIONS:
        return EXTENSIONS[action].refusal(run)
    if action in DECIDE:
        if not pending:
            return "no pending approval request"
        refusals = [selectors.approval_refusal(approval=a, user=user) for a in pending]
        if all(refusals):
            return "four-eyes rule: " + str(refusals[0]).removeprefix("Four-eyes rule: ")
        return ""
    if not services.can_manage_run(user, run):
        return NOT_YOURS
    if action == BulkActionKind.CANCEL and run.is_finished:
        return "already finished"
    if action == BulkActionKind.FORK:
        if not run.is_finished:
            return "still live (cancel it first to re-run it now)"
        why = forks._not_forkable(run)
        if why:
            return f"cannot be re-run: {why}"
    return ""


def bulk_preview(*, user, action, query: str) -> Preview:
    """What the action would do to the runs `query` selects: how many, how many the user may act
    on, and why not the rest. Changes nothing."""
    action = _action(action)
    _require_action(user, action)
    filters, normalised = filters_from_query(query)
    selection = selectors.run_list(filters=filters).order_by("pk")
    run_ids = list(selection.values_list("pk", flat=True)[:MAX_BULK_RUNS + 1])
    if len(run_ids) > MAX_BULK_RUNS:
        raise InvalidInput(f"These filters select more than {MAX_BULK_RUNS:,} runs: narrow them to act on fewer.",
                           fields={"query": f"selects more than {MAX_BULK_RUNS:,} runs"})
    pending = _pending(run_ids) if action in DECIDE else {}
    refused: Counter[str] = Counter()
    for run in selection.only("pk", "owner_id", "status", "planner", "evaluation_id", "completion").select_related(None):
        why = run_refusal(user, action, run, pending.get(run.pk, []))
        if why:
            refused[why] += 1
    approvals = {}
    if action in DECIDE:
        approvals = {str(a.pk): a.arguments_hash or a.plan_hash for rows in pending.values() for a in rows
                     if not selectors.approval_refusal(approval=a, user=user)}
    return Preview(action=action.value, query=normalised, run_ids=tuple(run_ids),
                   eligible=len(run_ids) - sum(refused.values()), refused=tuple(refused.most_common()),
                   approvals=approvals)


def _expected_clean(expected) -> dict[str, str]:
    if not isinstance(expected, dict) or not all(isinstance(k, str) and k.isdigit() and isinstance(v, str) and v
                                                 for k, v in expected.items()):
        raise InvalidInput("expected_hashes must map each approval request id to the hash you reviewed "
                           "(the preview's `approvals`).", fields={"expected_hashes": "an object of id: hash"})
    if len(expected) > MAX_BULK_RUNS:
        raise InvalidInput(f"At most {MAX_BULK_RUNS:,} approval requests at once.",
                           fields={"expected_hashes": f"at most {MAX_BULK_RUNS:,} requests"})
    return expected


@transaction.atomic
def bulk_start(*, user, action, query: str, parameters: dict | None = None,
               expected_hashes: dict[str, str] | None = None, channel: str = DecisionChannel.INBOX) -> BulkAction:
    """Start the job the preview described; audited, queued once this commits.

    For approve/reject, `expected_hashes` is the preview's `approvals` as the person saw them: only
    those requests are decided, each only while its hash is unchanged. Refused (and nothing
    created) when the user may act on none of the selected runs: 403 when that is for want of
    permission on every one of them, 409 otherwise."""
    action = _action(action)
    _require_action(user, action)
    parameters = parameters_clean(action, parameters)
    if action in DECIDE:
        if expected_hashes is None:
            raise InvalidInput("expected_hashes is required to decide approvals: send the preview's `approvals`, "
                               "the hashes you reviewed.", fields={"expected_hashes": "required"})
        parameters["expected"] = _expected_clean(expected_hashes)
        parameters["channel"] = channel if channel in DecisionChannel.values else DecisionChannel.INBOX
    elif expected_hashes is not None:
        raise InvalidInput("expected_hashes is only for approve and reject.", fields={"expected_hashes": "not for "
                                                                                                          f"{action.value}"})
    preview = bulk_preview(user=user, action=action, query=query)
    if not preview.selected:
        raise Conflict("These filters select no runs: nothing to do.")
    extension = EXTENSIONS.get(action)
    if extension and preview.eligible > extension.max_runs:
        raise InvalidInput(f"{action.label} takes at most {extension.max_runs:,} runs; these filters select "
                           f"{preview.eligible:,} it could take: narrow them.",
                           fields={"query": f"at most {extension.max_runs:,} runs"})
    if not preview.eligible:
        reasons = "; ".join(f"{n} {why}" for why, n in preview.refused)
        message = f"You may not {action.label.lower()} any of the {preview.selected} runs selected: {reasons}."
        if all(why.startswith(PERMISSION_REFUSALS) for why, _n in preview.refused):
            raise NotAllowed(message)
        raise Conflict(message)
    job = BulkAction.objects.create(action=action.value, query=preview.query, parameters=parameters, created_by=user,
                                    run_ids=list(preview.run_ids), total=preview.selected)
    audit(actor=user, action=AuditAction.BULK_ACTION_STARTED, target=job,
          summary=f"Bulk {action.value} of {preview.selected} runs ({preview.eligible} allowed): "
                  f"{preview.query or 'all runs'}"[:300],
          details={"action": action.value, "query": preview.query, "selected": preview.selected,
                   "eligible": preview.eligible, "parameters": {k: v for k, v in parameters.items() if k != "expected"},
                   "approvals": len(parameters.get("expected", {}))})
    job_id = job.pk
    transaction.on_commit(lambda: _send(job_id))
    return job


def _send(job_id: int, countdown: float | None = None) -> None:
    try:
        queue.send(BULK_PROCESS, (job_id,), countdown=countdown)
    except Exception:  # committed: a broker outage must not turn it into an error; the sweep sends it again
        log.exception("could not queue bulk action %s; the sweep will queue it again", job_id)


def bulk_process(job_id: int, *, slice_s: float = SLICE_S) -> bool:
    """Act on the job's runs after its cursor, one transaction per run; True once the job is done.

    After `slice_s` the rest is handed to a new task. Safe to run twice at once or again later."""
    job = BulkAction.objects.select_related("created_by").filter(pk=job_id).first()
    if job is None or job.is_finished:
        return True
    BulkAction.objects.filter(pk=job_id, status=BulkActionStatus.QUEUED).update(
        status=BulkActionStatus.RUNNING, updated_at=timezone.now())
    user = job.created_by
    if BulkActionKind(job.action) in EXTENSIONS:
        with project_scope(job.project_id):
            _process_all(job_id, user)
        return True
    ends = time.monotonic() + slice_s
    for run_id in [i for i in job.run_ids if i > job.cursor]:
        if time.monotonic() > ends:
            _send(job_id)
            return False
        with project_scope(job.project_id):   # the job acts with its creator's roles in its project
            _process_one(job_id, run_id, user)
    with transaction.atomic():
        job = BulkAction.objects.select_for_update().get(pk=job_id)
        if not job.is_finished:
            job.status = BulkActionStatus.DONE
            job.finished_at = timezone.now()
            job.save(update_fields=["status", "finished_at", "updated_at"])
    return True


def _process_one(job_id: int, run_id: int, user) -> None:
    with transaction.atomic():
        # The row lock orders concurrent deliveries: the second finds the cursor past this run. The
        # frozen selection (up to MAX_BULK_RUNS ids) is not read again for every run.
        job = BulkAction.objects.select_for_update().defer("run_ids").get(pk=job_id)
        if job.cursor >= run_id or job.is_finished:
            return
        outcome, reason = "done", ""
        try:
            with transaction.atomic():
                _act(job, run_id, user)
        except Skip as exc:
            outcome, reason = "skipped", str(exc)
        except ServiceError as exc:
            outcome, reason = "skipped", exc.message
        except Exception as exc:  # one run's fault must not stop the job: recorded, and the job goes on
            log.exception("bulk action %s: run %s failed", job_id, run_id)
            outcome, reason = "failed", f"internal error ({type(exc).__name__}); see the server log"
        if outcome == "done":
            job.done += 1
        elif outcome == "skipped":
            job.skipped += 1
        else:
            job.failed += 1
        if reason and len(job.problems) < BulkAction.MAX_PROBLEMS:
            job.problems = [*job.problems, {"run": run_id, "outcome": outcome, "reason": reason[:300]}]
        job.cursor = run_id
        job.save(update_fields=["done", "skipped", "failed", "problems", "cursor", "updated_at"])


def _process_all(job_id: int, user) -> None:
    """An extension's job: every remaining run at once, in one transaction with the job's end."""
    with transaction.atomic():
        job = BulkAction.objects.select_for_update().get(pk=job_id)
        if job.is_finished:
            return
        extension = EXTENSIONS[BulkActionKind(job.action)]
        remaining = [i for i in job.run_ids if i > job.cursor]
        outcomes: dict[int, str]
        failed = False
        if not allowed(user, extension.perm):
            outcomes = {i: f"you no longer have permission to {extension.what}" for i in remaining}
        else:
            try:
                with transaction.atomic():
                    outcomes = extension.act_all(user, remaining, job.parameters)
            except ServiceError as exc:
                outcomes = {i: exc.message for i in remaining}
            except Exception as exc:  # recorded on the job, as one run's fault is
                log.exception("bulk action %s failed", job_id)
                outcomes, failed = {i: f"internal error ({type(exc).__name__}); see the server log"
                                    for i in remaining}, True
        for run_id in remaining:
            reason = outcomes.get(run_id, "")
            if not reason:
                job.done += 1
                continue
            if failed:
                job.failed += 1
            else:
                job.skipped += 1
            if len(job.problems) < BulkAction.MAX_PROBLEMS:
                job.problems = [*job.problems, {"run": run_id, "outcome": "failed" if failed else "skipped",
                                                "reason": reason[:300]}]
        job.cursor = max(remaining, default=job.cursor)
        job.status = BulkActionStatus.DONE
        job.finished_at = timezone.now()
        job.save(update_fields=["done", "skipped", "failed", "problems", "cursor", "status", "finished_at",
                                "updated_at"])


def _act(job: BulkAction, run_id: int, user) -> None:
    action = BulkActionKind(job.action)
    run = Run.objects.select_related("owner").filter(pk=run_id).first()
    if run is None:
        raise Skip("the run no longer exists")
    pending = list(Approval.objects.filter(run_id=run_id, state=ApprovalState.PENDING).select_related(
        "run", "revision").order_by("id")) if action in DECIDE else []
    perm, what = _perm(action)
    if not allowed(user, perm):
        raise Skip(f"you no longer have permission to {what}")
    why = run_refusal(user, action, run, pending)
    if why:
        raise Skip(why)
    if action == BulkActionKind.CANCEL:
        services.run_cancel(run_id=run_id, user=user)
    elif action == BulkActionKind.FORK:
        forks.run_fork(run_id=run_id, user=user)
    elif action == BulkActionKind.LABEL:
        if not run_labels_change(run_id=run_id, user=user, add=job.parameters.get("add", {}),
                                 remove=job.parameters.get("remove", [])):
            raise Skip(f"already labelled so ({labels_text(run.labels) or 'no labels'})")
    else:
        _decide(job, action, pending, user)


def _decide(job: BulkAction, action: BulkActionKind, pending: list[Approval], user) -> None:
    expected = job.parameters.get("expected", {})
    decided, reasons = 0, []
    for approval in pending:
        seen = expected.get(str(approval.pk))
        if seen is None:
            reasons.append(f"request {approval.pk} was asked after the preview: review it on its own")
            continue
        try:
            with transaction.atomic():
                services.approval_decide(approval_id=approval.pk, user=user, approve=action == BulkActionKind.APPROVE,
                                         expected_hash=seen, channel=job.parameters.get("channel", "inbox"),
                                         comment=job.parameters.get("comment", ""))
        except ServiceError as exc:
            reasons.append(f"request {approval.pk}: {exc.message}")
        else:
            decided += 1
    if not decided:
        raise Skip("; ".join(reasons) or "no pending approval request")


def stall_after_s() -> float:
    """How long a job may show no progress before the sweep takes it for lost: a run's lease
    twice over (one run's action is far shorter; a task waiting in a backlog is resent harmlessly)."""
    return float(max(10, 2 * settings.AGENTOPS_RUN_LEASE_SECONDS))


def requeue_stalled_bulk_actions(now=None) -> int:
    """From the scheduler: queue again each unfinished job with no progress for stall_after_s (its
    worker died, or its task was lost); returns how many. The cursor makes a duplicate harmless."""
    now = now or timezone.now()
    stalled = list(BulkAction.objects.filter(status__in=[BulkActionStatus.QUEUED, BulkActionStatus.RUNNING],
                                             updated_at__lt=now - timedelta(seconds=stall_after_s()))
                   .values_list("pk", flat=True)[:100])
    for job_id in stalled:
        # Touched, so the next sweep waits again for this send to show progress.
        BulkAction.objects.filter(pk=job_id).update(updated_at=now)
        log.warning("bulk action %s showed no progress: queued again", job_id)
        _send(job_id)
    return len(stalled)


def bulk_get(*, user, job_id: int) -> BulkAction:
    """A job, for whoever started it or may manage all runs (others are told it does not exist)."""
    job = BulkAction.objects.select_related("created_by").filter(pk=job_id).first()
    if job is None or not (job.created_by_id == user.pk or allowed(user, MANAGE_ALL_RUNS)):
        raise BulkAction.DoesNotExist(f"No bulk action {job_id}.")
    return job
