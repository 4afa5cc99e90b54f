"""Reads for the evaluation pages, API and export. Every list is bounded."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Max

from evaluation.models import Evaluation, EvaluationResult, EvaluationSuite, SuiteVersion
from evaluation.verdicts import VERDICT_LABELS, Change, VerdictCode, aggregate_deltas, task_change, task_passed

CELL_MEASURES = ("tool_calls", "repeated_actions", "tokens", "cost", "simulated_latency_s")


def suite_list() -> list[EvaluationSuite]:
    return list(EvaluationSuite.objects.annotate(evaluation_count=Count("evaluations"),
                                                 last_evaluated=Max("evaluations__created_at"))
                .order_by("name")[:200])


def suite_get(ref: Any) -> EvaluationSuite | None:
    """A suite by id, or by name."""
    text = str(ref).strip()
    if text.isascii() and text.isdigit():   # isdigit() alone takes "²", which int() refuses
        return EvaluationSuite.objects.filter(pk=int(text)).first()
    return EvaluationSuite.objects.filter(name=text).first()


def evaluation_list(*, suite_id: int | None = None, limit: int = 50) -> list[Evaluation]:
    rows = Evaluation.objects.select_related("suite", "started_by").order_by("-created_at", "-id")
    if suite_id is not None:
        rows = rows.filter(suite_id=suite_id)
    return list(rows[:limit])


def evaluation_get(evaluation_id: int) -> Evaluation | None:
    return Evaluation.objects.select_related("suite", "suite_version", "started_by").filter(pk=evaluation_id).first()


def baseline_candidates(evaluation: Evaluation, limit: int = 30) -> list[Evaluation]:
    """Completed evaluations of the same suite, newest first: what this one can be compared with."""
    return list(Evaluation.objects.filter(suite_id=evaluation.suite_id, status=Evaluation.Status.COMPLETED)
                .exclude(pk=evaluation.pk).order_by("-created_at", "-id")[:limit])


def latest_completed_evaluation() -> Evaluation | None:
    return (Evaluation.objects.select_related("suite").filter(status=Evaluation.Status.COMPLETED)
            .order_by("-finished_at", "-id").first())


def results_of(evaluation: Evaluation) -> list[EvaluationResult]:
    return list(EvaluationResult.objects.filter(evaluation=evaluation).select_related("run").order_by("id"))


@dataclass
class TaskRow:
    task: str
    category: str = ""
    goal: str = ""
    direct: EvaluationResult | None = None
    planning: EvaluationResult | None = None
    verdict: dict[str, str] = field(default_factory=dict)
    verdict_expected: str | None = None
    completion_expected: bool | None = None
    source: dict[str, Any] | None = None
    # planning - direct, per measure (positive: planning spent more).
    deltas: dict[str, float] = field(default_factory=dict)
    baseline_verdict: str | None = None

    @property
    def verdict_code(self) -> str:
        return self.verdict.get("code", "")

    @property
    def passed(self) -> bool | None:
        return task_passed(self.verdict_code, self.planning.verified_success if self.planning else None,
                           self.verdict_expected, self.completion_expected)

    @property
    def verdict_changed(self) -> bool:
        return bool(self.baseline_verdict) and self.baseline_verdict != self.verdict_code


def task_rows(evaluation: Evaluation, results: list[EvaluationResult] | None = None) -> list[TaskRow]:
    """One row per task in suite order, direct beside planning, with planning - direct deltas."""
    rows: dict[str, TaskRow] = {}
    for result in results if results is not None else results_of(evaluation):
        row = rows.setdefault(result.task, TaskRow(task=result.task))
        setattr(row, result.mode, result)
        details = result.details or {}
        row.category = row.category or details.get("category", "")
        row.goal = row.goal or details.get("goal", "")
        row.verdict_expected = row.verdict_expected or details.get("verdict_expected")
        if row.completion_expected is None:
            row.completion_expected = details.get("completion_expected")
        row.source = row.source or details.get("source")
        row.verdict = details.get("verdict") or row.verdict
    for row in rows.values():
        if row.direct and row.planning:
            row.deltas = {m: getattr(row.planning, m) - getattr(row.direct, m) for m in CELL_MEASURES}
    return list(rows.values())


def mode_summary_rows(summary: dict[str, Any], baseline: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The aggregate per mode, with deltas against a baseline's summary when given."""
    rows = []
    for mode in ("direct", "planning"):
        current = (summary.get("modes") or {}).get(mode) or {}
        before = ((baseline or {}).get("modes") or {}).get(mode) if baseline else None
        rows.append({"mode": mode, "values": current,
                     "deltas": aggregate_deltas(current, before) if before else {}})
    return rows


@dataclass
class Comparison:
    baseline: Evaluation
    modes: list[dict[str, Any]]
    verdict_deltas: dict[str, int]
    changed_tasks: list[dict[str, Any]]
    same_tasks: bool


