"""Every change to a run goes through these functions (pages, API and tasks alike).

Each is one atomic transaction that writes its audit row with the change and
queues background work only once the transaction has committed.
"""
from __future__ import annotations

import logging

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.audit import audit
from core.choices import ApprovalState, DecisionChannel, RunStatus
from core.errors import Conflict, InvalidInput, NotAllowed
from core.models import AuditAction, Project
from core.permissions import require
from core.projects import active_project_id, project_scope
from core.roles import MANAGE_ALL_RUNS
from runs import checkpoint, failures, otel
from runs.dashboard import rollup, usage
from runs.labels import labels_errors
from runs.models import Approval, Attempt, PlanSubmission, Run, RunLabel, Step
from runs.planners import validate_planner_config
from runs.planners.external import awaited_revision, next_plan_revision
from runs.selectors import approval_refusal
from runs.signals import approval_decided, run_finished
from runs.worker import queue
from runs.worker.planner_intents import count_planner_calls_left_in_flight
from runtime.budgets import Budgets
from runtime.completion import completion_errors
from runtime.ids import random_hex
from runtime.state import RunState
from runtime.stop import StopKind
from runtime.storable import UNSTORABLE, text_unstorable

log = logging.getLogger(__name__)


def _enqueue_advance(run_id: int, countdown: float | None = None) -> None:
    transaction.on_commit(lambda: _send_advance(run_id, countdown))


def _send_advance(run_id: int, countdown: float | None) -> None:
    try:
        queue.advance_later(run_id, countdown)
    except Exception:  # the change is committed: a broker outage must not turn it into an error page
        log.exception("could not queue run %s; the orphaned-run sweep will queue it again", run_id)



def run_wake(*, run_id: int) -> None:
    """Queue a pass for the run once this transaction commits: a wake-up a change's commit may have
    lost (its acknowledgement failed, so its on_commit never ran)."""
    _enqueue_advance(run_id)


def can_manage_run(user, run: Run) -> bool:
    """An operator acts on (cancels, resubmits, plans for) their own runs; others' need manage_all_runs."""
    return run.owner_id == user.pk or user.has_perm(MANAGE_ALL_RUNS)


def require_manage(user, run: Run, action: str) -> None:
    if not can_manage_run(user, run):
        raise NotAllowed(f"Only the run's owner ({run.owner.get_username()}) may {action} run {run.pk}; "
                         "other users' runs need the 'manage all runs' permission.")


@transaction.atomic
def run_cancel(*, run_id: int, user) -> Run:
    """Cancel a run: at once when no worker holds it, else at the next step boundary."""
    require(user, "runs.cancel_run", "cancel runs")
    run = Run.objects.select_for_update(no_key=True).get(pk=run_id)
    require_manage(user, run, "cancel")
    if run.is_finished:
        raise Conflict(f"Run {run.pk} has already finished ({run.get_status_display()}).")
    now = timezone.now()
    run.cancel_requested_at = now
    detail = f"Cancelled by {user.get_username()}."
    # A worker holding the lease may be inside a call: it stops at its next pass. It never
    # overwrites cancel_requested_at (passes write only their own fields).
    held = bool(run.lease_expires_at and run.lease_expires_at > now)
    if held:
        run.save(update_fields=["cancel_requested_at", "updated_at"])
        _enqueue_advance(run.pk)
    else:
        run_finish(run=run, status=RunStatus.CANCELLED, stop_reason=StopKind.CANCELLED.value, detail=detail, now=now)
    audit(actor=user, action=AuditAction.RUN_CANCELLED, target=run, summary=f"Run {run.pk} cancelled",
          details={"while": "running" if held else run.status})
    return run


def run_finish(*, run: Run, status: str, stop_reason: str, detail: str, now=None, attempt=None,
               stall_kind: str = "") -> None:
    """Record why a run stopped and close what it left open. Call inside a transaction."""
    now = now or timezone.now()
    was_finished = run.is_finished
    run.status = status
    run.stop_reason = stop_reason
    run.stop_detail = detail
    run.stall_kind = stall_kind if stop_reason == StopKind.STALLED else ""
    run.stop_attempt = attempt
    run.finished_at = now
    run.lease_owner = ""
    run.lease_expires_at = None
    run.next_action_at = None
    if run.state:
        run.state = {**run.state, "status": status, "stop_reason": stop_reason, "stop_detail": detail}
    # Only the fields a stop owns: a full save would overwrite what others changed meanwhile.
    run.save(update_fields=["status", "stop_reason", "stop_detail", "stall_kind", "stop_attempt", "finished_at",
                            "lease_owner", "lease_expires_at", "next_action_at", "state", "updated_at"])
    run_close_open_records(run_id=run.pk, now=now, newly_finished=not was_finished)


