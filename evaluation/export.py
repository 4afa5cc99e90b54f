"""An evaluation as JSON (everything) or CSV (a row per task and mode)."""
from __future__ import annotations

import csv
import io
from typing import Any

from evaluation import selectors
from evaluation.models import Evaluation, EvaluationResult

RESULT_FIELDS = ("task", "mode", "run_id", "verified_success", "status", "stop_reason", "tool_calls",
                 "repeated_actions", "revisions", "retries", "failed_observations", "recovered", "tokens", "cost",
                 "simulated_latency_s", "wall_latency_s")
CSV_FIELDS = ("evaluation_id", "suite", "label", "category") + RESULT_FIELDS + (
    "repeated_action_rate", "verdict", "verdict_reason", "verdict_expected", "trace_url")


def result_dict(result: EvaluationResult) -> dict[str, Any]:
    data = {name: getattr(result, name) for name in RESULT_FIELDS}
    details = result.details or {}
    data["verdict"] = details.get("verdict")
    data["details"] = details
    data["trace_url"] = f"/runs/{result.run_id}/" if result.run_id else None
    return data


def evaluation_dict(evaluation: Evaluation, results: list[EvaluationResult] | None = None) -> dict[str, Any]:
    results = selectors.results_of(evaluation) if results is None else results
    return {
        "id": evaluation.pk, "suite": evaluation.suite.name, "suite_id": evaluation.suite_id,
        "label": evaluation.label, "planning_mode": evaluation.planning_mode, "status": evaluation.status,
        "started_by": evaluation.started_by.get_username(),
        "progress": {"tasks_done": evaluation.tasks_done, "tasks_total": evaluation.tasks_total},
        "created_at": evaluation.created_at, "started_at": evaluation.started_at,
        "finished_at": evaluation.finished_at, "error": evaluation.error, "summary": evaluation.summary,
        "results": [result_dict(r) for r in results],
    }


def _csv_safe(value: Any) -> Any:
    # Spreadsheets run cells starting with these as formulas; task names come from suite files.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def evaluation_csv(evaluation: Evaluation, results: list[EvaluationResult] | None = None) -> str:
    results = selectors.results_of(evaluation) if results is None else results
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS)
    writer.writeheader()
    for result in results:
        data = result_dict(result)
        details = data.pop("details")
        verdict = data.pop("verdict") or {}
        row = {**data, "evaluation_id": evaluation.pk, "suite": evaluation.suite.name, "label": evaluation.label,
               "category": details.get("category", ""),
               "repeated_action_rate": round(details.get("repeated_action_rate") or 0.0, 6),
               "verdict": verdict.get("code", ""), "verdict_reason": verdict.get("reason", ""),
               "verdict_expected": details.get("verdict_expected") or ""}
        writer.writerow({k: _csv_safe(v) for k, v in row.items()})
    return out.getvalue()