def comparison(evaluation: Evaluation, baseline: Evaluation, rows: list[TaskRow]) -> Comparison:
    """What changed since the baseline: aggregates per mode, verdict counts, tasks whose outcome moved."""
    base_rows = {r.task: r for r in task_rows(baseline)}
    changed = []
    for row in rows:
        before = base_rows.get(row.task)
        if before is None:
            changed.append({"task": row.task, "change": "new task"})
            continue
        row.baseline_verdict = before.verdict_code
        moves = []
        if before.verdict_code != row.verdict_code:
            moves.append(f"verdict {_label(before.verdict_code)} → {_label(row.verdict_code)}")
        for mode in ("direct", "planning"):
            a, b = getattr(before, mode), getattr(row, mode)
            if a and b and a.verified_success != b.verified_success:
                moves.append(f"{mode} {'now succeeds' if b.verified_success else 'now fails'}")
        if moves:
            changed.append({"task": row.task, "change": "; ".join(moves)})
    counts_now = (evaluation.summary or {}).get("verdicts") or {}
    counts_before = (baseline.summary or {}).get("verdicts") or {}
    return Comparison(
        baseline=baseline, modes=mode_summary_rows(evaluation.summary or {}, baseline.summary or {}),
        verdict_deltas={c.value: counts_now.get(c.value, 0) - counts_before.get(c.value, 0) for c in VerdictCode},
        changed_tasks=changed,
        same_tasks=(evaluation.summary or {}).get("suite_hash") == (baseline.summary or {}).get("suite_hash"))


def _label(code: str) -> str:
    try:
        return VERDICT_LABELS[VerdictCode(code)]
    except ValueError:
        return code or "none"


def suite_versions(suite: EvaluationSuite, limit: int = 50) -> list[SuiteVersion]:
    return list(SuiteVersion.objects.filter(suite=suite).select_related("created_by").order_by("-number")[:limit])


def baselines_of(evaluation: Evaluation) -> dict[str, Evaluation | None]:
    """What the regression view compares with: the last completed evaluation of an earlier version
    of the suite (the newest such version), and the one before this of the same version."""
    if not evaluation.suite_version_id:
        return {"previous_version": None, "same_version": None}
    done = Evaluation.objects.select_related("suite_version").filter(
        suite_id=evaluation.suite_id, status=Evaluation.Status.COMPLETED)
    number = evaluation.suite_version.number if evaluation.suite_version else 0
    return {
        "previous_version": done.filter(suite_version__number__lt=number)
        .order_by("-suite_version__number", "-created_at", "-id").first(),
        "same_version": done.filter(suite_version_id=evaluation.suite_version_id, pk__lt=evaluation.pk)
        .order_by("-created_at", "-id").first(),
    }


@dataclass
class RegressionRow:
    task: str
    verdict: str
    passed: bool | None
    source: dict[str, Any] | None
    verdict_expected: str | None
    completion_expected: bool | None
    planning_success: bool | None
    against: dict[str, dict[str, Any]] = field(default_factory=dict)  # baseline kind -> {change, verdict, passed}


@dataclass
class Regression:
    baselines: dict[str, Evaluation | None]
    rows: list[RegressionRow]
    removed: dict[str, list[str]]          # baseline kind -> tasks it had that this evaluation has not
    counts: dict[str, dict[str, int]]      # baseline kind -> change -> tasks

    def as_dict(self) -> dict[str, Any]:
        return {
            "baselines": {kind: ({"id": e.pk, "suite_version": e.suite_version.number if e.suite_version else None,
                                  "label": e.label, "created_at": e.created_at} if e else None)
                          for kind, e in self.baselines.items()},
            "tasks": [{"task": r.task, "verdict": r.verdict, "passed": r.passed, "planning_success": r.planning_success,
                       "verdict_expected": r.verdict_expected, "completion_expected": r.completion_expected,
                       "source": r.source, "against": r.against} for r in self.rows],
            "removed": self.removed, "counts": self.counts,
        }


def regression(evaluation: Evaluation, rows: list[TaskRow] | None = None) -> Regression:
    """Per task: its outcome here against each baseline, marked new, fixed, regressed or unchanged."""
    rows = task_rows(evaluation) if rows is None else rows
    baselines = baselines_of(evaluation)
    before = {kind: ({r.task: r for r in task_rows(e)} if e else None) for kind, e in baselines.items()}
    out, counts = [], {kind: {c.value: 0 for c in Change} for kind in baselines}
    for row in rows:
        item = RegressionRow(task=row.task, verdict=row.verdict_code, passed=row.passed, source=row.source,
                             verdict_expected=row.verdict_expected, completion_expected=row.completion_expected,
                             planning_success=row.planning.verified_success if row.planning else None)
        for kind, base in before.items():
            if base is None:
                continue
            old = base.get(row.task)
            mark = task_change(old.passed if old else None, row.passed)
            if mark is None:
                continue
            item.against[kind] = {"change": mark.value, "verdict": old.verdict_code if old else None,
                                  "passed": old.passed if old else None}
            counts[kind][mark.value] += 1
        out.append(item)
    names = {r.task for r in rows}
    removed = {kind: [t for t in base if t not in names] for kind, base in before.items() if base is not None}
    return Regression(baselines=baselines, rows=out, removed=removed, counts=counts)


def run_twins(*, run_id: int) -> list[dict]:
    """The same task's run in the other mode of the same evaluation (direct <-> planning). One query."""
    mine = EvaluationResult.objects.filter(run_id=run_id)
    rows = (EvaluationResult.objects.filter(evaluation_id__in=mine.values("evaluation_id"), task__in=mine.values("task"))
            .values("mode", "run_id", "task", "verified_success"))
    return [row for row in rows if row["run_id"] and row["run_id"] != run_id]
