from runtime.approvals import ApprovalDecision, ApprovalRequest
from runtime.capability import CapabilitySpec, SideEffect
from runtime.observation import ErrorCode, SideEffectStatus, Status
from runtime.planning import PlanningRequest
from runtime.sim.planners import DirectPlanner, ScriptedPlanner
from runtime.sim.simulation import ScriptedApprovals, SimulatedCapabilities, SimulatedClock, StaticAuthorizer

READ = CapabilitySpec(name="read", timeout_s=2)
WRITE = CapabilitySpec(name="write", side_effect=SideEffect.WRITE, timeout_s=2)
IDEMPOTENT = CapabilitySpec(name="write", side_effect=SideEffect.WRITE, timeout_s=2, idempotent=True)
LOOKUP = CapabilitySpec(name="write", side_effect=SideEffect.WRITE, timeout_s=2, status_lookup=True)


def sim(responses):
    clock = SimulatedClock()
    return SimulatedCapabilities(responses, clock), clock


def call(executor, spec, key=None, timeout=2):
    return executor.execute(spec, {}, idempotency_key=key, timeout_s=timeout, trace_id="t", span_id="s")


def test_responses_are_consumed_in_order_and_the_last_repeats():
    executor, _ = sim({"read": [{"return": 1}, {"return": 2}]})
    assert [call(executor, READ).output for _ in range(4)] == [1, 2, 2, 2]


def test_latency_advances_the_clock_and_above_the_timeout_is_a_timeout_costing_the_timeout():
    executor, clock = sim({"read": [{"return": 1, "latency_s": 1.5}, {"return": 1, "latency_s": 9}]})
    assert call(executor, READ).status is Status.OK and clock.now() == 1.5
    obs = call(executor, READ)
    assert obs.error_code is ErrorCode.TIMEOUT and clock.now() == 3.5


def test_http_statuses_map_to_error_codes_and_retry_after_is_read():
    executor, _ = sim({"read": [{"http_status": 503, "body": {"e": 1}}, {"http_status": 429, "headers": {"Retry-After": "7"}},
                                {"http_status": 404}, {"http_status": 200, "body": {"ok": True}}]})
    first, second, third, fourth = (call(executor, READ) for _ in range(4))
    assert (first.error_code, first.status, first.output) == (ErrorCode.SERVER_ERROR, Status.RETRYABLE, {"e": 1})
    assert (second.error_code, second.retry_after_s) == (ErrorCode.RATE_LIMITED, 7.0)
    assert third.status is Status.TERMINAL
    assert fourth.output == {"ok": True} and fourth.status is Status.OK


def test_a_write_commits_and_reports_it():
    executor, _ = sim({"write": [{"return": {"id": 1}}]})
    obs = call(executor, WRITE, key="k")
    assert obs.side_effect is SideEffectStatus.COMMITTED and obs.state_changed and executor.commits == 1


def test_commit_then_timeout_commits_but_the_caller_sees_an_unknown_timeout():
    executor, clock = sim({"write": [{"commit_then_timeout": True, "return": {"id": 1}}]})
    obs = call(executor, WRITE, key="k")
    assert (obs.error_code, obs.side_effect, executor.commits, clock.now()) == (
        ErrorCode.TIMEOUT, SideEffectStatus.UNKNOWN, 1, 2)


def test_an_idempotent_capability_returns_the_first_result_for_the_same_key_and_commits_nothing_new():
    executor, _ = sim({"write": [{"commit_then_timeout": True, "return": {"id": 1}}, {"return": {"id": 2}}]})
    call(executor, IDEMPOTENT, key="k")
    again = call(executor, IDEMPOTENT, key="k")
    assert again.output == {"id": 1} and executor.commits == 1
    assert call(executor, IDEMPOTENT, key="other").output == {"id": 2} and executor.commits == 2


def test_a_status_lookup_answers_truthfully():
    executor, _ = sim({"write": [{"commit_then_timeout": True, "return": {"id": 1}}, {"raise": "timeout"}]})
    call(executor, LOOKUP, key="a")
    call(executor, LOOKUP, key="b")
    committed = executor.lookup_status(LOOKUP, {}, idempotency_key="a", timeout_s=1)
    missing = executor.lookup_status(LOOKUP, {}, idempotency_key="b", timeout_s=1)
    assert (committed.side_effect, committed.output) == (SideEffectStatus.COMMITTED, {"id": 1})
    assert missing.side_effect is SideEffectStatus.NOT_COMMITTED
    assert executor.lookup_status(WRITE, {}, idempotency_key="a", timeout_s=1) is None


def test_scripted_approvals_answer_requests_in_order_and_then_stay_undecided():
    book = ScriptedApprovals([ApprovalDecision.approve("ok")])
    first = ApprovalRequest(kind="step", run_id="r", revision=1, step_id="s1", capability="c", arguments_hash="h1")
    second = ApprovalRequest(kind="step", run_id="r", revision=2, step_id="s1", capability="c", arguments_hash="h1")
    assert book.decision_for(first).approved and book.decision_for(first).approved
    assert book.decision_for(second) is None


def test_owner_permissions_omitted_means_all():
    assert StaticAuthorizer(None).permits("anything")
    assert not StaticAuthorizer([]).permits("anything")
    assert StaticAuthorizer([]).permits("")


def request(revision):
    return PlanningRequest(run_id="r", goal="g", completion=None, capabilities=(), history=(), previous_plan=(),
                           revision=revision)


def test_the_scripted_planner_is_stateless_and_reads_tokens():
    planner = ScriptedPlanner([[{"capability": "a"}], {"steps": [{"capability": "b"}], "tokens": 5, "cost": 0.1}])
    assert planner.propose(request(2)).tokens == 5
    assert planner.propose(request(1)).plan == [{"capability": "a"}]
    assert planner.propose(request(3)) is None


def test_the_direct_planner_proposes_one_step_once():
    planner = DirectPlanner("search", {"q": "x"})
    assert planner.propose(request(1)).plan[0]["capability"] == "search"
    assert planner.propose(request(2)) is None
