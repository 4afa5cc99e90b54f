"""Planner calls written ahead: a worker lost mid-call leaves what the call spent, counted once."""
from __future__ import annotations

import pytest

from runtime.events import PlannerCallEnded
from runtime.intents import LeaseLost, NoIntentLog, PlannerCallIntent
from runtime.planning import PlannerCallCeiling, PlanProposal
from runtime.records import replace
from runtime.sim.scenario import prepare_scenario

PLAN = [{"id": "s1", "capability": "search", "arguments": {"q": "travel"}, "expected_outcome": "the policy"}]
CEILING = PlannerCallCeiling(tokens=2_500, cost=0.05)
ANSWER_TOKENS, ANSWER_COST = 150, 0.002


class Crash(Exception):
    """Stands for the process dying: nothing after it runs, nothing of the pass is kept."""


class MeteredPlanner:
    """A planner that calls out (an LLM endpoint): every call is served and spends ANSWER_TOKENS."""

    def __init__(self, crash_in_call=False):
        self.served = 0
        self.crash_in_call = crash_in_call

    def ceiling(self, request):
        return CEILING

    def propose(self, request):
        self.served += 1
        if self.crash_in_call:
            self.crash_in_call = False
            raise Crash()   # the worker died waiting for the answer: nobody saw what it spent
        return PlanProposal(plan=PLAN, tokens=ANSWER_TOKENS, cost=ANSWER_COST)


class MemoryIntentLog(NoIntentLog):
    def __init__(self, crash_after_answer=False):
        self.begun: list[PlannerCallIntent] = []
        self.answered: dict[str, tuple[int, float]] = {}
        self.pending: PlannerCallIntent | None = None
        self.crash_after_answer = crash_after_answer
        self.refuse = False

    def begin_planner_call(self, intent):
        if self.refuse:
            raise LeaseLost("taken over")
        self.begun.append(intent)

    def planner_call_answered(self, intent, tokens, cost):
        self.answered[intent.call_id] = (tokens, cost)
        if self.crash_after_answer:
            self.crash_after_answer = False
            raise Crash()   # the answer's figures are durable; the pass that would count them is not

    def interrupted_planner_call(self):
        if isinstance(self.pending, list):
            return self.pending.pop(0) if self.pending else None
        found, self.pending = self.pending, None
        return found

    def lose_the_worker(self):
        """What the next worker finds: the intent in flight, with the answer's figures if they were recorded."""
        intent = self.begun[-1]
        tokens, cost = self.answered.get(intent.call_id, (None, None))
        self.pending = replace(intent, answered_tokens=tokens, answered_cost=cost)


def rig(planner, log, **budgets):
    rig = prepare_scenario({
        "name": "metered", "goal": "Find the travel policy",
        "completion": {"capability": "search", "path": "documents.0.id", "equals": "POL-7"},
        "budgets": {"deadline_s": 60, **budgets},
        "capabilities": [{"name": "search", "responses": [{"return": {"documents": [{"id": "POL-7"}]}}]}],
        "planner": {"plans": [PLAN]}})
    rig.controller.planner, rig.controller.intents, rig.controller.abandon_on = planner, log, (Crash,)
    return rig


def lost_then_resumed(planner, log, **budgets):
    r = rig(planner, log, **budgets)
    with pytest.raises(Crash):
        r.controller.advance(r.state)
    log.lose_the_worker()
    state, events = r.state, []
    while not state.is_terminal:
        transition = r.controller.advance(state)
        events += transition.events
        state = transition.state
    return state, events


def ended(events):
    return [e for e in events if isinstance(e, PlannerCallEnded)]


def test_a_call_lost_without_an_answer_is_counted_once_at_its_ceiling_as_an_estimate():
    planner, log = MeteredPlanner(crash_in_call=True), MemoryIntentLog()
    state, events = lost_then_resumed(planner, log)
    assert state.stop_reason == "completed"
    assert planner.served == 2 and len(log.begun) == 2          # asked again: a new call, written ahead too
    assert state.usage.tokens == CEILING.tokens + ANSWER_TOKENS
    assert state.usage.cost == pytest.approx(CEILING.cost + ANSWER_COST)
    assert (state.usage.estimated_tokens, state.usage.estimated_cost) == (CEILING.tokens, CEILING.cost)
    lost, answered = ended(events)
    assert (lost.call_id, lost.lost, lost.estimated, lost.tokens) == (log.begun[0].call_id, True, True, CEILING.tokens)
    assert (answered.call_id, answered.lost, answered.estimated, answered.tokens) == (
        log.begun[1].call_id, False, False, ANSWER_TOKENS)
    # The lost call was made (an iteration) but brought no plan.
    assert state.usage.plans == 1 and state.usage.iterations == 3


