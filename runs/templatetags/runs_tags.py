"""Presentation helpers for run pages: plain-words stop reasons, durations, JSON.

Everything that renders model or tool output returns plain strings (autoescaped
by the template) or builds HTML with format_html: output is untrusted.
"""
from __future__ import annotations

import json
from datetime import UTC, timedelta

from django import template
from django.utils.html import format_html, format_html_join

from core.choices import STOP_REASON_VALUES

register = template.Library()

_BUDGET_WORDS = {
    "iterations": "the run used all of its iterations",
    "revisions": "the planner used up its allowed plan revisions",
    "tool_calls": "the run reached its limit of tool calls",
    "capability_calls": "a capability reached its per-capability call limit",
    "deadline": "the run's deadline passed",
    "tokens": "the run used up its token budget",
    "cost": "the run reached its cost limit",
    "retries": "the run used up its retry budget",
    "side_effect_rate": "too many side effects in too short a time",
}
_FAILURE_WORDS = {
    "timeout": "a call timed out",
    "connection_error": "a capability could not be reached",
    "rate_limited": "a capability kept refusing calls as rate limited",
    "server_error": "a capability kept failing with server errors",
    "permission_denied": "a capability refused the call (permission denied)",
    "not_found": "a capability reported that what was asked for does not exist",
    "invalid_arguments": "a capability rejected the call's arguments",
    "conflict": "the target's state conflicted with the request",
    "outcome_unknown": "a side effect may or may not have happened and could not be reconciled",
    "tool_error": "a capability reported a failure it did not explain",
}
STOP_REASON_TEXT = {
    "completed": "Completed: the completion criteria were met",
    "stalled": "Stopped: the run made no progress (the same action gave the same result, or the planner had "
               "nothing more to try)",
    "plan_rejected": "Stopped: the planner's plan failed validation and was not corrected",
    "approval_rejected": "Stopped: an operator rejected an approval request",
    "approval_expired": "Stopped: an approval request expired before anyone decided it",
    "cancelled": "Cancelled by an operator",
    "internal_error": "Stopped: an internal error in AgentOps",
    "session_ended": "Stopped: the agent's MCP session ended (closed by the client, or idle) while the run "
                     "waited for its next call",
    **{f"budget_exhausted:{name}": f"Stopped: {text}" for name, text in _BUDGET_WORDS.items()},
    **{f"terminal_failure:{code}": f"Stopped: {text}" for code, text in _FAILURE_WORDS.items()},
}
assert set(STOP_REASON_VALUES) <= set(STOP_REASON_TEXT), "every stop reason needs plain words"


STALL_KIND_TEXT = {
    "repeated_without_progress": "the same action gave the same result, with nothing changed in between",
    "planner_exhausted": "the planner had nothing more to try",
}


@register.filter
def stall_kind_text(value: str) -> str:
    return STALL_KIND_TEXT.get(value or "", "")


@register.filter
def run_stop_text(run) -> str:
    """The headline for a finished run: a stalled run says which way it stalled."""
    if run.stop_reason == "stalled" and getattr(run, "stall_kind", ""):
        return f"Stopped: the run made no progress ({stall_kind_text(run.stall_kind)})"
    return stop_reason_text(run.stop_reason)


@register.filter
def stop_reason_text(value: str) -> str:
    if not value:
        return ""
    return STOP_REASON_TEXT.get(value, f"Stopped: {value.replace('_', ' ')}")


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
