"""Every scenario file under tests/scenarios runs through the real controller and meets its expect."""
import json
from pathlib import Path

import pytest

from runtime.sim.scenario import EXPECT_FIELDS, load_scenario, run_scenario

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.json"))


def test_there_are_enough_scenarios():
    assert len(SCENARIOS) >= 30


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_scenario_meets_its_expectations(path):
    scenario = load_scenario(path)
    assert scenario.expect, f"{path.name} has no expect"
    result = run_scenario(scenario)
    assert result.passed, "\n".join(result.failures)
    data = result.to_dict()
    assert list(data) == ["name", "passed", "failures", *EXPECT_FIELDS]
    json.dumps(data)