# An intent never resolved. Its fingerprint (runs.failures), set when the intent is written, is this message's.
LOST_CALL_MESSAGE = ("The worker making this call was lost and the run ended before its outcome was resolved: "
                     "the side effect may or may not have happened.")


def run_close_open_records(*, run_id: int, now, newly_finished: bool = True, approvals: bool = True,
                           in_flight: bool = True) -> None:
    """What a finished run leaves open: pending approvals, and intents whose outcome never came.

    Call once the run row says it finished; `newly_finished` False when it had finished before
    (it is then counted on the dashboard already). A caller that knows the run never asked for
    an approval (`approvals` False) or has no call in flight (`in_flight` False) saves those
    statements: a worker finishing a run knows both."""
    # Every way a run stops comes through here: its own span is exported once this commits.
    otel.export_run_on_commit(run_id)
    if approvals:
        # Nobody may approve a step of a finished run.
        Approval.objects.filter(run_id=run_id, state=ApprovalState.PENDING).update(state=ApprovalState.EXPIRED,
                                                                                  decided_at=now)
        Step.objects.filter(run_id=run_id, approval_state=ApprovalState.PENDING).update(
            approval_state=ApprovalState.EXPIRED)
    if in_flight:
        # A call sent by a worker that was lost, never resolved: it stays in the trace as unknown.
        Attempt.objects.filter(run_id=run_id, in_flight=True).update(
            in_flight=False, ended_at=now,
            error_message=LOST_CALL_MESSAGE)
        # A planner call lost with its worker spent tokens all the same: counted before the run closes.
        count_planner_calls_left_in_flight(run_id=run_id, now=now)
    if newly_finished:
        # The dashboard's counts of this run and its attempts, and its usage, in this same transaction.
        rollup.record_run_finished(run_id=run_id)
        usage.record_run_finished(run_id=run_id)
        failures.record_run_finished(run_id=run_id)
        # The apps above (notifications' burn rules, review's scores and queues) learn of it once it has
        # committed, in the run's project: a sweep finishes runs in no project's scope.
        project_id = Run._base_manager.filter(pk=run_id).values_list("project_id", flat=True)[0]
        transaction.on_commit(lambda: _announce_finished(run_id, project_id))


def _announce_finished(run_id: int, project_id: int) -> None:
    with project_scope(project_id):
        run_finished.send_robust(sender=Run, run_id=run_id)


