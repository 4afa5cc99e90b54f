"""Write-ahead intents: a worker lost mid-call is resumed through the unknown-outcome path."""
from __future__ import annotations

import pytest

from runtime.intents import CallIntent, LeaseLost, NoIntentLog
from runtime.sim.scenario import prepare_scenario


class Crash(Exception):
    """Stands for the process dying: nothing after it runs, nothing of the pass is kept."""


class MemoryIntentLog(NoIntentLog):
    def __init__(self):
        self.begun: list[CallIntent] = []
        self.pending: CallIntent | None = None
        self.refuse = False

    def begin(self, intent: CallIntent) -> None:
        if self.refuse:
            raise LeaseLost("taken over")
        self.begun.append(intent)

    def interrupted(self) -> CallIntent | None:
        found, self.pending = self.pending, None
        return found


class CrashAfterCall:
    """The real (simulated) call happens, then the worker dies before anything is recorded."""

    def __init__(self, inner):
        self.inner = inner
        self.armed = True

    def execute(self, spec, arguments, **kw):
        observation = self.inner.execute(spec, arguments, **kw)
        if self.armed:
            self.armed = False
            raise Crash()
        return observation

    def lookup_status(self, spec, arguments, **kw):
        return self.inner.lookup_status(spec, arguments, **kw)


def scenario(**capability):
    return {
        "name": "write once", "goal": "Open a ticket",
        "completion": {"capability": "create_ticket", "path": "ticket", "exists": True},
        "capabilities": [{"name": "create_ticket", "side_effect": "write", "retry": {"max_attempts": 3},
                          "responses": [{"return": {"ticket": "T-1"}}, {"return": {"ticket": "T-2"}}],
                          **capability}],
        "planner": {"plans": [[{"capability": "create_ticket", "arguments": {"title": "x"}}]]},
    }


def crashed_then_resumed(**capability):
    rig = prepare_scenario(scenario(**capability))
    log = MemoryIntentLog()
    executor = CrashAfterCall(rig.executor)
    rig.controller.intents, rig.controller.executor, rig.controller.abandon_on = log, executor, (Crash,)
    state = rig.controller.advance(rig.state).state          # the plan
    with pytest.raises(Crash):
        rig.controller.advance(state)                        # the call commits, then the worker dies
    assert len(log.begun) == 1 and rig.executor.commits == 1
    log.pending = log.begun[0]                               # what the next worker finds in flight
    transitions = []
    while not state.is_terminal:
        transition = rig.controller.advance(state)
        transitions.append(transition)
        state = transition.state
        rig.clock.sleep(transition.wait_s or 0)    # a lookup waits out the lost call's settle window
    return rig, log, state, [e for t in transitions for e in t.events]


def test_an_idempotent_call_lost_mid_flight_is_re_sent_with_the_same_key_and_commits_once():
    rig, log, state, events = crashed_then_resumed(idempotent=True)
    assert state.stop_reason == "completed"
    assert rig.executor.commits == 1                         # the re-send was deduplicated
    attempts = [e for e in events if type(e).__name__ == "AttemptFinished"]
    assert attempts[0].attempt_id == log.begun[0].attempt_id  # the lost call is in the trace
    assert attempts[0].observation.side_effect.value == "unknown"
    assert {a.idempotency_key for a in attempts} == {log.begun[0].idempotency_key}
    assert attempts[1].kind == "resolve" and log.begun[1].kind == "resolve"   # the re-send had its intent


def test_a_lost_call_with_a_status_lookup_is_looked_up_not_repeated():
    rig, log, state, events = crashed_then_resumed(status_lookup=True)
    assert state.stop_reason == "completed" and state.latest_ok_outputs["create_ticket"] == {"ticket": "T-1"}
    assert rig.executor.commits == 1 and len(log.begun) == 1


def test_a_lost_call_is_looked_up_only_once_its_settle_window_has_passed_since_it_was_sent():
    rig, log, state, events = crashed_then_resumed(status_lookup=True, timeout_s=3, settle_s=7)
    lookups = [e for e in events if type(e).__name__ == "AttemptFinished" and e.kind == "lookup"]
    assert len(lookups) == 1 and lookups[0].started_at == log.begun[0].started_at + 7
    assert rig.executor.commits == 1 and state.stop_reason == "completed"


def test_a_lost_call_that_can_be_neither_deduplicated_nor_looked_up_stops_outcome_unknown():
    rig, log, state, events = crashed_then_resumed()
    assert state.stop_reason == "terminal_failure:outcome_unknown"
    assert rig.executor.commits == 1 and len(log.begun) == 1


def test_a_lost_lease_before_the_call_sends_nothing_and_records_nothing():
    rig = prepare_scenario(scenario(idempotent=True))
    log = MemoryIntentLog()
    rig.controller.intents = log
    state = rig.controller.advance(rig.state).state
    log.refuse = True
    with pytest.raises(LeaseLost):
        rig.controller.advance(state)
    assert rig.executor.commits == 0


def test_reads_need_no_intent():
    spec = scenario()
    spec["capabilities"][0]["side_effect"] = "read"
    rig = prepare_scenario(spec)
    log = MemoryIntentLog()
    rig.controller.intents = log
    state = rig.state
    while not state.is_terminal:
        state = rig.controller.advance(state).state
    assert state.stop_reason == "completed" and log.begun == []
