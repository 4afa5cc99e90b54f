"""What each kind of rule watches for, and the checks on its settings.

`find_events` is called by the scheduler: it looks at recent rows (never the whole
history) and returns Notices, each with a key that names the event exactly, so
finding an event again on the next tick writes nothing new to the outbox.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Q

from core.choices import LIVE_STATUSES
from notifications.models import RuleEvent
from runs.dashboard.budget_usage import run_budget_usage
from runs.failures import normalize_message
from runs.labels import KEY_PATTERN, KEY_RULE, runs_with_labels
from runs.models import Approval, Attempt, FailureGroup, Run
from runtime.budgets import BudgetName
from runtime.stop import StopKind, StopReason

# How far back a tick looks for approvals requested and runs stopped. Nothing that happened
# before the rule existed is ever notified (a new rule does not replay history): every finder
# looks only after the rule's creation.
LOOKBACK = timedelta(hours=6)
MAX_EVENTS_PER_RULE = 500
BUDGETS = tuple(b.value for b in (BudgetName.ITERATIONS, BudgetName.REVISIONS, BudgetName.TOOL_CALLS,
                                   BudgetName.TOKENS, BudgetName.COST, BudgetName.RETRIES, BudgetName.DEADLINE))
STOP_REASONS_HELP = (f"a list of stop reasons (e.g. {StopKind.STALLED}, "
                     f"{StopReason(StopKind.BUDGET_EXHAUSTED, BudgetName.COST)}, "
                     f"or {StopKind.BUDGET_EXHAUSTED} for all budgets); empty: any")

DEFAULTS = {
    RuleEvent.APPROVAL_REQUESTED: {},
    RuleEvent.APPROVAL_EXPIRING: {"within_s": 900},
    # Escalation: still undecided this long after it was asked, the rule's channels (the next group) are asked.
    RuleEvent.APPROVAL_UNDECIDED: {"after_minutes": 30, "capabilities": []},
    RuleEvent.RUN_STOPPED: {"stop_reasons": []},
    RuleEvent.BUDGET_THRESHOLD: {"percent": 80, "budgets": []},
    RuleEvent.STALL_RATE: {"threshold": 0.2, "window_s": 3600, "min_runs": 5},
    # Evaluated when a run finishes (notifications.burn), from the usage rollup; never by the tick.
    RuleEvent.USAGE_BURN: {"measure": "cost", "limit": 10.0, "window_hours": 24, "per": "owner", "label_key": ""},
    RuleEvent.FAILURE_GROUP_NEW: {"capabilities": []},
    # Sent when the comment is written (notifications.mentions), never by the tick.
    RuleEvent.MENTIONED: {},
}
BURN_MEASURES = ("tokens", "cost")
BURN_PER = ("owner", "label")


@dataclass(frozen=True)
class Notice:
    key: str
    subject: str
    body: str
    link: str = ""
    run_id: int | None = None
    approval_id: int | None = None  # set when the notice asks for a decision (Slack buttons, e-mail links)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def params_errors(event: str, params: Any) -> dict[str, str]:
    """Field errors for a rule's settings ({} when they are fine)."""
    if event not in RuleEvent.values:
        return {"event": f"choose one of {', '.join(RuleEvent.values)}"}
    if not isinstance(params, dict):
        return {"params": "settings must be an object"}
    allowed = set(DEFAULTS[event])
    errors = {f"params.{k}": "not a setting of this kind of rule" for k in set(params) - allowed}
    p = {**DEFAULTS[event], **params}
    if event == RuleEvent.APPROVAL_EXPIRING and not (_number(p["within_s"]) and 0 < p["within_s"] <= 7 * 86_400):
        errors["params.within_s"] = "seconds before expiry, more than 0 and at most 7 days"
    if event == RuleEvent.APPROVAL_UNDECIDED:
        if not (_number(p["after_minutes"]) and 1 <= p["after_minutes"] <= 7 * 1440):
            errors["params.after_minutes"] = "minutes after the request, from 1 to 7 days"
        names = p["capabilities"]
        if not isinstance(names, list) or any(not isinstance(n, str) or not n for n in names) or len(names) > 100:
            errors["params.capabilities"] = "a list of capability names (empty: any capability, and plans)"
    if event == RuleEvent.FAILURE_GROUP_NEW:
        names = p["capabilities"]
        if not isinstance(names, list) or any(not isinstance(n, str) or not n for n in names) or len(names) > 100:
            errors["params.capabilities"] = "a list of capability names (empty: any capability)"
    if event == RuleEvent.RUN_STOPPED:
        reasons = p["stop_reasons"]
        known = {str(r) for r in StopReason.every()} | {k.value for k in StopKind}
        if not isinstance(reasons, list) or any(not isinstance(r, str) or r not in known for r in reasons):
            errors["params.stop_reasons"] = STOP_REASONS_HELP
    if event == RuleEvent.BUDGET_THRESHOLD:
        if not (_number(p["percent"]) and 0 < p["percent"] <= 100):
            errors["params.percent"] = "a percentage, more than 0 and at most 100"
        if not isinstance(p["budgets"], list) or any(b not in BUDGETS for b in p["budgets"]):
            errors["params.budgets"] = f"a list of budgets from {', '.join(BUDGETS)}; empty: any"
    if event == RuleEvent.STALL_RATE:
        if not (_number(p["threshold"]) and 0 <= p["threshold"] < 1):
            errors["params.threshold"] = "a share of finished runs, from 0 to below 1 (0.2 = 20 %)"
        if not (_number(p["window_s"]) and 60 <= p["window_s"] <= 30 * 86_400):
            errors["params.window_s"] = "the window in seconds, from 60 s to 30 days"
        if not (isinstance(p["min_runs"], int) and not isinstance(p["min_runs"], bool) and p["min_runs"] >= 1):
            errors["params.min_runs"] = "at least 1 finished run"
    if event == RuleEvent.USAGE_BURN:
        errors.update(_burn_errors(p))
    return errors