@transaction.atomic
def approval_decide(*, approval_id: int, user, approve: bool, expected_hash: str, channel: str,
                    comment: str = "", expected_revision: int | None = None) -> Approval:
    """Approve or reject one request, from any channel (DecisionChannel). Of two concurrent decisions
    exactly one wins, whichever channels they came through.

    expected_hash is the arguments (or plan) hash the person saw, and expected_revision the plan
    revision they saw it in (the inbox and API know the request only by id, Slack and e-mail carry
    both); if the request now binds to something else, the decision is refused.
    """
    require(user, "runs.decide_approval", "approve or reject steps")
    if channel not in DecisionChannel.values:
        raise InvalidInput(f"Unknown decision channel {channel!r}.")
    if not isinstance(expected_hash, str) or not expected_hash:
        raise InvalidInput("expected_hash is required: send the arguments (or plan) hash you reviewed.",
                           fields={"expected_hash": "required"})
    if not isinstance(comment, str) or text_unstorable(comment):
        raise InvalidInput(f"The comment must be text: {UNSTORABLE}.", fields={"comment": "no NUL characters"})
    try:
        approval = Approval.objects.select_related("run", "decided_by", "revision").get(pk=approval_id)
    except Approval.DoesNotExist:
        raise InvalidInput(f"Approval {approval_id} does not exist.") from None
    refusal = approval_refusal(approval=approval, user=user)
    if refusal:
        raise NotAllowed(refusal)
    bound_hash = approval.arguments_hash or approval.plan_hash
    if expected_hash != bound_hash or (expected_revision is not None
                                       and expected_revision != approval.revision.number):
        raise Conflict("The request changed since you opened it: review the new arguments and decide again.")
    now = timezone.now()
    new_state = ApprovalState.APPROVED if approve else ApprovalState.REJECTED
    # The conditional UPDATE is the arbiter: only a still-pending, unexpired row changes.
    won = Approval.objects.filter(pk=approval.pk, state=ApprovalState.PENDING, expires_at__gt=now).update(
        state=new_state, decided_by=user, decided_at=now, comment=comment[:5000])
    if not won:
        approval.refresh_from_db()
        if approval.state == ApprovalState.PENDING:
            raise Conflict("This approval request has expired.")
        who = approval.decided_by.get_username() if approval.decided_by else "the system"
        raise Conflict(f"Already {approval.state} by {who} at {approval.decided_at:%Y-%m-%d %H:%M:%S} UTC.")
    approval.refresh_from_db()

    rollup.record_decision(approval.pk)  # time to decision on the dashboard, in this transaction
    if approval.step_id:
        Step.objects.filter(pk=approval.step_id).update(approval_state=new_state)
    # Out of awaiting_approval in the same transaction: if the wake-up below is lost (broker
    # down, worker killed), the run is an ordinary queued run the orphan sweep requeues.
    Run.objects.filter(pk=approval.run_id, status=RunStatus.AWAITING_APPROVAL).update(
        status=RunStatus.QUEUED, updated_at=now)
    verb = "approved" if approve else "rejected"
    action = {("step", True): AuditAction.STEP_APPROVED, ("step", False): AuditAction.STEP_REJECTED,
              ("plan", True): AuditAction.PLAN_APPROVED, ("plan", False): AuditAction.PLAN_REJECTED}[
        (approval.kind, approve)]
    audit(actor=user, action=action, target=approval,
          summary=f"{approval.kind.title()} {verb} for run {approval.run_id} (from {DecisionChannel(channel).label})",
          details={"comment": comment, "hash": bound_hash, "run": approval.run_id,
                   "revision": approval.revision.number, "channel": channel})
    _enqueue_advance(approval.run_id)
    # Where else the request was asked (a Slack message) learns of it at once, not at the next tick.
    decided_id = approval.pk
    transaction.on_commit(lambda: approval_decided.send_robust(sender=Approval, approval_id=decided_id,
                                                               channel=channel))
    return approval


# Upper bounds keep every budget a plain JSON number the database and the runtime handle.
BUDGET_MAX_INT = 1_000_000_000
BUDGET_MAX_FLOAT = 1e9
BUDGET_MAX_CAPABILITIES = 500


def _budget_number_error(value, kind: str) -> str | None:
    import math

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number, got {type(value).__name__}"
    if kind == "int" and isinstance(value, float) and not value.is_integer():
        return "must be a whole number"
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    if value < 0:
        return "must be zero or more"
    if value > (BUDGET_MAX_INT if kind == "int" else BUDGET_MAX_FLOAT):
        return f"may be at most {BUDGET_MAX_INT if kind == 'int' else BUDGET_MAX_FLOAT:g}"
    return None


