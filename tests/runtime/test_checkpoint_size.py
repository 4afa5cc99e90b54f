"""The checkpoint stays bounded whatever the capabilities return."""
import json

from runtime.checkpoint import HISTORY_OUTPUT_BYTES, bounded_for_history
from runtime.observation import Observation
from runtime.sim.scenario import prepare_scenario


def polling_run(output):
    steps = 40
    return prepare_scenario({
        "name": "big outputs", "goal": "poll",
        "completion": {"capability": "status", "path": "status", "equals": "done"},
        "budgets": {"max_iterations": 100, "max_tool_calls": 100, "max_calls_per_capability": {"status": 100}},
        "capabilities": [{"name": "status", "side_effect": "read", "polling": {"max_attempts": 90, "interval_s": 1},
                          "responses": [{"return": {"status": "open", "blob": output}}] * steps
                          + [{"return": {"status": "done"}}]}],
        "planner": {"plans": [[{"capability": "status", "arguments": {}}]]},
    })


def checkpoint_bytes(rig):
    state, largest = rig.state, 0
    while not state.is_terminal:
        transition = rig.controller.advance(state)
        state = transition.state
        largest = max(largest, len(json.dumps(state.to_dict())))
        if transition.wait_s:
            rig.clock.sleep(transition.wait_s)
    return state, largest


def test_fifteen_kilobyte_outputs_do_not_grow_the_checkpoint():
    small_state, small = checkpoint_bytes(polling_run("x"))
    big_state, big = checkpoint_bytes(polling_run("x" * 15_000))
    assert small_state.stop_reason == big_state.stop_reason == "completed"
    # The latest output of the completion's capability is kept whole (the completion check
    # reads it); the 20 history entries keep a preview each.
    assert big < small + 15_000 + 20 * 1_000


def test_small_outputs_stay_whole_and_large_ones_keep_a_reference():
    small = Observation.success({"id": 1})
    assert bounded_for_history(small, "a1") is small
    large = bounded_for_history(Observation.success({"blob": "y" * (HISTORY_OUTPUT_BYTES + 1)}), "a2")
    assert large.output is None and large.output_ref.uri == "attempt:a2"
    assert large.output_ref.size_bytes > HISTORY_OUTPUT_BYTES and len(large.output_ref.sha256) == 64
