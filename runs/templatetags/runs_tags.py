"""Presentation helpers for run pages: plain-words stop reasons, durations, JSON.

Everything that renders model or tool output returns plain strings (autoescaped
by the template) or builds HTML with format_html: output is untrusted.
"""
from __future__ import annotations

import json
from datetime import UTC, timedelta

from django import template
from django.utils.html import format_html, format_html_join

from runtime.budgets import BudgetName
from runtime.observation import ErrorCode
from runtime.stop import QuotaName, StallKind, StopKind, StopReason

register = template.Library()

# Plain words for each budget, failure and stall kind: keyed by the runtime's enums, every member worded.
_BUDGET_WORDS = {
    BudgetName.ITERATIONS: "the run used all of its iterations",
    BudgetName.REVISIONS: "the planner used up its allowed plan revisions",
    BudgetName.TOOL_CALLS: "the run reached its limit of tool calls",
    BudgetName.CAPABILITY_CALLS: "a capability reached its per-capability call limit",
    BudgetName.DEADLINE: "the run's deadline passed",
    BudgetName.TOKENS: "the run used up its token budget",
    BudgetName.COST: "the run reached its cost limit",
    BudgetName.RETRIES: "the run used up its retry budget",
    BudgetName.SIDE_EFFECT_RATE: "too many side effects in too short a time",
}
_FAILURE_WORDS = {
    ErrorCode.TIMEOUT: "a call timed out",
    ErrorCode.CONNECTION_ERROR: "a capability could not be reached",
    ErrorCode.RATE_LIMITED: "a capability kept refusing calls as rate limited",
    ErrorCode.SERVER_ERROR: "a capability kept failing with server errors",
    ErrorCode.PERMISSION_DENIED: "a capability refused the call (permission denied)",
    ErrorCode.NOT_FOUND: "a capability reported that what was asked for does not exist",
    ErrorCode.INVALID_ARGUMENTS: "a capability rejected the call's arguments",
    ErrorCode.CONFLICT: "the target's state conflicted with the request",
    ErrorCode.OUTCOME_UNKNOWN: "a side effect may or may not have happened and could not be reconciled",
    ErrorCode.TOOL_ERROR: "a capability reported a failure it did not explain",
}
_KIND_WORDS = {
    StopKind.COMPLETED: "Completed: the completion criteria were met",
    StopKind.STALLED: "Stopped: the run made no progress (the same action gave the same result, or the planner had "
               "nothing more to try)",
    StopKind.PLAN_REJECTED: "Stopped: the planner's plan failed validation and was not corrected",
    StopKind.APPROVAL_REJECTED: "Stopped: an operator rejected an approval request",
    StopKind.APPROVAL_EXPIRED: "Stopped: an approval request expired before anyone decided it",
    StopKind.CANCELLED: "Cancelled by an operator",
    StopKind.INTERNAL_ERROR: "Stopped: an internal error in AgentOps",
    StopKind.SESSION_ENDED: "Stopped: the agent's MCP session ended (closed by the client, or idle) while the run "
                     "waited for its next call",
}
_QUOTA_WORDS = {
    QuotaName.RUNS_PER_DAY: "the project started as many runs today as its daily quota allows",
    QuotaName.TOKENS_PER_DAY: "the project's runs spent today's token quota",
    QuotaName.COST_PER_DAY: "the project's runs spent today's cost quota",
}
STOP_REASON_TEXT = {
    **{StopReason(kind): text for kind, text in _KIND_WORDS.items()},
    **{StopReason(StopKind.BUDGET_EXHAUSTED, name): f"Stopped: {text}" for name, text in _BUDGET_WORDS.items()},
    **{StopReason(StopKind.TERMINAL_FAILURE, code): f"Stopped: {text}" for code, text in _FAILURE_WORDS.items()},
    **{StopReason(StopKind.QUOTA_EXHAUSTED, name): f"Stopped: {text}" for name, text in _QUOTA_WORDS.items()},
}
assert set(STOP_REASON_TEXT) == set(StopReason.every()), "every stop reason needs plain words"


STALL_KIND_TEXT = {
    StallKind.REPEATED_WITHOUT_PROGRESS: "the same action gave the same result, with nothing changed in between",
    StallKind.PLANNER_EXHAUSTED: "the planner had nothing more to try",
}
assert set(STALL_KIND_TEXT) == set(StallKind), "every stall kind needs plain words"


@register.filter
def stall_kind_text(value: str) -> str:
    try:
        return STALL_KIND_TEXT[StallKind(value)]
    except ValueError:
        return ""


@register.filter
def completed_run(run) -> bool:
    """Whether the run stopped because its completion criteria were met."""
    return run.stop_reason == StopKind.COMPLETED


@register.filter
def stop_code(kind_name: str) -> str:
    """A stop kind's code by its member name, for a sentence naming it (`"APPROVAL_REJECTED"|stop_code`):
    the code itself lives in the runtime's vocabulary only."""
    return StopKind[kind_name].value


@register.filter
def run_stop_text(run) -> str:
    """The headline for a finished run: a stalled run says which way it stalled."""
    if run.stop_reason == StopKind.STALLED and getattr(run, "stall_kind", ""):
        return f"Stopped: the run made no progress ({stall_kind_text(run.stall_kind)})"
    return stop_reason_text(run.stop_reason)


@register.filter
def stop_reason_text(value: str) -> str:
    if not value:
        return ""
    try:
        return STOP_REASON_TEXT[StopReason.parse(value)]
    except (KeyError, ValueError):
        return f"Stopped: {value.replace('_', ' ')}"