def budget_errors(budgets) -> dict[str, str]:
    """The one budget validator (the start form, the API and evaluations reach it through run_start).

    Checks types and ranges before Budgets.from_dict converts anything, so "inf",
    NaN, 1e309, negatives and a list where an object belongs are a 400, not a 500.
    """
    from dataclasses import fields as dc_fields


    if not isinstance(budgets, dict):
        return {"budgets": "budgets must be an object"}
    known = {f.name: f.type for f in dc_fields(Budgets)}
    unknown = sorted(str(name) for name in budgets if name not in known)
    if unknown:
        return {"budgets": f"unknown budgets: {', '.join(unknown[:10])}"}
    errors = {}
    for name, value in budgets.items():
        key = "budgets." + str(name)
        if name == "max_calls_per_capability":
            if not isinstance(value, dict):
                errors[key] = 'must be an object of capability name to limit, e.g. {"search_documents": 3}'
            elif len(value) > BUDGET_MAX_CAPABILITIES:
                errors[key] = f"at most {BUDGET_MAX_CAPABILITIES} capabilities"
            else:
                problems = {cap: _budget_number_error(limit, "int") for cap, limit in value.items()}
                problems = {cap: p for cap, p in problems.items() if p}
                if problems:
                    errors[key] = "; ".join(f"{cap}: {p}" for cap, p in list(problems.items())[:5])
        else:
            problem = _budget_number_error(value, "int" if known[name] == "int" else "float")
            if problem:
                errors[key] = problem
    if errors:
        return errors
    parsed = Budgets.from_dict(budgets)
    if parsed.deadline_s <= 0:
        errors["budgets.deadline_s"] = "the deadline must be more than 0 seconds"
    if parsed.deadline_s > 7 * 86_400:
        errors["budgets.deadline_s"] = "the deadline may be at most 7 days"
    if parsed.per_call_timeout_s <= 0:
        errors["budgets.per_call_timeout_s"] = "the per-call timeout must be more than 0 seconds"
    return errors


@transaction.atomic
def project_default_budgets() -> dict:
    """The budgets a run of the project in scope starts with where its request names none."""
    found = Project.objects.filter(pk=active_project_id() or 0).values_list("default_budgets", flat=True).first()
    return dict(found) if isinstance(found, dict) else {}


def run_start(*, owner, goal: str, completion: dict, budgets: dict | None = None, planner: str = "rules",
              planner_config: dict | None = None, require_plan_approval: bool = False,
              labels: dict | None = None) -> Run:
    """Validate and queue a run; a worker picks it up once this commits. Budgets the request does not
    name are the project's defaults, then the runtime's."""
    require(owner, "runs.start_run", "start runs")
    budgets = {} if budgets is None else budgets
    if isinstance(budgets, dict):
        budgets = {**project_default_budgets(), **budgets}
    planner_config = planner_config or {}
    errors: dict[str, str] = {}
    if not isinstance(goal, str) or not goal.strip():
        errors["goal"] = "Describe the goal of the run."
    elif len(goal) > 10_000:
        errors["goal"] = "The goal may be at most 10,000 characters."
    # An agent through the gateway may have no completion criteria: its session's end ends the run.
    completion_problems = [] if planner == "gateway" and completion == {} else completion_errors(completion)
    if completion_problems:
        errors["completion"] = "; ".join(completion_problems)
    errors.update(budget_errors(budgets))
    labels = {} if labels is None else labels
    label_problems = labels_errors(labels)
    if label_problems:
        errors["labels"] = "; ".join(label_problems)
    if not isinstance(planner_config, dict):
        errors["planner_config"] = "planner_config must be an object"
    else:
        errors.update(validate_planner_config(planner, planner_config))
    if errors:
        raise InvalidInput("The run could not be started: " + "; ".join(f"{k}: {v}" for k, v in errors.items()),
                           fields=errors)
    parsed_budgets = Budgets.from_dict(budgets)
    now = timezone.now()
    trace_id = random_hex(16)
    run = Run.objects.create(
        goal=goal.strip(), completion=completion, budgets=parsed_budgets.to_dict(), planner=planner,
        planner_config=planner_config, owner=owner, require_plan_approval=require_plan_approval,
        trace_id=trace_id, deadline_at=now + timezone.timedelta(seconds=parsed_budgets.deadline_s), labels=labels,
    )
    RunLabel.objects.bulk_create([RunLabel(run=run, key=k, value=v) for k, v in labels.items()])
    state = RunState.new(run_id=str(run.pk), goal=run.goal, completion=completion or None, budgets=parsed_budgets,
                         started_at=now.timestamp(), trace_id=trace_id, require_plan_approval=require_plan_approval,
                         plan_success_completes=planner != "gateway")
    run.state = checkpoint.head(state)
    Run.objects.filter(pk=run.pk).update(state=run.state)
    audit(actor=owner, action=AuditAction.RUN_STARTED, target=run, summary=f"Run {run.pk} started: {run.goal[:120]}",
          details={"planner": planner, "require_plan_approval": require_plan_approval, "labels": labels})
    _enqueue_advance(run.pk)
    return run


