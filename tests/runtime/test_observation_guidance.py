"""Retry guidance follows the side effect: a failure that may have committed is never to be repeated
blindly, whatever its error class says (a timeout or a lost worker is transient, its effect may not be)."""
import json
from pathlib import Path

from runtime.events import AttemptFinished
from runtime.observation import ErrorCode, Observation, SideEffectStatus, Status
from runtime.sim.scenario import run_scenario

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def test_a_transient_failure_that_changed_nothing_says_retry():
    failed = Observation.failure(ErrorCode.TIMEOUT, "took too long")
    assert failed.status is Status.RETRYABLE and failed.retry_guidance.startswith("Retry the same call")


def test_a_transient_failure_that_may_have_committed_says_never_repeat_blindly():
    failed = Observation.failure(ErrorCode.CONNECTION_ERROR, "the worker was lost",
                                 side_effect=SideEffectStatus.UNKNOWN)
    # The error class is unchanged (the run's own keyed re-send and lookup depend on it)...
    assert failed.status is Status.RETRYABLE and failed.error_code is ErrorCode.CONNECTION_ERROR
    # ...what a reader is told to do is not a retry.
    assert "never repeat blindly" in failed.retry_guidance


def test_a_write_that_timed_out_and_stopped_the_run_records_that_guidance():
    result = run_scenario(SCENARIOS / "commit_then_timeout_outcome_unknown.json")
    assert result.state.stop_reason == "terminal_failure:outcome_unknown"
    last = [e for e in result.events if isinstance(e, AttemptFinished)][-1].observation
    assert last.side_effect is SideEffectStatus.UNKNOWN and "never repeat blindly" in last.retry_guidance


def test_a_lookup_that_finds_nothing_committed_makes_it_an_ordinary_failure_again():
    data = json.loads((SCENARIOS / "commit_then_timeout_status_lookup.json").read_text())
    data["capabilities"][0]["responses"] = [{"raise": "timeout"}]  # timed out before it committed
    data.pop("expect")
    result = run_scenario(data)
    looked = [e.observation for e in result.events if isinstance(e, AttemptFinished) and e.kind == "lookup"]
    assert [o.side_effect for o in looked] == [SideEffectStatus.NOT_COMMITTED]
    assert looked[0].retry_guidance.startswith("Retry the same call")
