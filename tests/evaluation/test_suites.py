"""Suite files: the bundled suite is valid and representative; invalid suites list every problem."""
import copy
import json

import pytest

from evaluation.suites import (
    SUITES_DIR,
    SuiteError,
    bundled_suites,
    load_suite_file,
    parse_suite,
    scenario_dict,
    task_problems,
)
from runtime.sim.scenario import load_scenario

STANDARD = json.loads((SUITES_DIR / "standard.json").read_text())


def a_task(**changes):
    task = copy.deepcopy(next(t for t in STANDARD["tasks"] if t["name"] == "lookup-policy-by-id"))
    task.update(changes)
    return task


class TestBundledSuite:
    def test_it_loads_with_at_least_twenty_tasks(self):
        suites = {s.name: s for s in bundled_suites()}
        assert len(suites["standard"].tasks) >= 20

    def test_every_task_is_a_valid_scenario_with_both_modes(self):
        for task in STANDARD["tasks"]:
            scenario = load_scenario(scenario_dict(task))
            assert scenario.direct is not None and scenario.plans and scenario.completion is not None, task["name"]

    def test_it_covers_the_kinds_of_task_the_comparison_needs(self):
        categories = " ".join(t["category"] for t in STANDARD["tasks"])
        for kind in ("simple lookup", "transient failure", "empty result", "permission", "dependencies", "polling",
                     "approval", "budget", "stall"):
            assert kind in categories, kind

    def test_every_task_expects_a_verdict(self):
        assert all(t.get("verdict_expected") for t in STANDARD["tasks"])

    def test_planning_plans_carry_tokens_and_cost(self):
        for task in STANDARD["tasks"]:
            for plan in task["planner"]["plans"]:
                assert plan["tokens"] > 0 and plan["cost"] > 0, task["name"]


class TestValidation:
    def test_it_lists_every_problem_of_an_invalid_suite(self):
        broken_capability = a_task(name="broken-capability")
        broken_capability["capabilities"][0]["responses"] = [{"raise": "meteor"}]
        data = {"name": "", "planning_mode": "telepathy", "surprise": 1, "tasks": [
            a_task(name="dup"), a_task(name="dup"),
            a_task(name="no-direct", direct=None),
            a_task(name="no-completion", completion=None),
            a_task(name="bad-verdict", verdict_expected="planning_rules"),
            broken_capability,
            "not an object",
        ]}
        with pytest.raises(SuiteError) as caught:
            parse_suite(data, "broken.json")
        problems = "\n".join(caught.value.problems)
        for expected in ("unknown fields: surprise", "name must be a non-empty string", "planning_mode must be one of",
                         "task 'dup' is defined twice", "task 'no-direct': a direct step is required",
                         "task 'no-completion': completion criteria are required",
                         "task 'bad-verdict': verdict_expected must be one of",
                         "task 'broken-capability': capability 'kb_get_article' responses[0]: raise must be one of",
                         "tasks[6] must be an object"):
            assert expected in problems, expected
        assert "broken.json" in str(caught.value)

    def test_it_rejects_an_empty_task_list(self):
        assert task_problems([]) == ["tasks must be a non-empty list"]

    def test_evaluation_only_fields_are_removed_before_the_scenario_is_loaded(self):
        task = a_task(category="simple lookup", verdict_expected="direct_as_good")
        assert "verdict_expected" not in scenario_dict(task) and "category" not in scenario_dict(task)
        assert task_problems([task]) == []

    def test_it_reports_unreadable_files(self, tmp_path):
        path = tmp_path / "bad.json"
        path.write_text("{not json")
        with pytest.raises(SuiteError, match="cannot read JSON"):
            load_suite_file(path)