def _burn_errors(p: dict) -> dict[str, str]:
    errors = {}
    if p["measure"] not in BURN_MEASURES:
        errors["params.measure"] = f"one of {', '.join(BURN_MEASURES)}"
    if not (_number(p["limit"]) and 0 < p["limit"] <= 1e15):
        errors["params.limit"] = "the tokens or cost the window may hold, more than 0"
    if not (isinstance(p["window_hours"], int) and not isinstance(p["window_hours"], bool)
            and 1 <= p["window_hours"] <= 720):
        errors["params.window_hours"] = "whole hours, from 1 to 720 (30 days)"
    if p["per"] not in BURN_PER:
        errors["params.per"] = "owner (each run's owner) or label (each value of label_key)"
    key = p["label_key"]
    if p["per"] == "label" and not (isinstance(key, str) and KEY_PATTERN.match(key)):
        errors["params.label_key"] = f"the label key whose values are summed apart: {KEY_RULE}"
    elif p["per"] != "label" and key:
        errors["params.label_key"] = "only with per=label"
    return errors


def full_params(rule) -> dict[str, Any]:
    return {**DEFAULTS[rule.event], **(rule.params or {})}


# -- finding events --------------------------------------------------------------------------------

def find_events(rule, now: datetime) -> list[Notice]:
    finder = {RuleEvent.APPROVAL_REQUESTED: _approvals_requested, RuleEvent.APPROVAL_EXPIRING: _approvals_expiring,
              RuleEvent.APPROVAL_UNDECIDED: _approvals_undecided,
              RuleEvent.RUN_STOPPED: _runs_stopped, RuleEvent.BUDGET_THRESHOLD: _budgets_passed,
              RuleEvent.STALL_RATE: _stall_rate, RuleEvent.USAGE_BURN: _evaluated_when_runs_finish,
              RuleEvent.FAILURE_GROUP_NEW: _failure_groups_new,
              RuleEvent.MENTIONED: _evaluated_when_written}[rule.event]
    return finder(rule, full_params(rule), now)


