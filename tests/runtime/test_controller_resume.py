"""A run advanced one pass at a time, with its state through JSON between passes,
ends exactly where a straight run ends: the checkpoint holds everything."""
import json
from pathlib import Path

import pytest

from runs.runtime.sim.scenario import let_expire, prepare_scenario, run_scenario, scenario_result
from runs.runtime.state import RunState

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.json"))


def stepped(path):
    """Advance pass by pass, as a Celery task would: load, advance, save, sleep."""
    rig = prepare_scenario(path)
    saved, events = json.dumps(rig.state.to_dict()), []
    for _ in range(10_000):
        transition = rig.controller.advance(RunState.from_dict(json.loads(saved)))
        events.extend(transition.events)
        saved = json.dumps(transition.state.to_dict())
        if transition.wait_s is None:
            # An approval the script leaves to expire: wake the run at its expiry, as the sweep does.
            if let_expire(rig, transition.state):
                continue
            break
        rig.clock.sleep(transition.wait_s)
    state = RunState.from_dict(json.loads(saved))
    elapsed = rig.clock.now() - state.started_at
    return scenario_result(rig.scenario, state, events, rig.executor.eventual_commits(), elapsed), state


def shape(events):
    """Events without the random ids, which differ between two runs by design."""
    out = []
    for event in events:
        data = event.to_dict()
        for key in ("attempt_id", "triggering_attempt_id"):
            data.pop(key, None)
        if "observation" in data:
            data["observation"].pop("span_id")
        out.append(data)
    return out


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_stepping_through_json_checkpoints_gives_the_same_run(path):
    straight = run_scenario(path)
    result, state = stepped(path)
    assert result.to_dict() == straight.to_dict()
    assert shape(result.events) == shape(straight.events)
    assert state.stop_detail == straight.state.stop_detail
