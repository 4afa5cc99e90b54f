"""Reading a trace as an incident reviewer needs it: which attempt repeats which, what stopped the run.

Selectors for the trace page. Every function issues a fixed number of queries
whatever the number of attempts in the run.
"""
from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Case, OuterRef, Q, QuerySet, Subquery, When

from runs.models import Approval, Attempt, PlanRevision, Run
from runs.querytools import narrowed
from runs.trace.labels import attempt_label, kind_label
from runtime.budgets import BudgetName
from runtime.stop import StallKind, StopKind, StopReason, stop_reason

# Decisions that end a run, or ask for a plan the run then could not get.
_STOPPING_DECISIONS = {"complete", "stop_budget", "stop_terminal_failure", "stop_stalled", "replan"}


def with_review_fields(attempts: QuerySet[Attempt]) -> QuerySet[Attempt]:
    """Annotate the uid of the earlier attempt a repeat repeats.

    The runtime flags only the repeat itself (repeated_without_progress); the
    earlier attempt is the latest one before it with the same signature and the same
    outcome (status and error code: the stored part of the runtime's fingerprint). The
    subquery runs for flagged rows only and rides the (run, signature) index.
    """
    earlier = (Attempt.objects.filter(run=OuterRef("run"), signature_hash=OuterRef("signature_hash"),
                                      status=OuterRef("status"), error_code=OuterRef("error_code"))
               .filter(Q(started_at__lt=OuterRef("started_at"))
                       | Q(started_at=OuterRef("started_at"), id__lt=OuterRef("id")))
               .order_by("-started_at", "-id").values("uid")[:1])
    return attempts.annotate(
        repeats_uid=Case(When(repeated_without_progress=True, then=Subquery(earlier)), default=None))


def mark_attempts(attempts: list[Attempt], *, run: Run, revision_numbers: dict[int, int],
                  trigger: StopTrigger | None) -> list[Attempt]:
    """Set label, kind_label, is_repeated, repeats (uid, label), is_stop_trigger, is_completion.

    One query, for the labels of the earlier attempts the repeats point at.
    """
    wanted = {a.repeats_uid for a in attempts if getattr(a, "repeats_uid", None)}
    targets = {}
    if wanted:
        for uid, key, rev, number in Attempt.objects.filter(run=run, uid__in=wanted).values_list(
                "uid", "step__key", "step__revision__number", "number"):
            targets[uid] = attempt_label(rev, key, number)
    for a in attempts:
        a.label = attempt_label(revision_numbers.get(a.step.revision_id), a.step.key, a.number)
        a.kind_label = kind_label(a.kind)
        a.is_repeated = a.repeated_without_progress
        repeats_uid = getattr(a, "repeats_uid", None)
        a.repeats = (repeats_uid, targets.get(repeats_uid, repeats_uid)) if repeats_uid else None
        a.is_stop_trigger = bool(trigger and trigger.kind == "attempt" and trigger.attempt_uid == a.uid)
        a.is_completion = bool(trigger and trigger.kind == "completion" and trigger.attempt_uid == a.uid)
    return attempts


@dataclass(frozen=True)
class StopTrigger:
    """What actually stopped the run.

    kind: attempt (an observation and its decision), completion (the attempt that
    met the criteria: not a fault), approval (a person rejected a request),
    revision (a plan failed validation), operator (cancelled), deadline (the
    clock), internal (an error in AgentOps).
    """

    kind: str
    text: str
    attempt_uid: str = ""
    attempt_label: str = ""
    anchor: str = ""  # the element on the trace page to link to


