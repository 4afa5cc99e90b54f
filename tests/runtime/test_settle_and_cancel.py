"""A lookup waits for a call still in flight; a cancel during a call stops the run at its decision."""
from __future__ import annotations

from runtime.sim.scenario import prepare_scenario


def late_send(**capability):
    return {
        "name": "late send", "goal": "Send once",
        "completion": {"capability": "send", "path": "sent", "equals": True},
        "budgets": {"deadline_s": 60, "max_retries": 3},
        "capabilities": [{"name": "send", "side_effect": "external", "status_lookup": True, "timeout_s": 2,
                          "retry": {"max_attempts": 3},
                          "responses": [{"commit_late_s": 7, "return": {"sent": True}}, {"return": {"sent": True}}],
                          **capability}],
        "planner": {"plans": [[{"capability": "send", "arguments": {"to": "ops"}}]]},
    }


class StillRunning:
    """The simulated callee, whose first call's thread runs on until the clock reaches `until`."""

    def __init__(self, inner, clock, until):
        self.inner, self.clock, self.until, self.asked = inner, clock, until, 0

    def execute(self, spec, arguments, **kw):
        return self.inner.execute(spec, arguments, **kw)

    def lookup_status(self, spec, arguments, **kw):
        return self.inner.lookup_status(spec, arguments, **kw)

    def in_flight(self, spec, *, idempotency_key):
        self.asked += 1
        return self.clock.now() < self.until


def drive(rig, state):
    events = []
    while not state.is_terminal:
        transition = rig.controller.advance(state)
        events.extend(transition.events)
        state = transition.state
        if transition.wait_s is None:
            break
        rig.clock.sleep(transition.wait_s)
    return state, events


def test_a_lookup_waits_while_the_call_is_still_running_and_then_finds_its_commit():
    rig = prepare_scenario(late_send())
    rig.controller.executor = StillRunning(rig.executor, rig.clock, until=7)
    state, events = drive(rig, rig.state)
    assert state.stop_reason == "completed" and rig.executor.eventual_commits() == 1
    lookups = [e for e in events if type(e).__name__ == "AttemptFinished" and e.kind == "lookup"]
    assert len(lookups) == 1 and lookups[0].started_at >= 7
    assert rig.controller.executor.asked >= 2


def test_without_the_in_flight_answer_the_same_late_commit_is_sent_twice():
    # What the settle rule is for: a lookup believed at the timeout re-sends, and the first call lands too.
    rig = prepare_scenario(late_send())
    state, _ = drive(rig, rig.state)
    assert state.stop_reason == "completed" and rig.executor.eventual_commits() == 2


def test_a_cancel_during_the_completing_call_stops_the_run_cancelled_with_the_call_recorded():
    rig = prepare_scenario(late_send(responses=[{"return": {"sent": True}}]))
    asked = []
    rig.controller.cancel_requested = lambda: asked.append(1) or True
    state = rig.controller.advance(rig.state).state      # the plan: no call, nobody asks
    assert not asked
    transition = rig.controller.advance(state)
    assert transition.state.stop_reason == "cancelled" and "in flight" in transition.state.stop_detail
    kinds = [type(e).__name__ for e in transition.events]
    assert "AttemptFinished" in kinds
    decision = next(e for e in transition.events if type(e).__name__ == "DecisionMade")
    assert decision.decision == "stop_cancelled" and rig.executor.commits == 1