@register.filter
def duration(value) -> str:
    """Seconds (or a timedelta) in words a person reads at a glance: 850 ms, 4.2 s, 3 min 5 s."""
    if value is None or value == "":
        return "—"
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{hours // 24} d {hours % 24} h"


@register.filter
def signed_duration(value) -> str:
    """A difference of two durations: +850 ms, −4.2 s."""
    if value is None or value == "":
        return ""
    seconds = float(value)
    return ("−" if seconds < 0 else "+") + duration(abs(seconds))


@register.filter
def run_duration(run) -> str:
    if not run.started_at:
        return "—"
    if not run.finished_at:
        return "running"
    return duration(run.finished_at - run.started_at)


@register.filter
def pretty_json(value) -> str:
    """Indented JSON as a plain string: the template escapes it."""
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


@register.filter
def compact_json(value, limit=120) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    limit = int(limit)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@register.filter
def money(value) -> str:
    try:
        return f"{float(value):.4f}".rstrip("0").rstrip(".") or "0"
    except (TypeError, ValueError):
        return "—"


@register.filter
def percent(value, digits=1) -> str:
    if value is None:
        return "—"
    return f"{float(value) * 100:.{int(digits)}f} %"


@register.simple_tag
def kv_table(value):
    """Arguments as a key/value table; nested values as indented JSON. All of it escaped."""
    if not isinstance(value, dict):
        return format_html("<pre>{}</pre>", pretty_json(value))
    if not value:
        return format_html('<p class="muted small">{}</p>', "No arguments.")
    rows = format_html_join(
        "", "<tr><th scope=\"row\">{}</th><td>{}</td></tr>",
        ((key, format_html("<pre>{}</pre>", pretty_json(item)) if isinstance(item, (dict, list))
          else ("null" if item is None else str(item))) for key, item in value.items()),
    )
    return format_html('<table class="kv-table">{}</table>', rows)


@register.filter
def humanize_key(value) -> str:
    """A stored key as words: "tool_calls" -> "Tool calls"."""
    text = str(value)
    for unit in ("_seconds", "_s"):  # the value is shown with its unit
        if text.endswith(unit) and len(text) > len(unit):
            text = text[: -len(unit)]
    text = text.replace("_", " ").strip()
    return text[:1].upper() + text[1:]


# Keys whose numbers are seconds or moments; everything else is shown as counted.
_SECONDS_SUFFIXES = ("_s", "_seconds", "latency", "elapsed", "duration")
_MOMENT_SUFFIXES = ("_at", "_time", "timestamp", "started", "ended", "now")


def _human_scalar(key: str, value) -> str:
    lowered = key.lower()
    if isinstance(value, bool) or value is None:
        return "yes" if value is True else "no" if value is False else "—"
    if isinstance(value, (int, float)):
        if lowered.endswith(_MOMENT_SUFFIXES) and 1e8 < value < 1e11:
            from datetime import datetime

            return datetime.fromtimestamp(value, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        if lowered.endswith(_SECONDS_SUFFIXES) or lowered in ("deadline", "time"):
            return duration(value)
        if isinstance(value, float):
            return f"{value:.4f}".rstrip("0").rstrip(".") or "0"
        return f"{value:,}"
    return str(value)


def _json_view(value, key: str = "", depth: int = 0):
    if isinstance(value, dict):
        if not value:
            return format_html('<span class="muted">{}</span>', "empty")
        rows = format_html_join("", '<div class="jv-row"><dt>{}</dt><dd>{}</dd></div>',
                                # Top-level keys are ours (usage, output fields): words. Deeper keys
                                # are often names (capabilities, ids): shown as they are.
                                ((humanize_key(k) if depth == 0 else str(k), _json_view(v, str(k), depth + 1))
                                 for k, v in value.items()))
        body = format_html('<dl class="jv">{}</dl>', rows)
    elif isinstance(value, list):
        if not value:
            return format_html('<span class="muted">{}</span>', "none")
        items = format_html_join("", "<li>{}</li>", ((_json_view(v, key, depth + 1),) for v in value[:200]))
        more = format_html('<li class="muted">… {} more</li>', len(value) - 200) if len(value) > 200 else ""
        body = format_html('<ol class="jv">{}{}</ol>', items, more)
    else:
        return _human_scalar(key, value)
    if depth == 0:
        return body
    count = len(value)
    return format_html('<details class="jv"{}><summary>{} {}</summary>{}</details>', " open" if depth < 2 else "",
                       count, "field" + ("s" if count != 1 else "") if isinstance(value, dict)
                       else "item" + ("s" if count != 1 else ""), body)


@register.simple_tag
def json_view(value):
    """Collapsible, human-unit view of JSON (arguments, outputs, usage): words for keys, rounded
    seconds, ISO times for Unix timestamps. All of it escaped; the raw JSON stays one click away."""
    return format_html('<div class="json-view">{}<details class="raw-json"><summary>Raw JSON</summary><pre>{}</pre>'
                       '</details></div>', _json_view(value), pretty_json(value))


@register.filter
def approval_subject(approval) -> str:
    """What a request is about, for button names and confirmations: "step s1 (create_ticket) of run #5"."""
    if approval.kind == "step" and approval.step_id:
        capability = approval.capability_name or approval.step.capability_name
        return f"step {approval.step.key} ({capability}) of run #{approval.run_id}"
    return f"the plan (revision {approval.revision.number}) of run #{approval.run_id}"
