"""Each budget of a run: its limit, what was used, and whether it stopped the run."""
from __future__ import annotations

from django.utils import timezone

# (budget name as in stop reasons, limit key in Run.budgets, usage attribute or callable)
_BUDGETS = (
    ("iterations", "max_iterations", "iterations"),
    ("revisions", "max_revisions", "revisions"),
    ("tool_calls", "max_tool_calls", "tool_calls"),
    ("tokens", "max_tokens", "tokens"),
    ("cost", "max_cost", "cost"),
    ("retries", "max_retries", "retries"),
)


def run_budget_usage(run) -> list[dict]:
    """Rows for gauges: name, used, limit, fraction (0..1), exhausted (stopped the run)."""
    budgets = run.budgets or {}
    stopped_by = run.stop_reason.split(":", 1)[1] if run.stop_reason.startswith("budget_exhausted:") else None
    rows = []
    for name, key, attr in _BUDGETS:
        limit = budgets.get(key)
        used = getattr(run, attr)
        if name == "revisions":
            used = max(0, used - 1)  # the first plan is not a revision
        rows.append(_row(name, used, limit, stopped_by))
    if budgets.get("deadline_s"):
        end = run.finished_at or timezone.now()
        begin = run.started_at or run.created_at
        rows.append(_row("deadline", round((end - begin).total_seconds(), 1), budgets["deadline_s"], stopped_by))
    return rows


def _row(name, used, limit, stopped_by) -> dict:
    fraction = min(1.0, used / limit) if limit else 0.0
    return {"name": name, "used": used, "limit": limit, "fraction": round(fraction, 3),
            "exhausted": stopped_by == name}
