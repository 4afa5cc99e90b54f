import pytest

from runtime import budgets as B
from runtime.budgets import BudgetName, Budgets, Usage


def call_check(budgets, usage, *, capability="search", side_effecting=False, retry=False, now=0.0):
    return B.exhausted_before_call(budgets, usage, capability=capability, side_effecting=side_effecting,
                                   retry=retry, started_at=0.0, now=now)


def test_budget_names_are_the_closed_set():
    assert {b.value for b in BudgetName} == {"iterations", "revisions", "tool_calls", "capability_calls", "deadline",
                                            "tokens", "cost", "retries", "side_effect_rate"}


def test_a_call_is_allowed_when_every_budget_has_room():
    assert call_check(Budgets(), Usage()) is None


def test_it_names_iterations_when_the_next_call_would_exceed_them():
    assert call_check(Budgets(max_iterations=2), Usage(iterations=1)) is None
    assert call_check(Budgets(max_iterations=2), Usage(iterations=2)) == "iterations"


def test_it_names_tool_calls():
    assert call_check(Budgets(max_tool_calls=1), Usage(tool_calls=1)) == "tool_calls"


def test_it_names_capability_calls_only_for_the_limited_capability():
    budgets = Budgets(max_calls_per_capability={"search": 1})
    usage = Usage(calls_per_capability={"search": 1})
    assert call_check(budgets, usage) == "capability_calls"
    assert call_check(budgets, usage, capability="other") is None


def test_it_names_the_deadline_when_no_time_is_left():
    assert call_check(Budgets(deadline_s=10), Usage(), now=9.99) is None
    assert call_check(Budgets(deadline_s=10), Usage(), now=10) == "deadline"


def test_it_names_retries_only_for_a_retry():
    assert call_check(Budgets(max_retries=1), Usage(retries=1)) is None
    assert call_check(Budgets(max_retries=1), Usage(retries=1), retry=True) == "retries"
    assert not B.retry_budget_left(Budgets(max_retries=1), Usage(retries=1))


def test_it_names_the_side_effect_rate_within_a_minute_only():
    budgets = Budgets(max_side_effects_per_minute=1)
    usage = Usage().counted_side_effect(0.0)
    assert call_check(budgets, usage, side_effecting=True, now=30) == "side_effect_rate"
    assert call_check(budgets, usage, side_effecting=False, now=30) is None
    assert call_check(budgets, usage, side_effecting=True, now=61) is None


def test_planning_checks_revisions_tokens_and_cost():
    def check(usage, revision=True):
        return B.exhausted_before_planning(Budgets(max_revisions=1, max_tokens=100, max_cost=1.0), usage,
                                           started_at=0, now=0, revision=revision)
    assert check(Usage(revisions=0)) is None
    assert check(Usage(revisions=1)) == "revisions"
    assert check(Usage(revisions=1), revision=False) is None
    assert check(Usage(tokens=100)) == "tokens"
    assert check(Usage(cost=1.0)) == "cost"


def test_tokens_and_cost_are_exceeded_only_above_the_limit_after_planning():
    budgets = Budgets(max_tokens=100, max_cost=1.0)
    assert B.exceeded_after_planning(budgets, Usage(tokens=100, cost=1.0)) is None
    assert B.exceeded_after_planning(budgets, Usage(tokens=101)) == "tokens"
    assert B.exceeded_after_planning(budgets, Usage(cost=1.5)) == "cost"


def test_planning_needs_a_tool_call_left_to_be_worth_it():
    budgets = Budgets(max_tool_calls=2)
    assert B.exhausted_before_planning(budgets, Usage(tool_calls=1), started_at=0, now=0, revision=True) is None
    assert B.exhausted_before_planning(budgets, Usage(tool_calls=2), started_at=0, now=0, revision=True) == "tool_calls"
    # revisions are reported before tool calls (design.md's order)
    assert B.exhausted_before_planning(Budgets(max_tool_calls=2, max_revisions=0), Usage(tool_calls=2), started_at=0,
                                       now=0, revision=True) == "revisions"


def test_a_lookup_needs_a_tool_call_and_a_capability_call_but_no_iteration():
    budgets = Budgets(max_iterations=1, max_tool_calls=2, max_calls_per_capability={"t": 1})
    assert B.exhausted_before_lookup(budgets, Usage(iterations=1), capability="t", started_at=0, now=0) is None
    assert B.exhausted_before_lookup(budgets, Usage(tool_calls=2), capability="t", started_at=0, now=0) == "tool_calls"
    assert B.exhausted_before_lookup(budgets, Usage(calls_per_capability={"t": 1}), capability="t", started_at=0,
                                     now=0) == "capability_calls"


def test_counting_a_call_updates_every_counter():
    usage = Usage().counted_call("search", retry=True, poll=False).counted_call("search", retry=False, poll=True)
    assert (usage.iterations, usage.tool_calls, usage.retries, usage.polls) == (2, 2, 1, 1)
    assert usage.calls_per_capability == {"search": 2}


def test_a_status_lookup_is_a_tool_call_of_its_capability_but_not_an_iteration_or_retry():
    usage = Usage().counted_lookup("create_ticket")
    assert (usage.iterations, usage.tool_calls, usage.retries) == (0, 1, 0)
    assert usage.calls_per_capability == {"create_ticket": 1}


def test_counting_plans_counts_revisions_after_the_first():
    usage = Usage().counted_plan(tokens=10, cost=0.1, received=True).counted_plan(tokens=5, cost=0.1, received=True)
    usage = usage.counted_plan(tokens=0, cost=0, received=False)
    assert (usage.plans, usage.revisions, usage.iterations, usage.tokens) == (2, 1, 3, 15)


def test_budgets_and_usage_round_trip_through_dicts():
    budgets = Budgets(max_calls_per_capability={"a": 2}, deadline_s=5)
    assert Budgets.from_dict(budgets.to_dict()) == budgets
    usage = Usage(calls_per_capability={"a": 1}, side_effect_times=(1.0,))
    assert Usage.from_dict(usage.to_dict()) == usage


def test_unknown_budget_names_are_refused():
    with pytest.raises(ValueError, match="max_wishes"):
        Budgets.from_dict({"max_wishes": 3})
