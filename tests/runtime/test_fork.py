"""A fork's first checkpoint (runtime.fork): inherited history, the planner asked first, settled side
effects never sent again, idempotency keys kept across the line."""
from runtime.events import AttemptFinished, RunStopped
from runtime.fork import forked_state, reconciled
from runtime.observation import ErrorCode, Observation, SideEffectStatus
from runtime.sim.scenario import prepare_scenario

SEARCH = {"name": "search", "retry": {"max_attempts": 1},
          "schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}
TICKET = {"name": "ticket", "side_effect": "write", "retry": {"max_attempts": 1}}
FOUND = {"capability": "search", "path": "documents.0.id", "equals": "POL-7"}
PLAN = [{"id": "t", "capability": "ticket", "arguments": {"title": "x"}},
        {"id": "s", "capability": "search", "arguments": {"q": "travel"}, "depends_on": ["t"]}]


def scenario(search_responses, ticket_responses=({"return": {"ticket": "T-1"}, "state_changed": True},)):
    return {"name": "fork", "goal": "file it, then find it", "completion": FOUND,
            "capabilities": [{**TICKET, "responses": list(ticket_responses)},
                             {**SEARCH, "responses": list(search_responses)}],
            "planner": {"plans": [PLAN]}}


def events_of(rig, state):
    events = []
    final = rig.controller.run_until_pause(state, on_transition=lambda t: events.extend(t.events))
    return final, events


def source_run():
    rig = prepare_scenario(scenario([{"raise": "not_found"}]))
    final, events = events_of(rig, rig.state)
    assert final.stop_reason == "terminal_failure:not_found"
    ticket = next(e for e in events if isinstance(e, AttemptFinished) and e.capability == "ticket")
    return rig, final, ticket


def fork_of(final, rig, settled, completion=FOUND):
    return forked_state(run_id="fork-1", goal=final.goal, completion=completion, budgets=final.budgets,
                        started_at=rig.clock.now(), trace_id="fork-trace", key_scope=final.run_id,
                        inherited=final.history, settled_keys=settled, reason="resumed after a fix")


def test_a_resumed_run_asks_its_planner_with_the_inherited_history_first():
    rig, final, ticket = source_run()
    state = fork_of(final, rig, {ticket.idempotency_key})
    assert state.planning.reason_code == "new_information" and state.planning.reason == "resumed after a fix"
    assert [e.capability for e in state.history] == ["ticket", "search"]
    assert state.usage.tool_calls == 0 and state.revision == 0


def test_a_side_effect_committed_before_the_fork_point_is_never_sent_again():
    rig, final, ticket = source_run()
    fork_rig = prepare_scenario(scenario([{"return": {"documents": [{"id": "POL-7"}]}}], ticket_responses=[]))
    final_fork, events = events_of(fork_rig, fork_of(final, rig, {ticket.idempotency_key}))
    assert [e.capability for e in events if isinstance(e, AttemptFinished)] == ["search"]
    assert final_fork.stop_reason == "completed" and final_fork.usage.side_effects == 0
    done = final_fork.step_progress("t")
    assert done.status == "succeeded" and done.committed and done.last_observation["settled_before_fork"]


def test_a_side_effect_not_settled_is_sent_again_with_the_key_it_was_first_sent_with():
    rig, final, ticket = source_run()
    fork_rig = prepare_scenario(scenario([{"return": {"documents": [{"id": "POL-7"}]}}]))
    _, events = events_of(fork_rig, fork_of(final, rig, set()))
    again = next(e for e in events if isinstance(e, AttemptFinished) and e.capability == "ticket")
    assert again.idempotency_key == ticket.idempotency_key


def test_a_settled_side_effect_that_was_all_the_plan_wanted_completes_the_run():
    rig, final, ticket = source_run()
    state = fork_of(final, rig, {ticket.idempotency_key}, completion=None)   # a plan's success completes
    completes = prepare_scenario({**scenario([], ticket_responses=[]), "completion": None,
                                  "planner": {"plans": [[PLAN[0]]]}})
    final_fork, events = events_of(completes, state)
    assert final_fork.stop_reason == "completed" and not [e for e in events if isinstance(e, AttemptFinished)]
    assert "committed before the fork point" in next(e for e in events if isinstance(e, RunStopped)).detail


def test_a_reconciled_observation_is_what_the_person_found():
    unknown = Observation.failure(ErrorCode.TIMEOUT, "timed out", side_effect=SideEffectStatus.UNKNOWN)
    done = reconciled(unknown, committed=True, evidence="T-7 exists", by="otto")
    assert (done.status.value, done.side_effect, done.state_changed) == ("ok", SideEffectStatus.COMMITTED, True)
    assert done.output["reconciliation"]["evidence"] == "T-7 exists"
    not_done = reconciled(unknown, committed=False, evidence="nothing", by="otto")
    assert not_done.side_effect is SideEffectStatus.NOT_COMMITTED and not_done.error_code is ErrorCode.TIMEOUT
