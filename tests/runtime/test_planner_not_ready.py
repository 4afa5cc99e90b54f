"""A planner that has no answer yet, and the other planner signals the controller honours."""
from dataclasses import replace

from runtime.controller import Controller
from runtime.events import PlanProposed, RunStopped, StatusChanged
from runtime.plan import PlanError
from runtime.planning import PlanNotReady, PlanProposal
from runtime.sim.scenario import prepare_scenario
from runtime.stop import RunStatus

SEARCH = {"name": "search", "timeout_s": 2, "retry": {"max_attempts": 1},
          "schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
          "responses": [{"return": {"documents": []}}, {"return": {"documents": [{"id": "POL-7"}]}}]}
FOUND = {"capability": "search", "path": "documents.0.id", "equals": "POL-7"}
STEP = {"id": "s1", "capability": "search", "arguments": {"q": "travel"}}


class MailboxPlanner:
    """Answers from a dict keyed by revision, PlanNotReady when the key is missing."""

    def __init__(self):
        self.plans = {}
        self.requests = []

    def propose(self, request):
        self.requests.append(request)
        if request.revision not in self.plans:
            return PlanNotReady(f"nothing for revision {request.revision} yet")
        return self.plans[request.revision]


def rig_with(planner, **budgets):
    rig = prepare_scenario({"name": "not ready", "goal": "find it", "completion": FOUND, "capabilities": [SEARCH],
                            "budgets": {"deadline_s": 60, **budgets}, "planner": {"plans": [[STEP]]}})
    c = rig.controller
    rig.controller = Controller(c.registry, c.executor, planner, c.clock, c.authorizer, c.approvals, rng=c.rng)
    return rig


def test_it_waits_without_counting_anything_while_the_plan_is_not_ready():
    planner = MailboxPlanner()
    rig = rig_with(planner)
    first = rig.controller.advance(rig.state)
    # The run starts running (that is recorded), then simply waits.
    assert [type(e) for e in first.events] == [StatusChanged]
    assert first.state.status is RunStatus.RUNNING and first.wait_s is None
    assert first.state.usage.iterations == 0 and first.state.usage.plans == 0
    again = rig.controller.advance(first.state)
    assert again.events == () and again.wait_s is None and again.state is first.state
    assert [r.revision for r in planner.requests] == [1, 1]


def test_it_takes_the_plan_once_it_arrives_and_runs_to_completion():
    planner = MailboxPlanner()
    rig = rig_with(planner)
    state = rig.controller.advance(rig.state).state
    planner.plans[1] = PlanProposal(plan=[STEP], tokens=50, cost=0.01)
    state = rig.controller.run_until_pause(state)
    # The empty search asks for revision 2, which is not there yet: the run waits again.
    assert state.status is RunStatus.RUNNING and state.planning is not None
    assert state.usage.plans == 1 and state.usage.tokens == 50
    iterations = state.usage.iterations
    assert rig.controller.advance(state).events == ()
    planner.plans[2] = PlanProposal(plan=[{**STEP, "arguments": {"q": "travel policy"}}],
                                    reason_code="result_not_found")
    state = rig.controller.run_until_pause(state)
    assert state.status is RunStatus.COMPLETED and state.usage.plans == 2
    assert state.usage.iterations == iterations + 2


def test_a_rejected_plan_is_waited_for_under_the_next_revision_number():
    planner = MailboxPlanner()
    rig = rig_with(planner)
    planner.plans[1] = PlanProposal(plan=[{"id": "s1", "capability": "nope"}])
    state = rig.controller.run_until_pause(rig.state)
    assert state.status is RunStatus.RUNNING and state.planning.reason_code == "plan_rejected"
    assert [e.code for e in state.planning.validation_errors] == ["unknown_capability"]
    assert planner.requests[-1].revision == 2
    assert planner.requests[-1].validation_errors == state.planning.validation_errors


def test_the_deadline_still_stops_a_run_waiting_for_its_plan():
    planner = MailboxPlanner()
    rig = rig_with(planner, deadline_s=10)
    state = rig.controller.advance(rig.state).state
    rig.clock.advance(11)
    transition = rig.controller.advance(state)
    assert transition.state.stop_reason == "budget_exhausted:deadline"
    assert isinstance(transition.events[-1], RunStopped)


def test_the_request_tells_the_planner_how_much_time_is_left():
    planner = MailboxPlanner()
    rig = rig_with(planner, deadline_s=30)
    rig.clock.advance(12)
    rig.controller.advance(rig.state)
    request = planner.requests[-1]
    assert request.deadline_at == 30 and request.remaining_s == 18


def test_errors_reported_by_the_planner_reject_the_plan_with_exactly_those_errors():
    planner = MailboxPlanner()
    rig = rig_with(planner)
    error = PlanError("malformed_plan", "the model's answer is not valid JSON")
    planner.plans[1] = PlanProposal(plan="Sure! Here is a plan:", tokens=120, errors=(error,), raw_output="Sure!")
    transition = rig.controller.advance(rig.state)
    proposed = [e for e in transition.events if isinstance(e, PlanProposed)][0]
    assert not proposed.accepted and proposed.validation_errors == (error,)
    assert proposed.tokens == 120 and proposed.planner_output == "Sure!"
    assert transition.state.usage.tokens == 120
    planner.plans[2] = replace(planner.plans[1])
    state = rig.controller.run_until_pause(transition.state)
    assert state.stop_reason == "plan_rejected" and "not valid JSON" in state.stop_detail


def test_no_further_plan_stops_stalled_and_still_counts_its_tokens():
    planner = MailboxPlanner()
    rig = rig_with(planner)
    planner.plans[1] = PlanProposal(plan=None, tokens=30, cost=0.5, no_further_plan=True)
    state = rig.controller.run_until_pause(rig.state)
    assert state.stop_reason == "stalled" and state.usage.tokens == 30 and state.usage.cost == 0.5
    assert state.usage.plans == 0
