"""Controller behaviour: every stop path records a reason, one pass at a time."""
import json
from dataclasses import replace
from pathlib import Path

import pytest

from runs.runtime.approvals import ApprovalDecision
from runs.runtime.controller import Controller
from runs.runtime.events import (
    ApprovalRequested,
    AttemptFinished,
    DecisionMade,
    PlanProposed,
    RunStopped,
    StatusChanged,
)
from runs.runtime.observation import Observation, SideEffectStatus
from runs.runtime.planning import PlanProposal
from runs.runtime.sim.scenario import prepare_scenario, run_scenario
from runs.runtime.state import RunState
from runs.runtime.stop import RunStatus

SEARCH = {"name": "search", "timeout_s": 2, "retry": {"max_attempts": 1},
          "schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
          "responses": [{"return": {"documents": [{"id": "POL-7"}]}}]}
TICKET = {"name": "ticket", "side_effect": "write", "permission": "tickets.create", "retry": {"max_attempts": 1},
          "responses": [{"return": {"ticket": "T-1"}}]}
SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
FOUND = {"capability": "search", "path": "documents.0.id", "equals": "POL-7"}


def scenario(**kw):
    base = {"name": "test", "goal": "find it", "completion": FOUND, "capabilities": [SEARCH],
            "planner": {"plans": [[{"capability": "search", "arguments": {"q": "travel"}}]]}}
    base.update(kw)
    return base


def run_collecting(rig, state=None):
    events = []
    final = rig.controller.run_until_pause(state or rig.state, on_transition=lambda t: events.extend(t.events))
    return final, events


def of_type(events, kind):
    return [e for e in events if isinstance(e, kind)]


# -- stop paths ----------------------------------------------------------------------------------

def test_it_completes_and_records_the_stop():
    result = run_scenario(scenario())
    assert (result.status, result.stop_reason) == ("completed", "completed")
    stopped = of_type(result.events, RunStopped)
    assert len(stopped) == 1 and stopped[0].detail and stopped[0].attempt_id


def test_it_stops_cancelled_when_an_operator_cancelled():
    rig = prepare_scenario(scenario())
    first = rig.controller.advance(rig.state)          # the planning pass
    transition = rig.controller.advance(replace(first.state, cancel_requested=True))
    assert transition.state.status is RunStatus.CANCELLED
    assert transition.state.stop_reason == "cancelled" and transition.state.stop_detail
    assert transition.wait_s is None
    assert rig.executor.consumed == {}


def test_it_records_an_internal_error_instead_of_crashing():
    rig = prepare_scenario(scenario())

    class Broken:
        def propose(self, request):
            raise RuntimeError("model endpoint exploded")

    rig.controller.planner = Broken()
    transition = rig.controller.advance(rig.state)
    assert transition.state.stop_reason == "internal_error"
    assert "RuntimeError: model endpoint exploded" in transition.state.stop_detail
    assert isinstance(transition.events[-1], RunStopped)


def test_it_checks_the_permission_again_immediately_before_execution():
    rig = prepare_scenario(scenario(capabilities=[SEARCH, TICKET],
                                    completion={"capability": "ticket", "path": "ticket", "exists": True},
                                    planner={"plans": [[{"capability": "ticket", "arguments": {"title": "x"}}]]}))
    after_plan = rig.controller.advance(rig.state).state
    assert after_plan.revision == 1

    class Revoked:
        def permits(self, permission):
            return permission != "tickets.create"

    rig.controller.authorizer = Revoked()
    final, _ = run_collecting(rig, after_plan)
    assert final.stop_reason == "terminal_failure:permission_denied"
    assert "tickets.create" in final.stop_detail
    assert "the owner no longer holds" in final.stop_detail  # it held it when the plan was validated
    assert final.usage.tool_calls == 0 and rig.executor.commits == 0


def test_a_read_permission_never_held_is_said_to_be_not_held():
    # A read capability's permission is checked only at the point of action: never "no longer".
    secret = {**SEARCH, "side_effect": "read", "permission": "docs.read"}

    class Never:
        def permits(self, permission):
            return permission != "docs.read"

    rig = prepare_scenario(scenario(capabilities=[secret]))
    rig.controller.authorizer = Never()
    final, _ = run_collecting(rig)
    assert final.stop_reason == "terminal_failure:permission_denied"
    assert "the owner does not hold 'docs.read'" in final.stop_detail


@pytest.mark.parametrize("change, reason", [("disable", "terminal_failure:permission_denied"),
                                            ("remove", "terminal_failure:not_found")])
