"""A registry-wide rate limit that refuses a call: the runtime waits, and counts nothing."""
from runtime.events import AttemptFinished, RunStopped
from runtime.ids import SequentialIds
from runtime.observation import AdmissionRefused
from runtime.sim.scenario import prepare_scenario

SEARCH = {"name": "search", "responses": [{"return": {"documents": [{"id": "POL-7"}]}}]}
FOUND = {"capability": "search", "path": "documents.0.id", "equals": "POL-7"}


class RefusingFirst:
    """Refuses the first `n` calls as a rate limiter would, then lets them through."""

    def __init__(self, inner, n, retry_after_s):
        self.inner, self.n, self.retry_after_s = inner, n, retry_after_s

    def execute(self, spec, arguments, **kw):
        if self.n > 0:
            self.n -= 1
            return AdmissionRefused(self.retry_after_s, "search allows 1 call per 5 s")
        return self.inner.execute(spec, arguments, **kw)

    def lookup_status(self, spec, arguments, **kw):
        return self.inner.lookup_status(spec, arguments, **kw)


def rig_with(n, retry_after_s, **budgets):
    rig = prepare_scenario({"name": "rate limited", "goal": "find", "completion": FOUND, "capabilities": [SEARCH],
                            "budgets": budgets,
                            "planner": {"plans": [[{"capability": "search", "arguments": {"q": "travel"}}]]}},
                           ids=SequentialIds("t"))
    rig.controller.executor = RefusingFirst(rig.executor, n, retry_after_s)
    return rig


def test_refusals_are_waits_not_calls():
    rig = rig_with(6, 2.5, max_tool_calls=1, max_iterations=2)
    events = []
    final = rig.controller.run_until_pause(rig.state, on_transition=lambda t: events.extend(t.events))
    assert final.stop_reason == "completed"
    assert (final.usage.tool_calls, final.usage.iterations, final.usage.retries) == (1, 2, 0)
    assert rig.clock.now() == 15.0
    assert len([e for e in events if isinstance(e, AttemptFinished)]) == 1


def test_a_refusal_whose_wait_crosses_the_deadline_stops_at_once():
    rig = rig_with(1, 30, deadline_s=10)
    events = []
    final = rig.controller.run_until_pause(rig.state, on_transition=lambda t: events.extend(t.events))
    assert final.stop_reason == "budget_exhausted:deadline" and final.usage.tool_calls == 0
    assert rig.clock.now() == 0.0
    assert "would end after the deadline" in [e for e in events if isinstance(e, RunStopped)][0].detail


def test_attempt_ids_come_from_the_injected_source():
    rig = rig_with(0, 0)
    events = []
    rig.controller.run_until_pause(rig.state, on_transition=lambda t: events.extend(t.events))
    attempt = [e for e in events if isinstance(e, AttemptFinished)][0]
    assert attempt.attempt_id == "t" + "1".rjust(31, "0")