# -- plans from external agents ---------------------------------------------------------------

# A second, delayed advance when a worker held the run as the plan arrived: it may
# already have asked for this revision (and found nothing), and then the immediate
# advance finds the run leased and lets it be; this one picks the plan up. The
# overdue sweep is the last safety net.
PLAN_SUBMIT_FOLLOW_UP_S = 2.0


@transaction.atomic
def plan_submit(*, run_id: int, user, revision: int, steps: list | None = None, no_further_plan: bool = False,
                tokens: int = 0, cost: float = 0.0, reason_code: str = "", reason: str = "",
                planner: str = "external", ahead: bool = False):
    """Store an external agent's plan for the revision its run waits for, and advance the run.

    ahead (with no_further_plan): the run is still carrying out its plan (a call in flight, an
    approval pending); "no further plan" is stored for the next revision it will need
    (next_plan_revision), so it stops there, whenever that is, instead of waiting for a plan.

    Only the run's owner (who must still hold runs.start_run) may submit, or a holder of
    runs.manage_all_runs. The plan is
    not checked here beyond its shape: the runtime validates it exactly as it would a
    plan from any other planner, and a rejection comes back through GET .../planning/.
    """
    require(user, "runs.start_run", "submit plans")
    run = Run.objects.select_for_update(no_key=True).get(pk=run_id)
    require_manage(user, run, "submit plans for")
    # The API speaks for external runs; the gateway (planner="gateway") for its sessions' runs.
    if run.planner != planner:
        raise Conflict(f"Run {run.pk} uses the {run.planner} planner, not the {planner} one.")
    plan = [] if no_further_plan else list(steps or [])
    existing = PlanSubmission.objects.filter(run=run, revision=revision).first()
    if existing is not None and (existing.submitted_by_id, existing.plan, existing.no_further_plan, existing.tokens,
                                 existing.cost, existing.reason_code, existing.reason) == (
            user.pk, plan, no_further_plan, tokens, cost, reason_code or "", reason or ""):
        # The same submission again: a retry after its answer was lost (and with it, maybe, the commit's
        # wake-up). Answered as the first was, once; the run is woken in case it still waits for it.
        if not run.is_finished:
            _enqueue_advance(run.pk)
        return existing
    if run.is_finished:
        raise Conflict(f"Run {run.pk} has already finished ({run.stop_reason}).")
    if existing is not None:
        raise Conflict(f"Revision {revision} of run {run.pk} already has another plan "
                       f"(submitted {existing.submitted_at:%Y-%m-%d %H:%M:%S} UTC).")
    awaited = awaited_revision(run)
    if awaited != revision and not (ahead and no_further_plan and revision == next_plan_revision(run)):
        waiting = f"waits for revision {awaited}" if awaited else "needs no plan now"
        raise Conflict(f"Run {run.pk} {waiting}, not revision {revision}.")
    try:
        with transaction.atomic():
            submission = PlanSubmission.objects.create(
                run=run, revision=revision, plan=plan, tokens=tokens,
                cost=cost, reason_code=reason_code or "", reason=reason or "", no_further_plan=no_further_plan,
                submitted_by=user)
    except IntegrityError:
        raise Conflict(f"Revision {revision} of run {run.pk} already has a plan.") from None
    what = "no further plan" if no_further_plan else f"a plan of {len(steps or [])} steps"
    audit(actor=user, action=AuditAction.PLAN_SUBMITTED, target=submission,
          summary=f"Run {run.pk}: {what} submitted for revision {revision}",
          details={"run": run.pk, "revision": revision, "tokens": tokens, "cost": cost})
    if awaited != revision:
        # Stored ahead: the run asks for it when it gets there, so no wake now (it would hold the
        # lease in the moment an approval's decision may want it); only the follow-up, for a pass
        # that looked for this plan just before it was stored.
        _enqueue_advance(run.pk, countdown=PLAN_SUBMIT_FOLLOW_UP_S)
        return submission
    _enqueue_advance(run.pk)
    if run.lease_expires_at and run.lease_expires_at > timezone.now():
        _enqueue_advance(run.pk, countdown=PLAN_SUBMIT_FOLLOW_UP_S)
    return submission