def stop_trigger(*, run: Run, approvals: list[Approval], revisions: list[PlanRevision]) -> StopTrigger | None:
    """No queries beyond run_get's (stop_attempt, its step, revision and decision are joined)."""
    if not run.stop_reason:
        return None
    reason = run.stop_reason
    attempt = run.stop_attempt
    label = attempt_label(attempt.step.revision.number, attempt.step.key, attempt.number) if attempt else ""
    decision = _decision_of(attempt)
    if reason == StopKind.COMPLETED:
        if attempt is None:
            return StopTrigger("completion", "the completion criteria were met")
        return StopTrigger("completion", f"{label} met the completion criteria", attempt.uid, label,
                           f"attempt-{attempt.uid}")
    if reason == StopKind.APPROVAL_REJECTED:
        rejected = [a for a in approvals if a.state == "rejected"]
        if rejected:
            ap = rejected[-1]
            what = _approval_subject(ap)
            who = ap.decided_by.get_username() if ap.decided_by else "an operator"
            return StopTrigger("approval", f"{who} rejected the approval of {what}", anchor=f"approval-{ap.pk}")
        return StopTrigger("approval", "an operator rejected an approval request")
    if reason == StopKind.APPROVAL_EXPIRED:
        expired = [a for a in approvals if a.state == "expired"]
        if expired:
            ap = expired[-1]
            what = _approval_subject(ap)
            return StopTrigger("approval", f"the approval request for {what} expired undecided",
                               anchor=f"approval-{ap.pk}")
        return StopTrigger("approval", "an approval request expired undecided")
    if reason == StopKind.PLAN_REJECTED:
        bad = [r for r in revisions if not r.accepted]
        if bad:
            return StopTrigger("revision", f"plan revision {bad[-1].number} failed validation",
                               anchor=f"revision-{bad[-1].number}")
    if reason == StopKind.CANCELLED:
        return StopTrigger("operator", run.stop_detail or "an operator cancelled the run")
    if reason == StopKind.INTERNAL_ERROR:
        return StopTrigger("internal", "an internal error in AgentOps")
    if attempt is not None and (decision in _STOPPING_DECISIONS or StopReason.parse(reason).kind is StopKind.TERMINAL_FAILURE):
        return StopTrigger("attempt", f"{label} ({attempt.status}{' ' + attempt.error_code if attempt.error_code else ''})",
                           attempt.uid, label, f"attempt-{attempt.uid}")
    if reason == stop_reason(StopKind.BUDGET_EXHAUSTED, BudgetName.DEADLINE):
        return StopTrigger("deadline", "the deadline passed (no attempt caused it)")
    return StopTrigger("internal", run.stop_detail or reason)


def _decision_of(attempt: Attempt | None) -> str:
    if attempt is None:
        return ""
    try:
        return attempt.decision.decision
    except Attempt.decision.RelatedObjectDoesNotExist:
        return ""


def stall_kind(run: Run) -> str:
    """The kind of stall (runtime StallKind values): the Run's own field, else read from the
    stop detail of a run recorded before the field existed."""
    if run.stop_reason != StopKind.STALLED:
        return ""
    kind = getattr(run, "stall_kind", "") or StallKind.in_detail(run.stop_detail or "")
    return str(kind or "")


def last_failure(*, run: Run) -> Attempt | None:
    """The run's last failing observation (one query, backwards along the (run, started_at) index)."""
    return (Attempt.objects.filter(run=run).exclude(status="ok").select_related("step__revision")
            .only("uid", "number", "status", "error_code", "error_message", "capability_name", "started_at",
                  "step__key", "step__revision__number")
            .order_by("-started_at", "-id").first())


def first_failure_uid(*, run: Run) -> str | None:
    return (Attempt.objects.filter(run=run).exclude(status="ok").order_by("started_at", "id")
            .values_list("uid", flat=True).first())


@dataclass(frozen=True)
class TraceFilters:
    capability: str = ""
    status: str = ""
    error_code: str = ""
    repeated: bool = False

    @property
    def active(self) -> bool:
        return bool(self.capability or self.status or self.error_code or self.repeated)


def filter_attempts(attempts: QuerySet[Attempt], filters: TraceFilters) -> QuerySet[Attempt]:
    return narrowed(attempts, filters, {"capability": "capability_name", "status": "status",
                                        "error_code": "error_code", "repeated": "repeated_without_progress"})


def _approval_subject(approval) -> str:
    """What an approval request was for, in the stop box's words."""
    if approval.kind == "step" and approval.step:
        return f"step {approval.step.key} ({approval.capability_name})"
    return f"plan revision {approval.revision.number}"
