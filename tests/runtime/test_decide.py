from hypothesis import given
from hypothesis import strategies as st

from runtime.decide import Decision, decide
from runtime.observation import ErrorCode, Observation, Status
from runtime.stop import ReplanReason

OK = Observation.success({"documents": [{"id": 1}]})
EMPTY = Observation.success({"documents": []})
TIMEOUT = Observation.failure(ErrorCode.TIMEOUT)
FORBIDDEN = Observation.failure(ErrorCode.PERMISSION_DENIED)


def run(observation, **kw):
    kw.setdefault("repeated_without_progress", False)
    kw.setdefault("budget_exhausted", None)
    kw.setdefault("completion_verified", False)
    return decide(observation, **kw)


# -- the seed's two tests, in this runtime's vocabulary --------------------------------------

def test_repeated_failure_stops():
    obs = Observation(status=Status.RETRYABLE, state_changed=False, error_code=ErrorCode.TIMEOUT)
    assert decide(obs, repeated_without_progress=True, budget_exhausted=False,
                  completion_verified=False).decision == "stop_stalled"


def test_terminal_error_is_not_retried():
    obs = Observation(status=Status.TERMINAL, state_changed=False, error_code=ErrorCode.PERMISSION_DENIED)
    assert decide(obs, repeated_without_progress=False, budget_exhausted=False, completion_verified=False,
                  retry_allowed=True).decision == "stop_terminal_failure"


# -- every branch ----------------------------------------------------------------------------

def test_it_completes_when_the_criteria_are_verified_even_with_a_budget_exhausted():
    assert run(OK, completion_verified=True, budget_exhausted="tool_calls").decision is Decision.COMPLETE


def test_it_stops_on_the_deadline_without_verifying_even_a_complete_result():
    verdict = run(OK, completion_verified=True, deadline_passed=True)
    assert verdict.decision is Decision.STOP_BUDGET and verdict.budget == "deadline"


def test_it_stops_on_an_exhausted_budget_before_a_terminal_failure():
    verdict = run(FORBIDDEN, budget_exhausted="iterations")
    assert verdict.decision is Decision.STOP_BUDGET and verdict.budget == "iterations"


def test_a_seed_style_boolean_budget_flag_works():
    assert run(OK, budget_exhausted=True).decision is Decision.STOP_BUDGET


def test_it_stops_on_a_terminal_failure_before_a_stall():
    assert run(FORBIDDEN, repeated_without_progress=True).decision is Decision.STOP_TERMINAL_FAILURE


def test_it_stops_stalled_on_a_repeat_without_progress():
    assert run(EMPTY, repeated_without_progress=True).decision is Decision.STOP_STALLED


def test_a_repeat_that_changed_state_is_not_a_stall():
    changed = Observation.success({"documents": []}, state_changed=True)
    assert run(changed, repeated_without_progress=True).decision is Decision.REPLAN


def test_it_retries_a_retryable_failure_within_policy_and_budget():
    assert run(TIMEOUT, retry_allowed=True).decision is Decision.RETRY


def test_it_stops_when_the_policy_would_retry_but_the_run_retry_budget_is_spent():
    verdict = run(TIMEOUT, retry_allowed=True, retry_budget_left=False)
    assert verdict.decision is Decision.STOP_BUDGET and verdict.budget == "retries"


def test_it_replans_path_blocked_when_the_retry_policy_is_spent():
    # The step itself failed: not dependency_failed, which would blame a step it depends on.
    verdict = run(TIMEOUT, retry_allowed=False)
    assert verdict.decision is Decision.REPLAN and verdict.replan_reason is ReplanReason.PATH_BLOCKED


def test_it_polls_while_polling_is_allowed():
    assert run(OK, polling=True, poll_allowed=True).decision is Decision.POLL


def test_it_replans_path_blocked_when_polling_is_spent():
    verdict = run(OK, polling=True, poll_allowed=False)
    assert verdict.decision is Decision.REPLAN and verdict.replan_reason is ReplanReason.PATH_BLOCKED


def test_it_continues_with_the_next_step():
    assert run(OK, has_next_step=True).decision is Decision.CONTINUE


def test_it_replans_with_result_not_found_after_an_empty_last_result():
    verdict = run(EMPTY)
    assert verdict.decision is Decision.REPLAN and verdict.replan_reason is ReplanReason.RESULT_NOT_FOUND


def test_it_replans_with_new_information_after_a_useful_last_result():
    verdict = run(OK)
    assert verdict.decision is Decision.REPLAN and verdict.replan_reason is ReplanReason.NEW_INFORMATION


def test_every_verdict_has_a_reason():
    assert run(OK).reason and run(TIMEOUT, retry_allowed=True).reason


# -- precedence over every combination -------------------------------------------------------

observations = st.sampled_from([OK, EMPTY, TIMEOUT, FORBIDDEN, Observation.failure(ErrorCode.RATE_LIMITED),
                                Observation.success(None, state_changed=True),
                                Observation.failure(ErrorCode.TIMEOUT, state_changed=True)])


@given(obs=observations, repeated=st.booleans(), budget=st.sampled_from([None, "iterations", "tool_calls", "deadline"]),
       complete=st.booleans(), deadline=st.booleans(), retry=st.booleans(), retry_left=st.booleans(),
       polling=st.booleans(), poll=st.booleans(), has_next=st.booleans())
def test_the_precedence_holds_for_every_combination(obs, repeated, budget, complete, deadline, retry, retry_left,
                                                   polling, poll, has_next):
    verdict = decide(obs, repeated_without_progress=repeated, budget_exhausted=budget, completion_verified=complete,
                     deadline_passed=deadline, retry_allowed=retry, retry_budget_left=retry_left, polling=polling,
                     poll_allowed=poll, has_next_step=has_next)
    d = verdict.decision
    assert verdict.reason
    if deadline:
        assert (d, verdict.budget) == (Decision.STOP_BUDGET, "deadline")
    elif complete:
        assert d is Decision.COMPLETE
    elif budget:
        assert (d, verdict.budget) == (Decision.STOP_BUDGET, budget)
    elif obs.status is Status.TERMINAL:
        assert d is Decision.STOP_TERMINAL_FAILURE
    elif repeated and not obs.state_changed:
        assert d is Decision.STOP_STALLED
    elif obs.status is Status.RETRYABLE:
        expected = (Decision.RETRY if retry_left else Decision.STOP_BUDGET) if retry else Decision.REPLAN
        assert d is expected
    else:
        assert d in (Decision.POLL, Decision.CONTINUE, Decision.REPLAN)
        assert (d is Decision.POLL) == (polling and poll)
        if d is Decision.REPLAN:
            assert verdict.replan_reason is not None
    if d is Decision.RETRY:
        assert obs.status is Status.RETRYABLE