def test_it_stops_when_the_capability_is_gone_at_the_point_of_action(change, reason):
    rig = prepare_scenario(scenario())
    after_plan = rig.controller.advance(rig.state).state
    specs = rig.controller.registry.specs
    if change == "disable":
        specs["search"] = replace(specs["search"], enabled=False)
    else:
        del specs["search"]
    final, _ = run_collecting(rig, after_plan)
    assert final.stop_reason == reason and final.usage.tool_calls == 0


def test_no_verification_runs_once_the_deadline_passed_during_a_call():
    rig = prepare_scenario(scenario(budgets={"deadline_s": 5}))

    class Overrunning:
        def execute(self, spec, arguments, **kw):
            rig.clock.advance(7)   # an executor that overran its timeout
            return Observation.success({"documents": [{"id": "POL-7"}]})

        def lookup_status(self, *a, **kw):
            return None

    rig.controller.executor = Overrunning()
    final, events = run_collecting(rig)
    assert final.stop_reason == "budget_exhausted:deadline"
    assert of_type(events, DecisionMade)[-1].decision == "stop_budget"


def test_it_stops_stalled_when_the_planner_proposes_no_plan():
    result = run_scenario(scenario(planner={"plans": []}))
    assert result.stop_reason == "stalled" and result.state.stall_kind == "planner_exhausted"
    assert result.state.stop_detail == "planner_exhausted: the planner proposed no plan; no attempt failed"


def test_a_second_consecutive_rejection_stops_plan_rejected_and_the_planner_saw_the_errors():
    rig = prepare_scenario(scenario())
    seen = []

    class Stubborn:
        def propose(self, request):
            seen.append(request)
            return PlanProposal(plan=[{"capability": "nope"}], tokens=10)

    rig.controller.planner = Stubborn()
    final, events = run_collecting(rig)
    assert final.stop_reason == "plan_rejected" and "unknown_capability" in final.stop_detail
    assert [r.reason_code for r in seen] == [None, "plan_rejected"]
    assert [e.code for e in seen[1].validation_errors] == ["unknown_capability"]
    assert seen[1].previous_plan == ({"capability": "nope"},)
    assert [p.accepted for p in of_type(events, PlanProposed)] == [False, False]
    assert final.usage.tokens == 20


def test_a_rejection_when_no_revision_is_left_stops_on_the_revision_budget():
    result = run_scenario(scenario(budgets={"max_revisions": 0}, planner={"plans": [[{"capability": "nope"}]]}))
    assert result.stop_reason == "budget_exhausted:revisions"


def test_a_corrected_plan_resets_the_rejection_count():
    plans = [[{"capability": "nope"}], [{"capability": "search", "arguments": {"q": "a"}}],
             [{"capability": "nope"}], [{"capability": "search", "arguments": {"q": "b"}}]]
    caps = [dict(SEARCH, responses=[{"return": {"documents": []}}, {"return": {"documents": [{"id": "POL-7"}]}}])]
    result = run_scenario(scenario(capabilities=caps, planner={"plans": plans}))
    assert result.status == "completed" and result.revisions == 4


# -- approvals -----------------------------------------------------------------------------------

APPROVAL = dict(capabilities=[dict(TICKET, requires_approval=True)],
                completion={"capability": "ticket", "path": "ticket", "exists": True},
                planner={"plans": [[{"capability": "ticket", "arguments": {"title": "x"}}]]})


def test_an_undecided_approval_returns_no_events_and_no_wait():
    rig = prepare_scenario(scenario(**APPROVAL))
    state, events = run_collecting(rig)
    assert state.status is RunStatus.AWAITING_APPROVAL and state.stop_reason is None
    assert of_type(events, ApprovalRequested)[0].arguments == {"title": "x"}
    again = rig.controller.advance(state)
    assert again.events == () and again.wait_s is None and again.state is state


def test_an_approval_binds_to_the_arguments_hash_and_revision():
    rig = prepare_scenario(scenario(**APPROVAL))
    state, events = run_collecting(rig)
    request = state.pending_approval
    assert (request.kind, request.revision, request.step_id, request.capability) == ("step", 1, "s1", "ticket")
    assert request.arguments_hash
    rig.approvals.answered[request.key] = ApprovalDecision.approve("fine", "alice")
    final, _ = run_collecting(rig, state)
    assert final.status is RunStatus.COMPLETED and rig.executor.commits == 1