def test_a_call_whose_answer_was_recorded_is_counted_once_at_the_answer_not_the_ceiling():
    planner, log = MeteredPlanner(), MemoryIntentLog(crash_after_answer=True)
    state, events = lost_then_resumed(planner, log)
    assert state.stop_reason == "completed" and planner.served == 2
    assert state.usage.tokens == 2 * ANSWER_TOKENS and state.usage.cost == pytest.approx(2 * ANSWER_COST)
    assert state.usage.estimated_tokens == 0 and state.usage.estimated_cost == 0.0
    lost, _answered = ended(events)
    assert lost.lost and not lost.estimated and lost.tokens == ANSWER_TOKENS


def test_a_lost_call_is_counted_by_the_one_pass_that_finds_it():
    planner, log = MeteredPlanner(crash_in_call=True), MemoryIntentLog()
    r = rig(planner, log)
    with pytest.raises(Crash):
        r.controller.advance(r.state)
    log.lose_the_worker()
    first = r.controller.advance(r.state)
    second = r.controller.advance(first.state)
    assert len(ended(first.events)) == 2 and ended(first.events)[0].lost
    assert not any(e.lost for e in ended(second.events))
    assert second.state.usage.estimated_tokens == CEILING.tokens


def test_two_calls_lost_in_a_row_are_both_counted_before_the_next_is_made():
    planner, log = MeteredPlanner(), MemoryIntentLog()
    r = rig(planner, log, max_tokens=2 * CEILING.tokens)
    log.pending = [PlannerCallIntent("a", 1, 0.0, CEILING.tokens, CEILING.cost),
                   PlannerCallIntent("b", 1, 1.0, CEILING.tokens, CEILING.cost)]
    transition = r.controller.advance(r.state)
    assert transition.state.stop_reason == "budget_exhausted:tokens" and planner.served == 0
    assert [e.call_id for e in ended(transition.events)] == ["a", "b"]
    assert transition.state.usage.estimated_tokens == 2 * CEILING.tokens


def test_the_estimate_counts_against_the_tokens_budget_and_refuses_the_next_planner_call():
    planner, log = MeteredPlanner(crash_in_call=True), MemoryIntentLog()
    state, events = lost_then_resumed(planner, log, max_tokens=CEILING.tokens)
    assert state.stop_reason == "budget_exhausted:tokens"
    assert planner.served == 1 and len(log.begun) == 1           # not asked again
    assert state.usage.tokens == state.usage.estimated_tokens == CEILING.tokens
    assert [e.lost for e in ended(events)] == [True]


def test_the_estimate_counts_against_the_cost_budget_too():
    planner, log = MeteredPlanner(crash_in_call=True), MemoryIntentLog()
    state, _events = lost_then_resumed(planner, log, max_cost=CEILING.cost)
    assert state.stop_reason == "budget_exhausted:cost" and planner.served == 1


def test_a_run_cancelled_after_a_lost_call_still_counts_it():
    planner, log = MeteredPlanner(crash_in_call=True), MemoryIntentLog()
    r = rig(planner, log)
    with pytest.raises(Crash):
        r.controller.advance(r.state)
    log.lose_the_worker()
    transition = r.controller.advance(replace(r.state, cancel_requested=True))
    assert transition.state.stop_reason == "cancelled"
    assert transition.state.usage.tokens == transition.state.usage.estimated_tokens == CEILING.tokens
    assert [e.lost for e in ended(transition.events)] == [True]


def test_a_lost_lease_before_the_call_calls_nothing():
    planner, log = MeteredPlanner(), MemoryIntentLog()
    log.refuse = True
    r = rig(planner, log)
    with pytest.raises(LeaseLost):
        r.controller.advance(r.state)
    assert planner.served == 0


def test_the_intent_says_what_it_asks_for_and_the_most_it_may_spend():
    planner, log = MeteredPlanner(), MemoryIntentLog()
    r = rig(planner, log)
    r.clock.sleep(3.0)
    r.controller.advance(r.state)
    (intent,) = log.begun
    assert (intent.revision, intent.started_at, intent.max_tokens, intent.max_cost) == (1, 3.0, CEILING.tokens,
                                                                                       CEILING.cost)
    assert log.answered == {intent.call_id: (ANSWER_TOKENS, ANSWER_COST)}


def test_planners_that_spend_nothing_elsewhere_are_not_written_ahead():
    log = MemoryIntentLog()
    r = rig(None, log)
    r.controller.planner = prepare_scenario({"name": "s", "goal": "g", "planner": {"plans": [PLAN]},
                                             "capabilities": [{"name": "search"}]}).controller.planner
    transition = r.controller.advance(r.state)
    assert transition.state.usage.plans == 1 and log.begun == [] and ended(transition.events) == []
