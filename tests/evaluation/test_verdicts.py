"""Verdicts and aggregates: pure functions, no database."""
import pytest

from evaluation.verdicts import (
    VERDICT_LABELS,
    Outcome,
    VerdictCode,
    aggregate_deltas,
    mode_aggregate,
    task_verdict,
    verdict_counts,
)


def ok(**kw):
    return Outcome(success=True, stop_reason="completed", **kw)


def failed(reason="stalled", **kw):
    return Outcome(success=False, stop_reason=reason, **kw)


class TestTaskVerdict:
    def test_it_says_planning_earned_it_when_only_planning_succeeds(self):
        verdict = task_verdict(failed("stalled"), ok(tool_calls=2, tokens=900))
        assert verdict.code is VerdictCode.PLANNING_EARNED
        assert "direct stopped: stalled" in verdict.reason

    def test_it_names_recovery_when_planning_recovered_where_direct_failed(self):
        verdict = task_verdict(failed("stalled"), ok(recovered=True))
        assert verdict.code is VerdictCode.PLANNING_EARNED and "recovered" in verdict.reason

    def test_it_prefers_direct_when_both_succeed_and_direct_is_no_more_expensive(self):
        verdict = task_verdict(ok(tool_calls=1, latency_s=0.4), ok(tool_calls=1, tokens=640, cost=0.003, latency_s=1.9))
        assert verdict.code is VerdictCode.DIRECT_AS_GOOD
        assert "cheaper on tokens, cost, latency" in verdict.reason

    def test_it_gives_a_tie_to_direct_the_simpler_model(self):
        assert task_verdict(ok(tool_calls=1), ok(tool_calls=1)).code is VerdictCode.DIRECT_AS_GOOD

    def test_it_says_direct_was_as_good_when_only_direct_succeeds(self):
        verdict = task_verdict(ok(), failed("budget_exhausted:tokens"))
        assert verdict.code is VerdictCode.DIRECT_AS_GOOD
        assert "planning stopped: budget_exhausted:tokens" in verdict.reason

    def test_it_reports_both_stop_reasons_when_both_fail(self):
        verdict = task_verdict(failed("terminal_failure:not_found"), failed("stalled"))
        assert verdict.code is VerdictCode.BOTH_FAILED
        assert verdict.reason == "direct: terminal_failure:not_found; planning: stalled"

    def test_it_says_planning_cost_more_when_it_saved_calls_but_spent_tokens(self):
        verdict = task_verdict(ok(tool_calls=3, latency_s=9.0), ok(tool_calls=1, tokens=700, cost=0.0035, latency_s=2.0))
        assert verdict.code is VerdictCode.PLANNING_COST_MORE
        assert "saved tool calls, latency" in verdict.reason and "cost more tokens, cost" in verdict.reason

    def test_it_says_planning_earned_it_when_both_succeed_and_planning_is_cheaper_everywhere(self):
        verdict = task_verdict(ok(tool_calls=3, latency_s=5.0), ok(tool_calls=1, latency_s=1.0))
        assert verdict.code is VerdictCode.PLANNING_EARNED

    def test_every_verdict_has_a_label(self):
        assert set(VERDICT_LABELS) == set(VerdictCode)
        assert task_verdict(ok(), ok()).to_dict()["label"] == "direct was as good and cheaper"

    def test_it_reads_outcomes_from_result_mappings(self):
        outcome = Outcome.from_mapping({"verified_success": True, "stop_reason": "completed", "tool_calls": 2,
                                        "tokens": 5, "cost": 0.1, "simulated_latency_s": 3.5, "recovered": True})
        assert outcome == Outcome(True, "completed", 2, 5, 0.1, 3.5, True)


def result(**kw):
    base = {"verified_success": False, "stop_reason": "stalled", "tool_calls": 1, "repeated_actions": 0,
            "failed_observations": 0, "recovered": False, "tokens": 0, "cost": 0.0, "simulated_latency_s": 1.0,
            "wall_latency_s": 0.01}
    return {**base, **kw}


class TestAggregates:
    def test_it_computes_the_seed_measures_per_mode(self):
        rows = [result(verified_success=True, stop_reason="completed", tool_calls=2, failed_observations=1,
                       recovered=True, tokens=100, cost=0.5, simulated_latency_s=3.0),
                result(stop_reason="stalled", tool_calls=3, repeated_actions=1, failed_observations=2,
                       simulated_latency_s=1.0),
                result(stop_reason="budget_exhausted:tokens", tool_calls=1, tokens=50, cost=0.25,
                       simulated_latency_s=2.0),
                result(verified_success=True, stop_reason="completed", tool_calls=2, simulated_latency_s=2.0)]
        agg = mode_aggregate(rows)
        assert agg["tasks"] == 4 and agg["successes"] == 2 and agg["success_rate"] == 0.5
        assert agg["mean_tool_calls"] == 2.0
        assert agg["repeated_action_rate"] == pytest.approx(1 / 8)
        assert agg["mean_latency_s"] == 2.0
        assert agg["total_tokens"] == 150 and agg["total_cost"] == 0.75
        assert agg["stall_rate"] == 0.25 and agg["budget_stop_rate"] == 0.25
        assert agg["tasks_with_failures"] == 2 and agg["recoveries"] == 1 and agg["recovery_rate"] == 0.5

    def test_it_leaves_rates_empty_without_data(self):
        agg = mode_aggregate([])
        assert agg["success_rate"] is None and agg["recovery_rate"] is None and agg["mean_tool_calls"] is None

    def test_recovery_rate_is_none_when_no_task_saw_a_failure(self):
        assert mode_aggregate([result(verified_success=True, stop_reason="completed")])["recovery_rate"] is None

    def test_deltas_are_current_minus_baseline(self):
        deltas = aggregate_deltas({"success_rate": 0.7, "total_tokens": 100, "recovery_rate": None},
                                  {"success_rate": 0.5, "total_tokens": 150, "recovery_rate": 0.5})
        assert deltas["success_rate"] == pytest.approx(0.2) and deltas["total_tokens"] == -50
        assert deltas["recovery_rate"] is None

    def test_verdict_counts_include_every_verdict(self):
        assert verdict_counts(["both_failed", "both_failed"]) == {
            "planning_earned": 0, "direct_as_good": 0, "planning_cost_more": 0, "both_failed": 2}