def test_a_new_revision_needs_a_new_approval_but_a_retry_does_not():
    caps = [dict(TICKET, requires_approval=True, retry={"max_attempts": 2, "backoff_s": 1},
                 responses=[{"raise": "server_error"}, {"raise": "server_error"}, {"return": {"ticket": "T-1"}}])]
    plans = [[{"capability": "ticket", "arguments": {"title": "x"}}], [{"capability": "ticket", "arguments": {"title": "x"}}]]
    result = run_scenario(scenario(capabilities=caps, completion={"capability": "ticket", "path": "ticket", "exists": True},
                                   planner={"plans": plans}, approvals=[{"decision": "approve"}, {"decision": "approve"}]))
    requests = [e.request for e in of_type(result.events, ApprovalRequested)]
    assert [r.revision for r in requests] == [1, 2]
    assert result.status == "completed" and result.tool_calls == 3 and result.retries == 1


def test_a_rejected_approval_stops_with_the_comment_as_detail():
    result = run_scenario(scenario(**APPROVAL, approvals=[{"decision": "reject", "comment": "too risky"}]))
    assert result.stop_reason == "approval_rejected" and result.state.stop_detail == "too risky"


def test_plan_approval_is_asked_again_only_when_a_revision_adds_side_effects():
    caps = [dict(SEARCH, responses=[{"return": {"documents": []}}]), TICKET]
    plans = [[{"capability": "search", "arguments": {"q": "a"}}],
             [{"capability": "search", "arguments": {"q": "b"}}],
             [{"capability": "ticket", "arguments": {"title": "x"}}]]
    result = run_scenario(scenario(capabilities=caps, require_plan_approval=True, planner={"plans": plans},
                                   completion={"capability": "ticket", "path": "ticket", "exists": True},
                                   approvals=[{"decision": "approve"}, {"decision": "approve"}]))
    kinds = [(e.request.kind, e.request.revision) for e in of_type(result.events, ApprovalRequested)]
    assert kinds == [("plan", 1), ("plan", 3)]
    assert result.status == "completed"


def test_a_rejected_plan_approval_stops_the_run():
    result = run_scenario(scenario(require_plan_approval=True, approvals=[{"decision": "reject", "comment": "no"}]))
    assert result.stop_reason == "approval_rejected" and result.tool_calls == 0


# -- execution details ---------------------------------------------------------------------------

