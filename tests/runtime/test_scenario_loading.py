import json

import pytest

from runtime.capability import CapabilitySpec, RetryPolicy, SideEffect
from runtime.sim.scenario import ScenarioError, load_scenario, run_scenario

MINIMAL = {"name": "minimal", "capabilities": [{"name": "search", "responses": [{"return": {"ok": 1}}]}],
           "planner": {"plans": [[{"capability": "search"}]]}}


def test_omitted_fields_take_the_products_defaults():
    scenario = load_scenario(MINIMAL)
    spec = scenario.capabilities[0]
    defaults = CapabilitySpec(name="search")
    assert (spec.side_effect, spec.timeout_s, spec.retry, spec.max_argument_bytes, spec.permission) == (
        SideEffect.NONE, defaults.timeout_s, RetryPolicy(), defaults.max_argument_bytes, "")
    assert scenario.owner_permissions is None and scenario.completion is None and scenario.expect == {}


def test_backoff_s_sets_the_retry_base():
    data = json.loads(json.dumps(MINIMAL))
    data["capabilities"][0]["retry"] = {"max_attempts": 2, "backoff_s": 3}
    assert load_scenario(data).capabilities[0].retry.backoff_base_s == 3


def test_an_invalid_scenario_lists_every_problem():
    bad = {"nme": "typo", "completion": {"capability": "x"}, "budgets": {"max_wishes": 1},
           "capabilities": [{"name": "a", "responses": [{"raise": "explode"}, {"return": 1, "raise": "timeout"},
                                                         {"latency_s": -1, "return": 1}]},
                            {"name": "a"}],
           "planner": {"plans": "all of them"}, "approvals": [{"decision": "maybe"}], "expect": {"vibes": "good"}}
    with pytest.raises(ScenarioError) as info:
        load_scenario(bad)
    problems = "\n".join(info.value.problems)
    for fragment in ("unknown fields: nme", "name must be", "completion needs exactly one", "max_wishes",
                     "raise must be one of", "responses[1] needs exactly one of", "latency_s must be", "defined twice",
                     "planner must be", "approvals[0]", "expect.vibes"):
        assert fragment in problems
    assert len(info.value.problems) >= 11


def test_a_file_that_is_not_json_is_a_scenario_error(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{nope")
    with pytest.raises(ScenarioError, match="cannot read JSON"):
        load_scenario(path)


def test_direct_mode_needs_a_direct_step():
    with pytest.raises(ScenarioError, match="direct"):
        run_scenario(MINIMAL, mode="direct")
    with pytest.raises(ScenarioError, match="mode"):
        run_scenario(MINIMAL, mode="yolo")


def test_failures_say_what_was_expected_and_what_happened():
    data = dict(MINIMAL, expect={"status": "stopped", "stop_reason": "stalled", "tool_calls": 1})
    result = run_scenario(data)
    assert not result.passed
    assert result.failures == ['expected status="stopped", got "completed"',
                               'expected stop_reason="stalled", got "completed"']


def test_stop_reason_is_null_while_the_run_has_not_stopped():
    data = dict(MINIMAL, capabilities=[{"name": "search", "requires_approval": True, "responses": [{"return": 1}]}],
                expect={"status": "awaiting_approval", "stop_reason": None})
    result = run_scenario(data)
    assert result.passed and result.to_dict()["stop_reason"] is None
