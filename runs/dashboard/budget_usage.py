"""Each budget of a run: its limit, what was used, and whether it stopped the run.

The one computation behind the API's `budget_usage` and the run page's gauges, so the
two can never disagree. Usage is the runtime's own count from the run's checkpoint
(what the budgets were enforced against), with the stored counters as a fallback for
runs that have none.
"""
from __future__ import annotations

from django.utils import timezone

from runtime.budgets import SIDE_EFFECT_WINDOW_S
from runtime.stop import StopReason

# (budget name as in stop reasons, limit key in Run.budgets, usage key in the checkpoint, Run field)
_COUNTS = (
    ("iterations", "max_iterations", "iterations", "iterations"),
    ("revisions", "max_revisions", "revisions", None),
    ("tool_calls", "max_tool_calls", "tool_calls", "tool_calls"),
    ("tokens", "max_tokens", "tokens", "tokens"),
    ("cost", "max_cost", "cost", "cost"),
    ("retries", "max_retries", "retries", "retries"),
)


def run_budget_usage(run) -> list[dict]:
    """Rows: name, used, limit, fraction (0..1), exhausted (stopped the run); a
    capability_calls row also names its capability."""
    budgets = run.budgets if isinstance(run.budgets, dict) else {}
    usage = (run.state or {}).get("usage") or {} if isinstance(run.state, dict) else {}
    stopped_by = (reason := StopReason.of(run.stop_reason)) and reason.budget
    rows = []
    for name, key, usage_key, field in _COUNTS:
        row = _row(name, _used(run, usage, usage_key, field), budgets.get(key), stopped_by)
        if usage.get(f"estimated_{usage_key}"):
            # Planner calls lost with their worker, counted at their maximum: said apart from the answers'.
            row["estimated"] = usage[f"estimated_{usage_key}"]
        rows.append(row)
    calls = usage.get("calls_per_capability") or {}
    per_capability = budgets.get("max_calls_per_capability") or {}
    if isinstance(per_capability, dict):
        for capability, limit in sorted(per_capability.items()):
            used = int(calls.get(capability, 0))
            row = _row("capability_calls", used, limit, stopped_by)
            # Only the capability whose limit was reached stopped the run.
            row["exhausted"] = row["exhausted"] and limit is not None and used >= limit
            rows.append({**row, "capability": capability})
    rows.append(_row("side_effect_rate", _side_effects_in_window(run, usage),
                     budgets.get("max_side_effects_per_minute"), stopped_by))
    if budgets.get("deadline_s"):
        end = run.finished_at or timezone.now()
        begin = run.started_at or run.created_at
        rows.append(_row("deadline", round((end - begin).total_seconds(), 1), budgets["deadline_s"], stopped_by))
    return rows


def revisions_used(run) -> int:
    """Plan revisions: replans after the first plan, as the max_revisions budget counts them."""
    usage = (run.state or {}).get("usage") or {} if isinstance(run.state, dict) else {}
    return _used(run, usage, "revisions", None)


def _used(run, usage: dict, key: str, field: str | None):
    if key in usage:
        return usage[key]
    if field is None:  # revisions: the stored counter holds plans, the first included
        return max(0, run.revisions - 1)
    return getattr(run, field)


def _side_effects_in_window(run, usage: dict) -> int:
    """Commits in the rate window that ended when the run did (or now)."""
    times = usage.get("side_effect_times")
    if times is None:
        return run.side_effects_committed
    end = (run.finished_at or timezone.now()).timestamp()
    return sum(1 for t in times if end - float(t) < SIDE_EFFECT_WINDOW_S)


def _row(name, used, limit, stopped_by) -> dict:
    fraction = min(1.0, used / limit) if limit else 0.0
    return {"name": name, "used": used, "limit": limit, "fraction": round(fraction, 3),
            "exhausted": stopped_by == name}