class Recording:
    """Wraps the simulated executor and records what the controller asked."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def execute(self, spec, arguments, **kw):
        self.calls.append(kw)
        return self.inner.execute(spec, arguments, **kw)

    def lookup_status(self, spec, arguments, **kw):
        return self.inner.lookup_status(spec, arguments, **kw)


def test_the_timeout_is_the_smallest_of_capability_budget_and_remaining_deadline():
    rig = prepare_scenario(scenario(budgets={"deadline_s": 100, "per_call_timeout_s": 3},
                                    capabilities=[dict(SEARCH, timeout_s=10,
                                                       responses=[{"return": {"documents": []}, "latency_s": 1}])],
                                    planner={"plans": [[{"capability": "search", "arguments": {"q": "a"}}],
                                                       [{"capability": "search", "arguments": {"q": "b"}}]]}))
    rig.controller.executor = recording = Recording(rig.executor)
    rig.controller.run_until_pause(replace(rig.state, budgets=replace(rig.state.budgets, deadline_s=3.5)))
    assert [c["timeout_s"] for c in recording.calls] == [3, 2.5]


def test_side_effecting_retries_reuse_the_idempotency_key_and_reads_carry_none():
    caps = [SEARCH, dict(TICKET, retry={"max_attempts": 2, "backoff_s": 1},
                         responses=[{"raise": "server_error"}, {"return": {"ticket": "T-1"}}])]
    plans = [[{"capability": "search", "arguments": {"q": "a"}}, {"capability": "ticket", "arguments": {"title": "x"}}]]
    rig = prepare_scenario(scenario(capabilities=caps, planner={"plans": plans},
                                    completion={"capability": "ticket", "path": "ticket", "exists": True}))
    rig.controller.executor = recording = Recording(rig.executor)
    final, events = run_collecting(rig)
    keys = [c["idempotency_key"] for c in recording.calls]
    assert keys[0] is None and keys[1] and keys[1] == keys[2]
    assert [a.kind for a in of_type(events, AttemptFinished)] == ["call", "call", "retry"]
    assert final.status is RunStatus.COMPLETED


def test_every_attempt_gets_a_decision_with_a_usage_snapshot():
    result = run_scenario(SCENARIOS / "commit_then_timeout_idempotent.json")
    attempts = of_type(result.events, AttemptFinished)
    decisions = {d.attempt_id: d for d in of_type(result.events, DecisionMade)}
    assert [a.kind for a in attempts] == ["call", "resolve"]
    assert [decisions[a.attempt_id].usage["retries"] for a in attempts] == [0, 1]
    for attempt in attempts:
        assert decisions[attempt.attempt_id].usage["tool_calls"] >= 1
    assert decisions[attempts[0].attempt_id].decision == "resolve"


def test_a_status_lookup_that_cannot_tell_stops_outcome_unknown():
    caps = [dict(TICKET, status_lookup=True, responses=[{"commit_then_timeout": True, "return": {"ticket": "T-1"}}])]
    rig = prepare_scenario(scenario(capabilities=caps, completion={"capability": "ticket", "path": "ticket", "exists": True},
                                    planner={"plans": [[{"capability": "ticket", "arguments": {"title": "x"}}]]}))

    class CannotTell(Recording):
        def lookup_status(self, spec, arguments, **kw):
            return None

    rig.controller.executor = CannotTell(rig.executor)
    final, _ = run_collecting(rig)
    assert final.stop_reason == "terminal_failure:outcome_unknown"


def test_a_retry_waits_for_its_backoff_before_the_next_call():
    caps = [dict(SEARCH, retry={"max_attempts": 2, "backoff_s": 4},
                 responses=[{"raise": "server_error"}, {"return": {"documents": [{"id": "POL-7"}]}}])]
    rig = prepare_scenario(scenario(capabilities=caps))
    state = rig.controller.advance(rig.state).state
    transition = rig.controller.advance(state)
    assert 2 <= transition.wait_s <= 4 and transition.state.not_before == pytest.approx(transition.wait_s)
    early = rig.controller.advance(transition.state)
    assert early.events == () and early.wait_s == pytest.approx(transition.wait_s)
    rig.clock.sleep(transition.wait_s)
    assert rig.controller.advance(transition.state).state.status is RunStatus.COMPLETED


def test_a_terminal_state_is_returned_unchanged():
    result = run_scenario(scenario())
    rig = prepare_scenario(scenario())
    transition = rig.controller.advance(result.state)
    assert transition.state is result.state and transition.events == () and transition.wait_s is None


def test_the_first_pass_marks_the_run_running():
    rig = prepare_scenario(scenario())
    transition = rig.controller.advance(rig.state)
    assert transition.events[0] == StatusChanged("running")


def test_a_revision_records_its_trigger_reason_and_changes():
    caps = [dict(SEARCH, responses=[{"return": {"documents": []}}, {"return": {"documents": [{"id": "POL-7"}]}}])]
    plans = [[{"capability": "search", "arguments": {"q": "a"}}],
             {"steps": [{"capability": "search", "arguments": {"q": "b"}}], "reason_code": "step_unnecessary",
              "reason": "broaden"}]
    result = run_scenario(scenario(capabilities=caps, planner={"plans": plans}))
    first, second = of_type(result.events, PlanProposed)
    attempt = of_type(result.events, AttemptFinished)[0]
    assert first.reason_code is None and first.capabilities_seen == ("search",)
    assert second.triggering_attempt_id == attempt.attempt_id
    assert second.reason_code == "step_unnecessary" and second.reason == "broaden"
    assert second.changes["changed"] == ["s1: arguments"]


def test_without_completion_criteria_a_fully_successful_plan_completes():
    plans = [[{"capability": "search", "arguments": {"q": "a"}}, {"capability": "search", "arguments": {"q": "b"}}]]
    result = run_scenario(scenario(completion=None, planner={"plans": plans}))
    assert result.status == "completed" and result.tool_calls == 2


def test_direct_mode_runs_one_step_and_never_replans():
    data = scenario(capabilities=[dict(SEARCH, responses=[{"return": {"documents": []}}])],
                    direct={"capability": "search", "arguments": {"q": "travel"}})
    result = run_scenario(data, mode="direct")
    assert result.stop_reason == "stalled" and "direct mode" in result.state.stop_detail
    assert result.tool_calls == 1 and result.revisions == 1


def test_steps_run_in_dependency_order():
    plans = [[{"id": "b", "capability": "search", "arguments": {"q": "b"}, "depends_on": ["a"]},
              {"id": "a", "capability": "search", "arguments": {"q": "a"}}]]
    result = run_scenario(scenario(completion=None, planner={"plans": plans}))
    assert [a.step_id for a in of_type(result.events, AttemptFinished)] == ["a", "b"]


def test_the_state_stays_bounded_over_thousands_of_attempts():
    caps = [{"name": "status", "polling": {"max_attempts": 2000, "interval_s": 1},
             "responses": [{"return": {"state": "running"}}]}]
    result = run_scenario(scenario(capabilities=caps, completion={"capability": "status", "path": "state", "equals": "done"},
                                   budgets={"max_iterations": 5000, "max_tool_calls": 5000, "deadline_s": 10000},
                                   planner={"plans": [[{"capability": "status", "arguments": {}}]]}))
    assert result.tool_calls == 2000
    assert len(result.state.history) == 20
    assert len(json.dumps(result.state.to_dict())) < 20_000


def test_the_state_round_trips_through_json():
    result = run_scenario(SCENARIOS / "state_change_between_identical_calls_is_progress.json")
    for state in (result.state, prepare_scenario(scenario(**APPROVAL)).state):
        assert RunState.from_dict(json.loads(json.dumps(state.to_dict()))) == state
    rig = prepare_scenario(scenario(**APPROVAL))
    waiting = rig.controller.run_until_pause(rig.state)
    assert RunState.from_dict(json.loads(json.dumps(waiting.to_dict()))) == waiting


def test_committed_side_effects_are_counted_for_the_rate_budget():
    result = run_scenario(SCENARIOS / "approval_granted.json")
    assert result.state.usage.side_effects == 1 and len(result.state.usage.side_effect_times) == 1


def test_an_executor_failure_that_raises_becomes_an_internal_error():
    rig = prepare_scenario(scenario())

    class Raising(Recording):
        def execute(self, spec, arguments, **kw):
            raise ConnectionError("socket closed")

    rig.controller.executor = Raising(rig.executor)
    final, events = run_collecting(rig)
    assert final.stop_reason == "internal_error" and "ConnectionError" in final.stop_detail


def test_a_controller_accepts_any_objects_matching_the_ports():
    from runs.runtime import ports
    rig = prepare_scenario(scenario())
    c: Controller = rig.controller
    assert isinstance(c.registry, ports.CapabilityRegistry) and isinstance(c.executor, ports.Executor)
    assert isinstance(c.planner, ports.Planner) and isinstance(c.clock, ports.Clock)
    assert isinstance(c.authorizer, ports.Authorizer) and isinstance(c.approvals, ports.ApprovalBook)
    assert isinstance(c.ids, ports.IdSource)


def test_a_resolved_commit_is_observed_as_committed():
    result = run_scenario(SCENARIOS / "commit_then_timeout_status_lookup.json")
    kinds = [a.kind for a in of_type(result.events, AttemptFinished)]
    resolve = of_type(result.events, AttemptFinished)[-1]
    # The lookup is in the trace as an attempt of its own kind (a tool call, not a retry).
    assert kinds == ["call", "lookup"]
    assert resolve.observation.side_effect is SideEffectStatus.COMMITTED
    assert resolve.observation.extra["resolved_by"] == "status_lookup"
    assert isinstance(c := result.state.usage.calls_per_capability, dict) and c == {"create_ticket": 2}


def test_reaching_the_iteration_limit_exactly_on_the_completing_call_still_completes():
    result = run_scenario(scenario(budgets={"max_iterations": 2}))
    assert result.status == "completed" and result.state.usage.iterations == 2


def test_an_unknown_outcome_is_resolved_only_for_side_effecting_capabilities():
    caps = [dict(SEARCH, retry={"max_attempts": 2, "backoff_s": 1},
                 responses=[{"raise": "timeout"}, {"return": {"documents": [{"id": "POL-7"}]}}])]
    result = run_scenario(scenario(capabilities=caps))
    assert [a.kind for a in of_type(result.events, AttemptFinished)] == ["call", "retry"]
    assert result.status == "completed"


def test_a_stall_records_its_kind_and_the_last_failing_observation():
    result = run_scenario(SCENARIOS / "planner_exhausted_after_failures.json")
    assert result.state.stall_kind == "planner_exhausted"
    assert result.state.stop_detail.startswith("planner_exhausted: the planner has no further plan after: ")
    assert result.state.stop_detail.endswith(
        'last failing observation: search_documents {"q":"travel policy"}: retryable server_error')
    stopped = of_type(result.events, RunStopped)[0]
    assert stopped.stall_kind == "planner_exhausted" and stopped.attempt_id == result.state.last_attempt_id


def test_a_repetition_with_a_503_names_the_http_status():
    result = run_scenario(SCENARIOS / "identical_503_with_request_id_stalls.json")
    assert result.state.stall_kind == "repeated_without_progress"
    assert result.state.stop_detail.endswith("(HTTP 503)")