def _since(rule, now: datetime) -> datetime:
    return max(rule.created_at, now - LOOKBACK)


def _runs(rule):
    runs = Run.objects.filter(evaluation__isnull=True)
    return runs_with_labels(runs, tuple((rule.labels or {}).items()))


def _link(path: str) -> str:
    return settings.AGENTOPS_BASE_URL + path


def _approval_text(approval) -> str:
    what = f"step {approval.step.key} calls {approval.capability_name}" if approval.kind == "step" else "its plan"
    return (f"Run #{approval.run_id} ({approval.run.goal[:200]}) waits for approval: {what}.\n"
            f"Expires {approval.expires_at:%Y-%m-%d %H:%M} UTC.")


def _pending_approvals(rule):
    return (Approval.objects.filter(state="pending", run__in=_runs(rule).values("pk"))
            .select_related("run", "step").order_by("requested_at", "id"))


def _asking(approval, key: str, subject: str) -> Notice:
    # The link opens the approval in the inbox, behind the login; the Slack and e-mail senders add
    # their own decision controls (signed, bound to the arguments) from the approval.
    return Notice(f"approval:{approval.pk}:{key}", f"{subject}: run #{approval.run_id}", _approval_text(approval),
                  _link(f"/runs/approvals/#approval-{approval.pk}"), approval.run_id, approval.pk)


def _approvals_requested(rule, p, now) -> list[Notice]:
    approvals = _pending_approvals(rule).filter(requested_at__gte=_since(rule, now))[:MAX_EVENTS_PER_RULE]
    return [_asking(a, "requested", "Approval needed") for a in approvals]


def _approvals_expiring(rule, p, now) -> list[Notice]:
    # Coming within `within_s` of its expiry is the event: it must happen after the rule was made.
    within = timedelta(seconds=p["within_s"])
    approvals = _pending_approvals(rule).filter(expires_at__gt=now, expires_at__lte=now + within,
                                                expires_at__gte=rule.created_at + within)
    return [_asking(a, "expiring", "Approval expires soon") for a in approvals[:MAX_EVENTS_PER_RULE]]


def _approvals_undecided(rule, p, now) -> list[Notice]:
    """Escalation: a request still pending `after_minutes` after it was asked (and after the rule was made)."""
    after = timedelta(minutes=p["after_minutes"])
    approvals = _pending_approvals(rule).filter(expires_at__gt=now, requested_at__lte=now - after,
                                                requested_at__gte=rule.created_at - after)
    if p["capabilities"]:
        approvals = approvals.filter(kind="step", capability_name__in=p["capabilities"])
    return [_asking(a, f"undecided:{p['after_minutes']:g}m", f"Still undecided after {p['after_minutes']:g} min")
            for a in approvals[:MAX_EVENTS_PER_RULE]]


def _runs_stopped(rule, p, now) -> list[Notice]:
    runs = _runs(rule).filter(finished_at__gte=_since(rule, now), finished_at__lte=now)
    reasons = p["stop_reasons"]
    if reasons:
        wanted = Q()
        for reason in reasons:
            wanted |= Q(stop_reason=reason) | Q(stop_reason__startswith=StopReason.prefix(reason))
        runs = runs.filter(wanted)
    runs = runs.only("pk", "goal", "stop_reason", "stop_detail").order_by("finished_at", "id")
    return [Notice(f"run:{r.pk}:stopped", f"Run #{r.pk} stopped: {r.stop_reason}",
                   f"{r.goal[:200]}\n{r.stop_reason}: {r.stop_detail[:500]}", _link(f"/runs/{r.pk}/"), r.pk)
            for r in runs[:MAX_EVENTS_PER_RULE]]


