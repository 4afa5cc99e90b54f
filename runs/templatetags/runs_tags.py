"""Presentation helpers for run pages: plain-words stop reasons, durations, JSON.

Everything that renders model or tool output returns plain strings (autoescaped
by the template) or builds HTML with format_html: output is untrusted.
"""
from __future__ import annotations

import json
from datetime import timedelta

from django import template
from django.utils.html import format_html, format_html_join

from runs.choices import STOP_REASON_VALUES

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
