"""Per-task verdicts and per-mode aggregates: pure functions over plain data.

The question (seed, section 8): planning earns its place only when better success
or recovery justifies its latency and cost. A task's verdict compares its two
outcomes, direct and planning, run under the same limits:

1. planning verified-succeeded and direct did not        -> PLANNING_EARNED
   (the reason says "recovered" when planning completed after a failed observation)
2. direct verified-succeeded and planning did not         -> DIRECT_AS_GOOD
3. neither succeeded                                      -> BOTH_FAILED (both stop reasons)
4. both succeeded, and direct <= planning on every cost
   measure (tool calls, tokens, cost, latency)            -> DIRECT_AS_GOOD
   Ties go to direct: the simplest model that meets the requirement.
5. both succeeded, planning <= direct on every measure
   (and, by 4, strictly better on one)                    -> PLANNING_EARNED
6. both succeeded, each cheaper on some measure           -> PLANNING_COST_MORE
   (planning saved calls or time but spent more tokens/cost, or the reverse).

Latency is the simulated end-to-end time (planner calls included), so wall-clock
noise never flips a verdict.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from statistics import fmean
from typing import Any

from runtime.stop import RunStatus, StopKind, stop_kind


class VerdictCode(StrEnum):
    PLANNING_EARNED = "planning_earned"
    DIRECT_AS_GOOD = "direct_as_good"
    PLANNING_COST_MORE = "planning_cost_more"
    BOTH_FAILED = "both_failed"


VERDICT_LABELS = {
    VerdictCode.PLANNING_EARNED: "planning earned its overhead",
    VerdictCode.DIRECT_AS_GOOD: "direct was as good and cheaper",
    VerdictCode.PLANNING_COST_MORE: "planning was as good but cost more",
    VerdictCode.BOTH_FAILED: "both failed",
}
COST_MEASURES = ("tool_calls", "tokens", "cost", "latency_s")


@dataclass(frozen=True)
class Outcome:
    """One task in one mode, as the verdict needs it."""

    success: bool
    stop_reason: str | None
    tool_calls: int = 0
    tokens: int = 0
    cost: float = 0.0
    latency_s: float = 0.0
    recovered: bool = False

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Outcome:
        return cls(success=bool(data.get("verified_success")), stop_reason=data.get("stop_reason") or None,
                   tool_calls=int(data.get("tool_calls") or 0), tokens=int(data.get("tokens") or 0),
                   cost=float(data.get("cost") or 0.0), latency_s=float(data.get("simulated_latency_s") or 0.0),
                   recovered=bool(data.get("recovered")))


@dataclass(frozen=True)
class Verdict:
    code: VerdictCode
    reason: str

    @property
    def label(self) -> str:
        return VERDICT_LABELS[self.code]

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code.value, "label": self.label, "reason": self.reason}


def _no_worse(a: Outcome, b: Outcome) -> bool:
    # Costs are compared with a small tolerance: float sums of the same figures may differ in the last bits.
    return all(getattr(a, m) <= getattr(b, m) + 1e-9 for m in COST_MEASURES)


MEASURE_WORDS = {"tool_calls": "tool calls", "tokens": "tokens", "cost": "cost", "latency_s": "latency"}


def _cheaper_on(a: Outcome, b: Outcome) -> list[str]:
    return [MEASURE_WORDS[m] for m in COST_MEASURES if getattr(a, m) < getattr(b, m) - 1e-9]


def task_verdict(direct: Outcome, planning: Outcome) -> Verdict:
    if planning.success and not direct.success:
        how = "recovered after a failed observation" if planning.recovered else RunStatus.COMPLETED.value
        return Verdict(VerdictCode.PLANNING_EARNED,
                       f"planning {how}; direct stopped: {direct.stop_reason or 'did not finish'}")
    if direct.success and not planning.success:
        return Verdict(VerdictCode.DIRECT_AS_GOOD,
                       f"direct completed; planning stopped: {planning.stop_reason or 'did not finish'}")
    if not direct.success and not planning.success:
        return Verdict(VerdictCode.BOTH_FAILED,
                       f"direct: {direct.stop_reason or 'did not finish'}; "
                       f"planning: {planning.stop_reason or 'did not finish'}")
    if _no_worse(direct, planning):
        saved = _cheaper_on(direct, planning)
        detail = f"cheaper on {', '.join(saved)}" if saved else "identical cost"
        return Verdict(VerdictCode.DIRECT_AS_GOOD, f"both completed; direct {detail}")
    if _no_worse(planning, direct):
        return Verdict(VerdictCode.PLANNING_EARNED,
                       f"both completed; planning cheaper on {', '.join(_cheaper_on(planning, direct))}")
    return Verdict(VerdictCode.PLANNING_COST_MORE,
                   f"both completed; planning saved {', '.join(_cheaper_on(planning, direct))} "
                   f"but cost more {', '.join(_cheaper_on(direct, planning))}")


# -- aggregates ------------------------------------------------------------------------

AGGREGATE_FIELDS = ("tasks", "successes", "success_rate", "mean_tool_calls", "repeated_actions",
                    "repeated_action_rate", "mean_latency_s", "mean_wall_latency_s", "total_tokens", "total_cost",
                    "stall_rate", "budget_stop_rate", "tasks_with_failures", "recoveries", "recovery_rate")


def _rate(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def mode_aggregate(results: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The seed's measures over one mode's results (mappings with EvaluationResult's fields).

    repeated_action_rate: repeated attempts / tool calls. recovery_rate: tasks that
    completed after >= 1 failed observation / tasks that saw >= 1 failed observation
    (None when no task saw a failure). Latencies are means over tasks.
    """
    rows = list(results)
    n = len(rows)
    calls = sum(int(r.get("tool_calls") or 0) for r in rows)
    repeated = sum(int(r.get("repeated_actions") or 0) for r in rows)
    with_failures = sum(1 for r in rows if int(r.get("failed_observations") or 0) > 0)
    recoveries = sum(1 for r in rows if r.get("recovered"))
    successes = sum(1 for r in rows if r.get("verified_success"))
    stop_reasons = [r.get("stop_reason") or "" for r in rows]
    return {
        "tasks": n,
        "successes": successes,
        "success_rate": _rate(successes, n),
        "mean_tool_calls": fmean(int(r.get("tool_calls") or 0) for r in rows) if n else None,
        "repeated_actions": repeated,
        "repeated_action_rate": _rate(repeated, calls),
        "mean_latency_s": fmean(float(r.get("simulated_latency_s") or 0) for r in rows) if n else None,
        "mean_wall_latency_s": fmean(float(r.get("wall_latency_s") or 0) for r in rows) if n else None,
        "total_tokens": sum(int(r.get("tokens") or 0) for r in rows),
        "total_cost": round(sum(float(r.get("cost") or 0) for r in rows), 9),
        "stall_rate": _rate(sum(1 for s in stop_reasons if s == StopKind.STALLED), n),
        "budget_stop_rate": _rate(sum(1 for s in stop_reasons if stop_kind(s) is StopKind.BUDGET_EXHAUSTED), n),
        "tasks_with_failures": with_failures,
        "recoveries": recoveries,
        "recovery_rate": _rate(recoveries, with_failures),
    }


