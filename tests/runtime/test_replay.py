"""Every bundled scenario: run it, export the run as a scenario, run that: the same decisions and stop."""
import json
from pathlib import Path

import pytest

from runtime import events as ev
from runtime.replay import record_from_events, scenario_from_record
from runtime.sim.scenario import load_scenario, run_scenario

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.json"))
COUNTS = ("status", "stop_reason", "tool_calls", "revisions", "retries", "approvals_requested", "tokens",
          "elapsed_s", "stall_kind")


def export(scenario, result):
    plans, attempts, approvals = record_from_events(result.events)
    return scenario_from_record(
        name=f"replay of {scenario.name}", goal=scenario.goal,
        completion=scenario.completion.to_dict() if scenario.completion else None,
        budgets=scenario.budgets.to_dict(), capabilities=scenario.capabilities, plans=plans, attempts=attempts,
        approvals=approvals, owner_permissions=list(scenario.owner_permissions)
        if scenario.owner_permissions is not None else None,
        require_plan_approval=scenario.require_plan_approval, seed=scenario.seed,
        approval_ttl_s=scenario.approval_ttl_s,
        expect={k: v for k, v in result.to_dict().items() if k in (*COUNTS, "side_effects_committed")})


def decisions(result):
    return [(e.decision, e.reason) for e in result.events if isinstance(e, ev.DecisionMade)]


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_an_exported_run_replays_to_the_same_decisions_and_stop(path, tmp_path):
    scenario = load_scenario(path)
    original = run_scenario(scenario)
    exported = export(scenario, original)
    file = tmp_path / "replay.json"
    file.write_text(json.dumps(exported))  # through JSON, as a file on disk
    replayed = run_scenario(load_scenario(file))
    assert replayed.passed, replayed.failures
    for field in COUNTS:
        assert getattr(replayed, field) == getattr(original, field), field
    assert decisions(replayed) == decisions(original)
    unknown = any(isinstance(e, ev.AttemptFinished) and e.observation.side_effect.value == "unknown"
                  and not any(isinstance(f, ev.AttemptFinished) and f.kind == "resolve" for f in original.events)
                  for e in original.events)
    if not unknown:  # an outcome nothing resolved is exported as not committed
        assert replayed.side_effects_committed == original.side_effects_committed


def test_a_changed_response_changes_the_decision():
    scenario = load_scenario(SCENARIOS[0].parent / "transient_failure_recovered_by_retries.json")
    exported = export(scenario, run_scenario(scenario))
    capability = exported["capabilities"][0]
    capability["responses"] = [{"raise": "not_found"}]
    exported["expect"] = {}
    replayed = run_scenario(load_scenario(exported))
    assert replayed.stop_reason == "terminal_failure:not_found"


def test_every_call_has_its_response_a_deduplicated_one_too():
    # Issue 35: three calls of an idempotent write with one key, the callee answering
    # state_changed each time; the export held one response for the three.
    from runtime.capability import CapabilitySpec, SideEffect
    from runtime.replay import RecordedAttempt, responses_from_attempts

    spec = CapabilitySpec(name="open_ticket", side_effect=SideEffect.WRITE, idempotent=True)
    answer = RecordedAttempt("open_ticket", "call", "key-1", "ok", output={"ticket": "T-1"}, state_changed=True,
                             side_effect="committed")
    responses, commits = responses_from_attempts([answer] * 3, {"open_ticket": spec})
    assert len(responses["open_ticket"]) == 3 and commits == 1
    assert [r.get("deduplicated", False) for r in responses["open_ticket"]] == [False, True, True]