def _budgets_passed(rule, p, now) -> list[Notice]:
    notices = []
    wanted = set(p["budgets"]) or set(BUDGETS)
    # When a run passed its share is not recorded: only runs started after the rule was made count.
    runs = (_runs(rule).filter(status__in=LIVE_STATUSES, created_at__gte=rule.created_at).defer("state")
            .order_by("-updated_at"))
    for run in runs[:MAX_EVENTS_PER_RULE]:
        for row in run_budget_usage(run):
            if row["name"] not in wanted or not row["limit"]:
                continue
            if 100 * row["used"] / row["limit"] >= p["percent"]:
                notices.append(Notice(
                    f"run:{run.pk}:budget:{row['name']}:{p['percent']}",
                    f"Run #{run.pk} used {p['percent']:g}% of its {row['name']} budget",
                    f"{run.goal[:200]}\n{row['name']}: {row['used']} of {row['limit']}.", _link(f"/runs/{run.pk}/"),
                    run.pk))
    return notices


def _stall_rate(rule, p, now) -> list[Notice]:
    window = timedelta(seconds=p["window_s"])
    # Only runs finished since the rule was made: a rule made after a bad hour does not report it.
    counts = _runs(rule).filter(finished_at__gt=max(now - window, rule.created_at), finished_at__lte=now).aggregate(
        finished=Count("id"), stalled=Count("id", filter=Q(stop_reason=StopKind.STALLED.value)))
    finished, stalled = counts["finished"], counts["stalled"]
    if finished < p["min_runs"] or stalled / finished <= p["threshold"]:
        return []
    # At most one notice per window-long period.
    period = int(now.timestamp() // p["window_s"])
    return [Notice(f"stall_rate:{period}", f"Stall rate {stalled / finished:.0%} over the last {window}",
                   f"{stalled} of {finished} runs finished in the last {window} stalled "
                   f"(threshold {p['threshold']:.0%}).", _link("/runs/dashboard/"))]


def _evaluated_when_runs_finish(rule, p, now) -> list[Notice]:
    """Usage burn rules are looked at when a run finishes (notifications.burn), not on the tick."""
    return []


def _evaluated_when_written(rule, p, now) -> list[Notice]:
    """Mentions are sent when the comment is written (notifications.mentions), not on the tick."""
    return []


def _failure_groups_new(rule, p, now) -> list[Notice]:
    """A failure group made since the rule (a group is made when the first run that hit it finishes:
    runs.failures); with labels, the labels of that run."""
    groups = FailureGroup.objects.filter(created_at__gte=_since(rule, now), created_at__lte=now)
    if rule.labels:
        groups = groups.filter(first_run_id__in=_runs(rule).values("pk"))
    if p["capabilities"]:
        groups = groups.filter(capability_name__in=p["capabilities"])
    found = list(groups.order_by("created_at", "id")[:MAX_EVENTS_PER_RULE])
    messages = dict(Attempt.objects.filter(pk__in=[g.sample_attempt_id for g in found])
                    .values_list("pk", "error_message"))
    notices = []
    for g in found:
        http = f" (HTTP {g.http_status})" if g.http_status else ""
        message = normalize_message(messages.get(g.sample_attempt_id, ""))
        notices.append(Notice(
            f"failure_group:{g.fingerprint}:new", f"New failure: {g.capability_name} {g.error_code}{http}",
            f"{g.capability_name} failed with {g.error_code} ({g.error_category or 'no category'}){http}: "
            f"{message[:300]}\nFirst seen {g.first_seen:%Y-%m-%d %H:%M} UTC in run #{g.first_run_id}; "
            f"{g.attempts} failure(s) in {g.runs} run(s) so far.",
            _link(f"/runs/calls/?fingerprint={g.fingerprint}"), g.first_run_id))
    return notices