def verdict_counts(verdicts: Iterable[str]) -> dict[str, int]:
    counts = {code.value: 0 for code in VerdictCode}
    for code in verdicts:
        counts[code] = counts.get(code, 0) + 1
    return counts


def aggregate_deltas(current: Mapping[str, Any], baseline: Mapping[str, Any]) -> dict[str, float | None]:
    """current - baseline for every numeric aggregate both have (None where either is missing)."""
    deltas: dict[str, float | None] = {}
    for key in AGGREGATE_FIELDS:
        a, b = current.get(key), baseline.get(key)
        deltas[key] = a - b if isinstance(a, (int, float)) and isinstance(b, (int, float)) else None
    return deltas


# -- regressions between evaluations -------------------------------------------------------

class Change(StrEnum):
    """How a task's outcome moved from a baseline evaluation to this one."""

    NEW = "new"                # not in the baseline
    FIXED = "fixed"            # failed there, passes here
    REGRESSED = "regressed"    # passed there, fails here
    UNCHANGED = "unchanged"    # passes (or fails) in both; the verdict may still have moved


def task_passed(verdict: str | None, planning_success: bool | None, verdict_expected: str | None = None,
                completion_expected: bool | None = None) -> bool | None:
    """Whether a task's outcome is the one wanted (None when it has no outcome yet).

    With expectations (the suite's `verdict_expected`, a reviewer's `completion_expected` on
    planning mode's verified success), it passes when every one is met. Without any, it passes
    unless both modes failed."""
    if not verdict:
        return None
    checks = []
    if verdict_expected:
        checks.append(verdict == verdict_expected)
    if completion_expected is not None:
        checks.append(bool(planning_success) == completion_expected)
    if checks:
        return all(checks)
    return verdict != VerdictCode.BOTH_FAILED


def task_change(before: bool | None, now: bool | None) -> Change | None:
    """The mark of one task against a baseline: before/now are task_passed values (before None: not there)."""
    if now is None:
        return None
    if before is None:
        return Change.NEW
    if before and not now:
        return Change.REGRESSED
    if now and not before:
        return Change.FIXED
    return Change.UNCHANGED
